"""Classification step time with and without `optimizer.weight_averaging`, on the tweets of bench/accuracy.py.

    .venv/bin/pip install -e ".[bench]"
    .venv/bin/python bench/weight_averaging.py [--rounds 10] [--steps 100]

The moving average of the weights is updated after every step: a read of
every trainable weight and of its average, and a write of the average. This
trains the default classifier (vocabulary learned from the 90% fit slice, as
bench/length_bucket.py does) on the same batches with the default decay and
with 0 (off), alternated A/B for `--rounds` rounds, and prints the median
milliseconds per step of each and their ratio.
"""

import argparse
import dataclasses
import os
import tempfile

from common import ab_figures, alternated_rounds, timed_steps, write_results  # sets up the path and TF's logging

import tensorflow as tf  # noqa: E402

from accuracy import default_fit_split  # noqa: E402
from pipeline.dataset import train_dataset  # noqa: E402
from pipeline.model import build_model  # noqa: E402
from pipeline.trainer import Trainer, build_optimizer  # noqa: E402


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--cache", default=os.path.join("bench", "cache"), help="where the corpus is fetched to")
    parser.add_argument("--rounds", type=int, default=10, help="A/B rounds; each arm's median is reported")
    parser.add_argument("--steps", type=int, default=100, help="timed training steps per arm and round")
    parser.add_argument(
        "--out",
        default=os.path.join("bench", "results", "weight_averaging.json"),
        help="JSON of the medians and each round's times",
    )
    args = parser.parse_args()
    config, split = default_fit_split(args.cache)
    arms = {"off": 0.0, "default": config.optimizer.weight_averaging}
    with tempfile.TemporaryDirectory() as directory:
        trainers = {}
        for name, decay in arms.items():
            optimizer_config = dataclasses.replace(config.optimizer, weight_averaging=decay)
            trainers[name] = Trainer(
                build_model(config.model),
                build_optimizer(optimizer_config, 10_000),
                tf.distribute.get_strategy(),
                config.train,
                optimizer_config,
                os.path.join(directory, name),
            )

        def seconds(name, epoch):
            # The same batches for both arms of a round (one epoch's shuffle).
            iterator = iter(
                train_dataset(
                    split,
                    config.train.batch_size,
                    config.train.seed,
                    epoch=epoch,
                    length_bucket=config.train.length_bucket,
                )
            )
            return timed_steps(trainers[name], iterator, args.steps, warmup_steps=1)

        times = alternated_rounds(arms, args.rounds, seconds, flip=False)
    results = {
        "decay": arms["default"],
        "steps": args.steps,
        "batch_size": config.train.batch_size,
        **ab_figures(times, args.steps, "off", "default"),
    }
    print(
        f"{args.rounds} rounds of {args.steps} steps, batch {config.train.batch_size}, max length "
        f"{config.model.max_length}: {results['median_ms_per_step']['off']:.1f} ms/step without averaging, "
        f"{results['median_ms_per_step']['default']:.1f} with (decay {arms['default']}): "
        f"{results['ratio']:.3f}x the time; per round " + ", ".join(f"{r:.3f}x" for r in results["round_ratios"])
    )
    write_results(results, args.out)


if __name__ == "__main__":
    main()
