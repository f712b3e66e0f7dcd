"""Training time with one step per host round trip against `train.steps_per_execution`'s default.

    .venv/bin/pip install -e ".[bench]"
    .venv/bin/python bench/host_loop.py [--rounds 6] [--steps 200]

`Trainer.fit` runs `train.steps_per_execution` steps per call of its
`tf.while_loop`, then updates the progress bar, writes the loss and accuracy
summaries and checks the loss is finite: a sync and a new call per round
trip. This trains the default classifier (vocabulary learned from the 90%
fit slice, as bench/length_bucket.py does) through `fit`, an epoch of
`--steps` steps per round, with one step per round trip and with the
default, alternated A/B (the order flipped every round; both arms on the
same batches in a round), and prints the median milliseconds per step of
each, their ratio and what one round trip costs (the difference per step,
over the round trips saved per step). The first round (tracing, first steps
of most shapes) is not counted.
"""

import argparse
import dataclasses
import os
import tempfile

from common import ab_figures, alternated_rounds, timed_fit, write_results  # sets up the path and TF's logging

import tensorflow as tf  # noqa: E402

from accuracy import default_fit_split  # noqa: E402
from pipeline.dataset import train_dataset  # noqa: E402
from pipeline.model import build_model  # noqa: E402
from pipeline.trainer import Trainer, build_optimizer  # noqa: E402


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--cache", default=os.path.join("bench", "cache"), help="where the corpus is fetched to")
    parser.add_argument("--rounds", type=int, default=6, help="A/B rounds counted; each arm's median is reported")
    parser.add_argument("--steps", type=int, default=200, help="training steps per arm and round (one epoch)")
    parser.add_argument(
        "--batch-size",
        type=int,
        help="default: the config's; a small one (2) leaves the "
        "step's compute small next to the round trip's cost, which it then measures",
    )
    parser.add_argument(
        "--out",
        default=os.path.join("bench", "results", "host_loop.json"),
        help="JSON of the medians and each round's times",
    )
    args = parser.parse_args()
    config, split = default_fit_split(args.cache)
    if args.batch_size:
        config.train = dataclasses.replace(config.train, batch_size=args.batch_size)
    arms = {"one": 1, "default": config.train.steps_per_execution}
    with tempfile.TemporaryDirectory() as directory:
        trainers = {}
        for name, steps_per_execution in arms.items():
            train_config = dataclasses.replace(config.train, steps_per_execution=steps_per_execution)
            trainers[name] = Trainer(
                build_model(config.model),
                build_optimizer(config.optimizer, 10_000),
                tf.distribute.get_strategy(),
                train_config,
                config.optimizer,
                os.path.join(directory, name),
            )

        def seconds(name, round_):
            def make_dataset(epoch, skip_batches, input_context=None):  # the round's batches
                return train_dataset(
                    split,
                    config.train.batch_size,
                    config.train.seed,
                    epoch=round_,
                    skip_batches=skip_batches,
                    input_context=input_context,
                    length_bucket=config.train.length_bucket,
                )

            return timed_fit(trainers[name], make_dataset, args.steps * config.train.batch_size)

        times = alternated_rounds(arms, args.rounds, seconds)
    results = {
        "steps_per_execution": arms["default"],
        "steps": args.steps,
        "batch_size": config.train.batch_size,
        **ab_figures(times, args.steps, "one", "default"),
    }
    saved = results["median_ms_per_step"]["one"] - results["median_ms_per_step"]["default"]
    results["round_trip_ms"] = saved / (1 - 1 / arms["default"])  # round trips saved per step
    print(
        f"{args.rounds} rounds of {args.steps} steps, batch {config.train.batch_size}, max length "
        f"{config.model.max_length}: {results['median_ms_per_step']['one']:.1f} ms/step with one step per "
        f"round trip, {results['median_ms_per_step']['default']:.1f} with {arms['default']}: "
        f"{results['ratio']:.3f}x the time, {results['round_trip_ms']:.1f} ms per round trip saved; per round "
        + ", ".join(f"{r:.3f}x" for r in results["round_ratios"])
    )
    write_results(results, args.out)


if __name__ == "__main__":
    main()
