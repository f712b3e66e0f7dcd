"""Training time per sequence at several batch sizes, A/B/C in one process.

    .venv/bin/pip install -e ".[bench]"
    .venv/bin/python bench/batch_size.py [--task masked-lm|classification] [--batch-sizes 32,64,128]
        [--rounds 3] [--sequences 5120]

Trains the default model of `--task` on the tweets' 90% fit slice (its
vocabulary learned there, as a default run learns it; batches length-bucketed,
and for masked-LM masked, as by default) through `Trainer.fit`, with the
config that task trains with (masked-LM: `masked_lm_configs`;
classification: `train`, its weight averaging included): in every round,
each batch size trains `--sequences` sequences (one epoch of that many), in
an order flipped every round; the first round (tracing, first steps of most
shapes) is not counted. Prints the median milliseconds per sequence of each
batch size and its ratio to the first's, and writes them as JSON. A bigger
step shares its fixed costs (the optimizer's update of every weight, the
weight average's, the host loop's round trip) among more sequences and feeds
the matmuls larger operands.
"""

import argparse
import functools
import os
import tempfile

from common import alternated_rounds, timed_fit, write_results  # sets up the path and TF's logging

import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

from accuracy import default_fit_split, default_fit_vocabulary, read  # noqa: E402
from pipeline.config import override  # noqa: E402
from pipeline.dataset import train_dataset  # noqa: E402
from pipeline.masking import masked_lm_dataset  # noqa: E402
from pipeline.model import build_model, build_pretraining_model  # noqa: E402
from pipeline.pretrain import masked_lm_configs  # noqa: E402
from pipeline.text_stream import sequences_of  # noqa: E402
from pipeline.trainer import Trainer, build_optimizer  # noqa: E402


def training_data(task, cache):
    """`(config, data, count)`: the default config resolved for the tweets'
    fit slice and what `task` trains on there: the texts' `sequences_of` for
    masked-LM, the tokenized `Split` for classification; `count` texts."""
    if task == "classification":
        config, split = default_fit_split(cache)
        return config, split, len(split)
    config, fit_path, _, tokenizer = default_fit_vocabulary(cache)
    texts = read(fit_path)[0]
    return config, sequences_of(texts, tokenizer), len(texts)


def arm(task, config, data, size, directory):
    """`(trainer, make_dataset)` training the `task`'s default model on `data` in steps of `size`."""
    if task == "masked-lm":
        train_config, optimizer_config = masked_lm_configs(override(config, {"pretrain": {"batch_size": size}}))
        model = build_pretraining_model(config.model)
        make = functools.partial(
            masked_lm_dataset,
            data,
            config.model.vocabulary_size,
            config.model.max_length,
            size,
            config.pretrain,
            config.train.seed,
            length_bucket=config.train.length_bucket,
        )
    else:
        train_config, optimizer_config = override(config, {"train": {"batch_size": size}}).train, config.optimizer
        model = build_model(config.model)
        make = functools.partial(train_dataset, data, size, config.train.seed, length_bucket=config.train.length_bucket)
    trainer = Trainer(
        model,
        build_optimizer(optimizer_config, 10_000),
        tf.distribute.get_strategy(),
        train_config,
        optimizer_config,
        directory,
    )
    return trainer, make


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--cache", default=os.path.join("bench", "cache"), help="where the corpus is fetched to")
    parser.add_argument(
        "--task",
        choices=("masked-lm", "classification"),
        default="masked-lm",
        help="what trains: pre-training's masked-LM model or the classifier",
    )
    parser.add_argument("--batch-sizes", default="32,64,128", help="comma-separated; ratios are to the first")
    parser.add_argument("--rounds", type=int, default=3, help="rounds counted; each batch size's median is reported")
    parser.add_argument("--sequences", type=int, default=5120, help="sequences per batch size and round")
    parser.add_argument(
        "--out",
        default=os.path.join("bench", "results", "batch_size.json"),
        help="JSON of the task, the medians and each round's times",
    )
    args = parser.parse_args()
    batch_sizes = [int(size) for size in args.batch_sizes.split(",")]
    config, data, count = training_data(args.task, args.cache)
    with tempfile.TemporaryDirectory() as directory:
        arms = {size: arm(args.task, config, data, size, os.path.join(directory, str(size))) for size in batch_sizes}

        def seconds(size, round_):
            trainer, make = arms[size]
            steps = args.sequences // size

            def make_dataset(epoch, skip_batches, input_context=None):  # the round's shuffle (and masking)
                return make(epoch=round_, skip_batches=skip_batches, input_context=input_context).take(steps)

            return timed_fit(trainer, make_dataset, steps * size) / (steps * size)

        times = alternated_rounds(batch_sizes, args.rounds, seconds)
    medians = {size: float(np.median(values)) for size, values in times.items()}
    first = batch_sizes[0]
    results = {
        "task": args.task,
        "sequences": args.sequences,
        "texts": count,
        "max_length": config.model.max_length,
        "median_ms_per_sequence": {str(size): 1000 * median for size, median in medians.items()},
        "ratio_to_first": {str(size): median / medians[first] for size, median in medians.items()},
        "round_ms_per_sequence": {str(size): [1000 * value for value in values] for size, values in times.items()},
    }
    print(
        f"{args.rounds} rounds of {args.sequences} sequences, {args.task} on {count} tweets, "
        f"max length {config.model.max_length}:"
    )
    print(f"{'batch':>6}{'ms/sequence':>13}{'ratio':>8}  rounds")
    for size in batch_sizes:
        print(
            f"{size:>6}{1000 * medians[size]:>13.3f}{medians[size] / medians[first]:>7.3f}x  "
            + ", ".join(f"{1000 * value:.3f}" for value in times[size])
        )
    write_results(results, args.out)


if __name__ == "__main__":
    main()
