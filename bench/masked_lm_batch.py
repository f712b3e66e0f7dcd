"""Masked-LM training time per sequence at several batch sizes, A/B/C in one process.

    .venv/bin/pip install -e ".[bench]"
    .venv/bin/python bench/masked_lm_batch.py [--batch-sizes 32,64,128] [--rounds 3] [--sequences 5120]

Pre-trains the default masked-LM model on the tweets' 90% fit slice (its
vocabulary learned there, as a default run learns it; batches masked and
length-bucketed as by default) through `Trainer.fit`: in every round, each
batch size trains `--sequences` sequences (one epoch of that many), in an
order flipped every round; the first round (tracing, first steps of most
shapes) is not counted. Prints the median milliseconds per sequence of each
batch size and its ratio to the first's, and writes them as JSON. A bigger
step shares its fixed costs (the optimizer's update of every weight, the
host loop's round trip) among more sequences and feeds the matmuls larger
operands.
"""

import argparse
import functools
import os
import tempfile

from common import alternated_rounds, timed_fit, write_results  # sets up the path and TF's logging

import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

from accuracy import fetch_corpus, read, validation_split  # noqa: E402
from pipeline.config import Config, override  # noqa: E402
from pipeline.dataset import learn_tokenizer  # noqa: E402
from pipeline.masking import masked_lm_dataset, word_ids_of  # noqa: E402
from pipeline.model import build_pretraining_model  # noqa: E402
from pipeline.pretrain import masked_lm_train_config  # noqa: E402
from pipeline.trainer import Trainer, build_optimizer  # noqa: E402


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--cache", default=os.path.join("bench", "cache"), help="where the corpus is fetched to")
    parser.add_argument("--batch-sizes", default="32,64,128", help="comma-separated; ratios are to the first")
    parser.add_argument("--rounds", type=int, default=3, help="rounds counted; each batch size's median is reported")
    parser.add_argument("--sequences", type=int, default=5120, help="sequences per batch size and round")
    parser.add_argument("--out", default=os.path.join("bench", "results", "masked_lm_batch.json"),
                        help="JSON of the medians and each round's times")
    args = parser.parse_args()
    batch_sizes = [int(size) for size in args.batch_sizes.split(",")]
    fit_path, _ = validation_split(fetch_corpus(args.cache)[0], args.cache)
    texts = read(fit_path)[0]
    config = Config()
    tokenizer = learn_tokenizer(texts, config.data, config.model.max_length)
    config = override(config, {"model": {"vocabulary_size": len(tokenizer.vocabulary),
                                         "max_length": tokenizer.max_length}})
    word_ids = word_ids_of(texts, tokenizer)
    with tempfile.TemporaryDirectory() as directory:
        arms = {}
        for size in batch_sizes:
            train_config = masked_lm_train_config(override(config, {"pretrain": {"batch_size": size}}))
            trainer = Trainer(build_pretraining_model(config.model), build_optimizer(train_config, 10_000),
                              tf.distribute.get_strategy(), train_config, os.path.join(directory, str(size)))
            make = functools.partial(masked_lm_dataset, word_ids, len(tokenizer.vocabulary), tokenizer.max_length,
                                     size, config.pretrain, config.train.seed,
                                     length_bucket=config.train.length_bucket)
            arms[size] = trainer, make

        def seconds(size, round_):
            trainer, make = arms[size]
            steps = args.sequences // size

            def make_dataset(epoch, skip_batches, input_context=None):  # the round's masking
                return make(epoch=round_, skip_batches=skip_batches, input_context=input_context).take(steps)

            return timed_fit(trainer, make_dataset, steps * size) / (steps * size)

        times = alternated_rounds(batch_sizes, args.rounds, seconds)
    medians = {size: float(np.median(values)) for size, values in times.items()}
    first = batch_sizes[0]
    results = {"sequences": args.sequences, "texts": len(texts), "max_length": config.model.max_length,
               "median_ms_per_sequence": {str(size): 1000 * median for size, median in medians.items()},
               "ratio_to_first": {str(size): median / medians[first] for size, median in medians.items()},
               "round_ms_per_sequence": {str(size): [1000 * value for value in values]
                                         for size, values in times.items()}}
    print(f"{args.rounds} rounds of {args.sequences} sequences, masked-LM on {len(texts)} tweets, "
          f"max length {config.model.max_length}:")
    print(f"{'batch':>6}{'ms/sequence':>13}{'ratio':>8}  rounds")
    for size in batch_sizes:
        print(f"{size:>6}{1000 * medians[size]:>13.3f}{medians[size] / medians[first]:>7.3f}x  "
              + ", ".join(f"{1000 * value:.3f}" for value in times[size]))
    write_results(results, args.out)


if __name__ == "__main__":
    main()
