"""Input pipeline throughput next to training throughput, in one run.

    .venv/bin/python bench/input_pipeline.py [--examples 30000] [--out bench/results/input_pipeline.json]

Writes a demo corpus of `--examples` sentences as CSV and as TFRecord, then
measures, on this machine and in this process:
  - cold input: read + validate + tokenize + batch, from each format (the
    work done once per run; later epochs reuse the int32 arrays);
  - warm input: an epoch of shuffled static-shape batches from those arrays;
  - training: steady-state examples/s of the default model (first compiled
    steps excluded);
  - masked-LM input: tokenizing the texts into word ids (once per run),
    then epochs of pre-training's batches from them (shuffled, grouped by
    length as by default, masked anew every step): the first epoch, which
    traces the masking, and the later ones (each a new dataset, as in
    training);
  - masked-LM training: steady-state texts/s of the pre-training model, in
    the steps pre-training takes (`pipeline.pretrain.masked_lm_configs`);
and prints their ratios. The target is input >= 20x training.
"""

import argparse
import csv
import os
import tempfile
import time

from common import write_results  # sets up the path and TF's logging

import tensorflow as tf  # noqa: E402

from pipeline.config import Config  # noqa: E402
from pipeline.dataset import learn_vocabulary, load_split, train_dataset  # noqa: E402
from pipeline.demo_corpus import generate  # noqa: E402
from pipeline.masking import masked_lm_dataset  # noqa: E402
from pipeline.model import build_model, build_pretraining_model  # noqa: E402
from pipeline.pretrain import masked_lm_configs  # noqa: E402
from pipeline.text_stream import sequences_of  # noqa: E402
from pipeline.trainer import Trainer, build_optimizer  # noqa: E402


