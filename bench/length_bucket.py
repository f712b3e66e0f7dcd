"""Classification step time against `train.length_bucket`, on the tweets of bench/accuracy.py.

    .venv/bin/pip install -e ".[bench]"
    .venv/bin/python bench/length_bucket.py [--buckets 16,8,4] [--rounds 10] [--steps 100]

Training batches group texts of similar length and are cut to their longest
one rounded up to a multiple of `train.length_bucket`. A smaller bucket
computes fewer padding positions but gives the batches more shapes. This
trains the default classifier (vocabulary learned from the 90% fit slice, as
the default run does) on the same batches with each bucket, alternated A/B
for `--rounds` rounds, and prints the share of real tokens among the
positions computed and the median milliseconds per step. The model and the
logits are the same whatever the bucket (padding is masked and zeroed).
"""

import argparse
import os
import tempfile

from common import real_token_fraction, timed_steps, write_results  # sets up the path and TF's logging

import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

from accuracy import default_fit_split  # noqa: E402
from pipeline.dataset import train_dataset  # noqa: E402
from pipeline.model import build_model  # noqa: E402
from pipeline.trainer import Trainer, build_optimizer  # noqa: E402


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--cache", default=os.path.join("bench", "cache"), help="where the corpus is fetched to")
    parser.add_argument(
        "--buckets",
        type=lambda v: [int(s) for s in v.split(",")],
        default=[16, 8, 4],
        help="comma-separated values of train.length_bucket, the first being the ratios' baseline",
    )
    parser.add_argument("--rounds", type=int, default=10, help="A/B rounds; each bucket's median is reported")
    parser.add_argument("--steps", type=int, default=100, help="timed training steps per bucket and round")
    parser.add_argument(
        "--out",
        default=os.path.join("bench", "results", "length_bucket.json"),
        help="JSON of the real-token shares, the medians and each round's times",
    )
    args = parser.parse_args()
    config, split = default_fit_split(args.cache)
    batch_size = config.train.batch_size
    model = build_model(config.model)
    with tempfile.TemporaryDirectory() as directory:
        trainer = Trainer(
            model,
            build_optimizer(config.optimizer, 10_000),
            tf.distribute.get_strategy(),
            config.train,
            config.optimizer,
            directory,
        )

        def seconds(bucket, epoch, steps):
            # The same batches for every bucket of a round (one epoch's shuffle).
            iterator = iter(train_dataset(split, batch_size, config.train.seed, epoch=epoch, length_bucket=bucket))
            return timed_steps(trainer, iterator, steps, warmup_steps=1)

        for bucket in args.buckets:  # tracing and the first steps of most shapes
            seconds(bucket, 0, args.steps)
        times = {bucket: [] for bucket in args.buckets}
        for round_ in range(1, args.rounds + 1):
            for bucket in args.buckets:
                times[bucket].append(seconds(bucket, round_, args.steps))
    baseline = np.median(times[args.buckets[0]])
    results = {"max_length": config.model.max_length, "batch_size": batch_size, "steps": args.steps, "buckets": {}}
    print(f"max length {config.model.max_length}, batch {batch_size}, {args.rounds} rounds of {args.steps} steps")
    print(f"{'bucket':>8}{'real tokens':>13}{'ms/step':>10}{'speed-up':>10}")
    for bucket in args.buckets:
        median = float(np.median(times[bucket]))
        results["buckets"][str(bucket)] = {
            "real_token_fraction": real_token_fraction(split, batch_size, bucket),
            "median_ms_per_step": 1000 * median / args.steps,
            "speedup": float(baseline / median),
            "round_seconds": [float(t) for t in times[bucket]],
        }
        row = results["buckets"][str(bucket)]
        print(
            f"{bucket:>8}{row['real_token_fraction']:>13.1%}{row['median_ms_per_step']:>10.1f}{row['speedup']:>9.2f}x"
        )
    write_results(results, args.out)


if __name__ == "__main__":
    main()