def write_corpus(directory, count):
    rows = generate(count, seed=0)
    csv_path, record_path = os.path.join(directory, "corpus.csv"), os.path.join(directory, "corpus.tfrecord")
    with open(csv_path, "w", encoding="utf-8", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(["text", "label"])
        writer.writerows(rows)
    with tf.io.TFRecordWriter(record_path) as writer:
        for text, label in rows:
            features = {
                name: tf.train.Feature(bytes_list=tf.train.BytesList(value=[value.encode()]))
                for name, value in (("text", text), ("label", label))
            }
            writer.write(tf.train.Example(features=tf.train.Features(feature=features)).SerializeToString())
    return csv_path, record_path


def cold_input(path, config, tokenizer, names):
    start = time.perf_counter()
    split = load_split(path, config.data, tokenizer, names)
    batches = sum(1 for _ in train_dataset(split, config.train.batch_size, seed=0))
    return split, batches * config.train.batch_size / (time.perf_counter() - start)


def warm_input(split, config):
    start, count = time.perf_counter(), 0
    for epoch in range(3):
        for ids, _ in train_dataset(split, config.train.batch_size, seed=0, epoch=epoch):
            count += int(ids.shape[0])
    return count / (time.perf_counter() - start)


def masked_lm_batches(sequences, tokenizer, config, epoch=0):
    return masked_lm_dataset(
        sequences,
        len(tokenizer.vocabulary),
        tokenizer.max_length,
        config.pretrain.batch_size,
        config.pretrain,
        seed=0,
        epoch=epoch,
        length_bucket=config.train.length_bucket,
    )


def masked_lm_input(texts, tokenizer, config, epochs=3):
    """`(sequences, texts/s tokenizing and packing them, texts/s of the first
    epoch of masked batches, texts/s of the later ones)`; as in training,
    every epoch is a new dataset, and the first traces the masking."""
    start = time.perf_counter()
    sequences = sequences_of(texts, tokenizer)
    sequences.lengths()  # tokenized, packed and cached
    rates = [len(texts) / (time.perf_counter() - start)]
    for epoch in range(epochs):
        start, count = time.perf_counter(), 0
        for features, _, _ in masked_lm_batches(sequences, tokenizer, config, epoch):
            count += int(features["token_ids"].shape[0])
        rates.append(count / (time.perf_counter() - start))
    return sequences, rates[0], rates[1], len(rates[2:]) / sum(1 / rate for rate in rates[2:])


def training(model, dataset, configs, model_dir, steps=30, warmup_steps=5):
    """Steady-state examples/s of `model` trained on `dataset` with `configs`,
    `(train_config, optimizer_config)` (batches of `train_config.batch_size`)."""
    strategy = tf.distribute.get_strategy()
    train_config, optimizer_config = configs
    trainer = Trainer(
        model, build_optimizer(optimizer_config, 1000), strategy, train_config, optimizer_config, model_dir
    )
    iterator = iter(dataset.repeat())
    trainer._train_steps(iterator, tf.constant(warmup_steps))  # tracing and first compiled steps
    start = time.perf_counter()
    trainer._train_steps(iterator, tf.constant(steps))
    float(trainer.loss.result())  # waits for the steps to finish
    return steps * train_config.batch_size / (time.perf_counter() - start)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--examples", type=int, default=30_000, help="demo sentences written as CSV and TFRecord")
    parser.add_argument(
        "--out",
        default=os.path.join("bench", "results", "input_pipeline.json"),
        help="JSON of the examples/s of each stage",
    )
    args = parser.parse_args()
    config = Config()
    with tempfile.TemporaryDirectory() as directory:
        csv_path, record_path = write_corpus(directory, args.examples)
        names, tokenizer = learn_vocabulary(csv_path, config.data, config.model.max_length)
        config.model.vocabulary_size, config.model.num_classes = len(tokenizer.vocabulary), len(names)
        config.model.max_length = tokenizer.max_length  # derived from the corpus by default
        split, csv_rate = cold_input(csv_path, config, tokenizer, names)
        _, record_rate = cold_input(record_path, config, tokenizer, names)
        warm_rate = warm_input(split, config)
        train_rate = training(
            build_model(config.model),
            train_dataset(split, config.train.batch_size, seed=0),
            (config.train, config.optimizer),
            directory,
        )
        texts = [text for text, _ in generate(args.examples, seed=0)]  # the corpus's
        sequences, word_ids_rate, masked_first_rate, masked_rate = masked_lm_input(texts, tokenizer, config)
        masked_train_rate = training(
            build_pretraining_model(config.model),
            masked_lm_batches(sequences, tokenizer, config),
            masked_lm_configs(config),
            os.path.join(directory, "pretrain"),
        )
    results = {
        "examples": args.examples,
        "max_length": config.model.max_length,
        "batch_size": config.train.batch_size,
        "masked_lm_batch_size": config.pretrain.batch_size,
        "cold_csv_examples_per_s": csv_rate,
        "cold_tfrecord_examples_per_s": record_rate,
        "warm_examples_per_s": warm_rate,
        "training_examples_per_s": train_rate,
        "masked_lm_word_ids_examples_per_s": word_ids_rate,
        "masked_lm_first_epoch_examples_per_s": masked_first_rate,
        "masked_lm_input_examples_per_s": masked_rate,
        "masked_lm_training_examples_per_s": masked_train_rate,
    }
    print(f"{'stage':<34}{'examples/s':>12}{'x training':>12}")
    for label, rate, train in [
        ("cold input from CSV", csv_rate, train_rate),
        ("cold input from TFRecord", record_rate, train_rate),
        ("warm input (cached int32 arrays)", warm_rate, train_rate),
        ("training, default model", train_rate, train_rate),
        ("masked-LM word ids (once a run)", word_ids_rate, masked_train_rate),
        ("masked-LM batches, first epoch", masked_first_rate, masked_train_rate),
        ("masked-LM batches, later epochs", masked_rate, masked_train_rate),
        ("masked-LM training", masked_train_rate, masked_train_rate),
    ]:
        print(f"{label:<34}{rate:>12,.0f}{rate / train:>11.1f}x")
    write_results(results, args.out)


if __name__ == "__main__":
    main()
