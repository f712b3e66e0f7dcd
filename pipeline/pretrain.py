"""Masked-language-model pre-training of the embeddings and shared encoder.

    python -m pipeline.pretrain --text FILES --model-dir DIR [--vocabulary-from DIR] [--tpu [NAME|local]]

Streams plain text (one document per line, or with --documents blank_line
documents of lines that end at a blank line) or the text column of CSV,
TSV, JSONL or TFRecord files (labels ignored; with --text-pair-column each
pair of texts is one sequence, [CLS] a [SEP] b) from any number of files,
local or gs://, each host reading its own. The vocabulary is learned as
`pipeline.train` learns it, from a sample of data.sample_size texts (or
taken from another run); the lines of a document are packed into sequences
of up to max_length tokens; and the encoder learns to predict masked tokens
for `train.pretrain_epochs` passes (or `--epochs`; more where they would be
fewer than `--min-steps` steps), or for `--steps` steps,
with the same strategies, host loops, checkpoints and resume as training.
Memory does not grow with the corpus; with `--data-service`, tf.data
service workers (`python -m pipeline.data_service`) make the input. Then

    python -m pipeline.train --init-from DIR --train ... --eval ...

starts a classifier from the pre-trained embeddings and encoder."""

import argparse
import dataclasses
import functools
import json
import os
import sys

import numpy as np
import tensorflow as tf

from pipeline import model_dir as run_dir
from pipeline.config import Config, override
from pipeline.dataset import distribute, learn_tokenizer, resolved_chinese_words, usable_length_bucket
from pipeline.files import atomic_write, open_text
from pipeline.layout import CHECKPOINT_DIR, PRETRAIN_METRICS_FILE, VOCABULARY_FILE
from pipeline.masking import masked_lm_dataset
from pipeline.model import SEGMENT_LAYER, build_pretraining_model
from pipeline.packing import padding_share
from pipeline.readers import DataError
from pipeline.strategy import (
    TPUUnavailableError,
    check_batch_sizes,
    configure_runtime,
    finish_run,
    output_dir,
    resolve_strategy,
    run_config,
)
from pipeline.text_stream import Sequences, TextSource, raising_data_errors
from pipeline.tokenizer import Tokenizer
from pipeline.trainer import Trainer, TrainingError, build_optimizer

# Layers a classifier takes from a pre-trained run, by the names build_model gives them (with
# model.segments, the segment embedding too).
SHARED_LAYERS = ("embedding", "embedding_norm", "encoder")
# Model fields that must match for those weights to fit.
SHAPE_FIELDS = (
    "vocabulary_size",
    "embedding_size",
    "hidden_size",
    "num_heads",
    "intermediate_size",
    "num_groups",
    "norm_first",
    "hidden_activation",
    "num_layers",
    "embedding_unit_scale",
    "segments",
)
# Fields `pretrain` never reads (the classifier's, and the run's beyond its
# pre-training; train.epochs is the pre-training's length): configs that
# differ in these alone pre-train to the same weights (tests/test_pretrain.py
# checks it), so one finished pre-training serves them all
# (`finished_pretraining`).
UNREAD_FIELDS = {
    "model": (
        "num_classes",
        "pooling",
        "head_shared_kernel",
        "head_activation",
        "target_mean",
        "target_scale",
        "label_log_odds",
    ),
    "data": ("label_column", "label_delimiter"),
    "optimizer": ("learning_rate", "weight_averaging"),
    "train": (
        "batch_size",
        "token_dropout",
        "best_metric",
        "keep_best_epoch",
        "pretrain_epochs",
        "members",
        "refit",
        "refit_schedule",
        "validation_split",
        "class_weight",
        "huber_delta",
    ),
}
# The masked-token accuracy reported at the end is measured on a fresh
# masking of about this many training documents (all of them when fewer): a
# random sample, as each epoch's steps are shuffled. On 27k tweets the whole
# epoch took 51-83 s of a 22-minute run on 2 slow cores (the sample: 17-21
# s), for a figure whose standard error at this size is under 0.003.
EVALUATION_DOCUMENTS = 8192


def pretrain(config, model_dir, text_paths, vocabulary_from=None, tpu=None, strategy=None):
    """Pre-trains; returns the final report (also `pretrain_metrics.json`)."""
    strategy = strategy or resolve_strategy(tpu)
    check_batch_sizes(strategy, {"pretrain.batch_size": config.pretrain.batch_size})
    configure_runtime(config, tpu)
    output = output_dir(model_dir, strategy)  # model_dir but on a cluster's other workers
    tf.io.gfile.makedirs(output)
    source = _source(config, text_paths)
    served = bool(config.pretrain.data_service)
    if served:
        _check_servable(source)
    texts, complete = raising_data_errors(source.sample, config.data.sample_size, config.train.seed, keep=not served)
    tokenizer = _vocabulary(model_dir, output, vocabulary_from, texts, config)
    config = override(
        config,
        {
            "model": {"vocabulary_size": len(tokenizer.vocabulary), "max_length": tokenizer.max_length},
            "data": {"chinese_words": resolved_chinese_words(tokenizer)},
        },
    )
    run_dir.check_or_save_config(output, config)
    report = _finished_report(model_dir)
    if report is not None:  # started again (a killed fine-tuning, a refit, more members): nothing to train
        print(f"The pre-training in {model_dir} is done.")
        _print_report(report)
        finish_run(model_dir, strategy)
        return report
    # A corpus read whole for the sample is cached, texts in memory are anyway; the service's workers stream.
    sequences = Sequences(
        source,
        tokenizer,
        cached=(complete or source.files is None) and not served,
        shuffle_buffer=config.pretrain.shuffle_buffer,
    )
    padding = padding_share(raising_data_errors(sequences.lengths), tokenizer.max_length)
    _print_start(config, source, sequences, len(texts), padding, strategy)
    train_config, optimizer_config = masked_lm_configs(config)
    sequences_per_epoch, epochs = _plan(config, sequences)
    with strategy.scope():
        model = build_pretraining_model(config.model, config.pretrain.sentence_order)
        trainer = Trainer(
            model,
            build_optimizer(optimizer_config, sequences_per_epoch // train_config.batch_size * epochs),
            strategy,
            train_config,
            optimizer_config,
            model_dir,
            learning_rate_field="pretrain.learning_rate",
        )
    make_dataset = functools.partial(
        masked_lm_dataset,
        sequences,
        len(tokenizer.vocabulary),
        tokenizer.max_length,
        train_config.batch_size,
        config.pretrain,
        config.train.seed,
        length_bucket=usable_length_bucket(config, strategy),
        data_service=config.pretrain.data_service,
    )
    losses = raising_data_errors(trainer.fit, make_dataset, sequences_per_epoch, epochs)
    evaluation_steps = max(1, EVALUATION_DOCUMENTS // train_config.batch_size)
    report = raising_data_errors(
        evaluate_masked_lm,
        model,
        strategy,
        # Batches come a replica's at a time: a step is one of each of the pipeline's replicas.
        lambda input_context: make_dataset(epoch=epochs, input_context=input_context).take(
            evaluation_steps * input_context.num_replicas_in_sync // input_context.num_input_pipelines
        ),
    )
    report["padding_share"] = padding
    if source.skipped:
        report["skipped_rows"] = dict(source.skipped)
    report["loss_by_epoch"] = losses
    with atomic_write(os.path.join(output, PRETRAIN_METRICS_FILE)) as f:  # last: the mark of a finished run
        json.dump(report, f, indent=2)
    _print_report(report)
    finish_run(model_dir, strategy)
    return report


def _check_servable(source):
    # What tf.data service workers can make: plain text files, streamed.
    if source.examples is not None:
        raise ValueError(
            "pretrain.data_service (--data-service) streams files of text; texts held in memory (pipeline.train's "
            "labelled texts) are made on this host: pre-train with pipeline.pretrain --text FILES, then --init-from"
        )
    in_python = source.read_in_python()
    if in_python:
        raise ValueError(
            f"{in_python[0]}: --data-service reads plain text files alone (TensorFlow's reader, "
            "which runs on the service's workers); CSV, TSV, JSONL and TFRecord rows, and --skip-bad-rows, "
            "are read in Python on this host"
        )


def vocabulary_texts(config, examples):
    """The texts a run's vocabulary is learned from: the training `Examples`'
    texts, and where it pre-trains on `pretrain.unlabelled` too, those files'
    up to `data.sample_size` texts in all (as that pre-training learns it)."""
    if not (config.train.pretrain_epochs and config.pretrain.unlabelled):
        return examples.texts
    return raising_data_errors(_source(config, examples).sample, config.data.sample_size, config.train.seed)[0]


def _source(config, texts):
    join_lines = config.pretrain.documents == "blank_line"
    return TextSource(texts, config.data, join_lines=join_lines, files=config.pretrain.unlabelled)


def masked_lm_configs(config):
    """`(train, optimizer)` configs masked-LM trains with: `train` with the
    batch size of `pretrain`, and `optimizer` with its peak rate and no
    weight averaging (the classifier's)."""
    return (
        dataclasses.replace(config.train, batch_size=config.pretrain.batch_size),
        dataclasses.replace(config.optimizer, learning_rate=config.pretrain.learning_rate, weight_averaging=0.0),
    )


def _plan(config, sequences):
    # `(sequences per epoch, epochs)`: pretrain.steps in one epoch, or
    # train.epochs passes (more where pretrain.min_steps needs them),
    # counted once where the corpus is not cached.
    if config.pretrain.steps:
        return config.pretrain.steps * config.pretrain.batch_size, 1
    if not sequences.cached:
        print(f"Counting the sequences of one pass for {config.train.epochs} epochs (pretrain.steps needs no count)")
    count = raising_data_errors(lambda: sequences.count)
    steps_per_epoch = max(1, count // config.pretrain.batch_size)
    epochs = max(config.train.epochs, -(-config.pretrain.min_steps // steps_per_epoch))
    more = f", raised from {config.train.epochs} to reach pretrain.min_steps" if epochs > config.train.epochs else ""
    print(f"{count} sequences a pass: {steps_per_epoch} steps an epoch, {epochs} epoch{'s' * (epochs != 1)}{more}")
    return count, epochs


def _print_start(config, source, sequences, sampled, padding, strategy):
    if sequences.cached:
        what = f"{sampled} texts in {sequences.count} sequences"
    else:
        beside = f" with {len(source.examples.texts)} texts in memory" if source.examples is not None else ""
        what = f"{len(source.files)} files streamed{beside} (vocabulary from a sample of {sampled} texts)"
    print(
        f"{what} of up to {config.model.max_length} tokens, {padding:.1%} of them padding"
        f"{' (documents of lines)' if source.join_lines else ''}, vocabulary of {config.model.vocabulary_size}, "
        f"{strategy.num_replicas_in_sync} replica(s) of {type(strategy).__name__}"
    )
    if source.skipped:
        print(f"Skipped rows so far: {dict(source.skipped)}")


def finished_pretraining(config, vocabulary, directories):
    """The first of `directories` holding a finished pre-training that
    `config`'s own would repeat, or None.

    Its settings must equal those `config` pre-trains with
    (`with_pretrain_epochs`), the fields of `UNREAD_FIELDS` and of the host
    loop (`model_dir.HOST_LOOP_FIELDS`) aside, and
    its vocabulary `vocabulary`. Pre-training is deterministic, so starting
    from it is starting from the weights `config` would train (sweep trials
    that differ in their classifier's settings alone share one).
    """
    wanted = _pretraining_settings(with_pretrain_epochs(config).to_dict())
    for directory in directories:
        if (
            _finished_report(directory) is not None
            and _pretraining_settings(run_dir.load_config(directory).to_dict()) == wanted
            and _same_vocabulary(directory, vocabulary)
        ):
            return directory
    return None


def _same_vocabulary(directory, vocabulary):
    return list(Tokenizer.load(directory).vocabulary) == list(vocabulary)


def _pretraining_settings(settings):
    # What the pre-training's weights depend on: neither the fields it never
    # reads nor those of its host loop.
    ignored = {
        section: set(UNREAD_FIELDS.get(section, ()))
        | run_dir.HOST_LOOP_FIELDS.get(section, set())
        | run_dir.INPUT_SERVICE_FIELDS.get(section, set())
        for section in settings
    }
    return {
        section: {key: value for key, value in values.items() if key not in ignored[section]}
        for section, values in settings.items()
    }


def _finished_report(model_dir):
    # The report a finished run wrote last, or None. Read from `model_dir`,
    # where every worker of a cluster reads the chief's checkpoints too, so
    # that all of them skip or none does.
    path = os.path.join(model_dir, PRETRAIN_METRICS_FILE)
    if not tf.io.gfile.exists(path):
        return None
    with open_text(path) as f:
        report = json.load(f)
    report["loss_by_epoch"] = {int(epoch): loss for epoch, loss in report["loss_by_epoch"].items()}
    return report


def _print_report(report):
    print(
        f"masked-token accuracy {report['masked_accuracy']:.4f} (always the most frequent "
        f"token: {report['most_frequent_token_accuracy']:.4f}) on {report['predictions']} predictions"
    )
    if "sentence_order_accuracy" in report:
        print(
            f"sentence-order accuracy {report['sentence_order_accuracy']:.4f} on "
            f"{report['sentence_order_examples']} documents (chance: 0.5)"
        )


def evaluate_masked_lm(model, strategy, make_dataset):
    """Masked-token accuracy against always predicting the most frequent target.

    With a sentence-order head, its accuracy too (chance is 0.5). The model
    (built in `strategy.scope()`) runs on the replicas, as in training, on
    `make_dataset(input_context=...)`'s batches; each host scores its own.
    """
    correct, targets_seen, order_correct, order_seen = 0, [], 0, 0
    # Length-bucketed batches come in many shapes; after the first two
    # traces, one with unknown dimensions serves them all.
    predict = tf.function(
        lambda features: strategy.run(lambda inputs: model(inputs, training=False), args=(features,)),
        reduce_retracing=True,
        autograph=False,
    )
    for features, targets, weights in distribute(strategy, make_dataset):
        probabilities, targets, weights = _host_rows(strategy, (predict(features), targets, weights))
        if isinstance(probabilities, dict):
            real = weights["sentence_order"] > 0
            predicted = np.argmax(probabilities["sentence_order"], axis=-1)
            order_correct += int((predicted == targets["sentence_order"])[real].sum())
            order_seen += int(real.sum())
            probabilities, targets, weights = (value["masked_lm"] for value in (probabilities, targets, weights))
        predicted = np.argmax(probabilities, axis=-1)
        real = weights > 0
        correct += int((predicted == targets)[real].sum())
        targets_seen.append(targets[real])
    targets_seen = np.concatenate(targets_seen)
    most_frequent = np.bincount(targets_seen).max()
    report = {
        "predictions": int(len(targets_seen)),
        "masked_accuracy": correct / len(targets_seen),
        "most_frequent_token_accuracy": float(most_frequent / len(targets_seen)),
    }
    if order_seen:
        report.update(sentence_order_accuracy=order_correct / order_seen, sentence_order_examples=order_seen)
    return report


def _host_rows(strategy, values):
    # NumPy rows of this host's replicas, in replica order, of a nest of
    # per-replica values.
    return tf.nest.map_structure(
        lambda value: np.concatenate([part.numpy() for part in strategy.experimental_local_results(value)]), values
    )


def initialize_from(model, pretrain_dir, model_config, vocabulary):
    """Loads the pre-trained embeddings and encoder of `pretrain_dir` into `model`.

    A vocabulary or shape mismatch is a `ValueError` naming what differs;
    nothing is loaded partially.
    """
    if not _same_vocabulary(pretrain_dir, vocabulary):
        raise ValueError(
            f"--init-from {pretrain_dir}: its vocabulary differs from this run's "
            "(a run directory keeps the vocabulary it started with; use a new --model-dir)"
        )
    pretrained = run_dir.load_config(pretrain_dir)
    pretrained_config = pretrained.model
    mismatched = [
        f"{field}: pre-trained {getattr(pretrained_config, field)!r}, here {getattr(model_config, field)!r}"
        for field in SHAPE_FIELDS
        if getattr(pretrained_config, field) != getattr(model_config, field)
    ]
    if mismatched:
        raise ValueError(f"--init-from {pretrain_dir} does not fit this model ({'; '.join(mismatched)})")
    latest = tf.train.latest_checkpoint(os.path.join(pretrain_dir, CHECKPOINT_DIR))
    if latest is None:
        raise ValueError(f"--init-from {pretrain_dir}: no checkpoint to start from")
    pretrained_model = build_pretraining_model(pretrained_config, pretrained.pretrain.sentence_order)
    run_dir.restore_variables(pretrained_model, latest)
    for name in SHARED_LAYERS + ((SEGMENT_LAYER,) if model_config.segments > 1 else ()):
        model.get_layer(name).set_weights(pretrained_model.get_layer(name).get_weights())


def with_pretrain_epochs(config, epochs=None):
    """`config` with `train.epochs` set to the masked-LM epochs: `epochs`, else
    `train.pretrain_epochs`, so that `pipeline.pretrain` pre-trains as long as
    `pipeline.train`'s own pre-training does with the same config. A refit
    (`train.refit`) and ensemble members (`train.members`) come after the
    pre-training and do not change it, so they are off here, as is the
    held-out slice (`train.validation_split`), whose texts `pipeline.train`
    leaves out of what it passes, and the classifier's weight averaging
    (`optimizer.weight_averaging`): such a run's pre-training is a plain run's."""
    if epochs is None:
        epochs = config.train.pretrain_epochs
        if epochs == 0 and config.pretrain.steps:
            epochs = 1  # the steps make one epoch
        elif epochs == 0:
            raise ValueError("train.pretrain_epochs is 0 (no pre-training) in this config: give --epochs or --steps")
    if epochs < 1:
        raise ValueError(f"masked-LM epochs must be 1 or more, got {epochs}")
    return override(
        config,
        {
            "train": {"epochs": epochs, "refit": False, "members": 1, "validation_split": 0.0},
            "optimizer": {"weight_averaging": 0.0},
        },
    )


def _vocabulary(model_dir, output, vocabulary_from, texts, config):
    for directory in (model_dir, vocabulary_from):  # a resumed run keeps its own
        if directory and tf.io.gfile.exists(os.path.join(directory, VOCABULARY_FILE)):
            tokenizer = Tokenizer.load(directory)
            break
    else:
        tokenizer = learn_tokenizer(texts, config.data, config.model.max_length)
    tokenizer.save(output)
    return tokenizer


def main(argv=None):
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0],
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog=__doc__.split("\n\n", 1)[1],
    )
    parser.add_argument(
        "--text",
        required=True,
        help="text files: path, glob or comma-separated list "
        "(.txt one document per line, or CSV/TSV/JSONL/TFRecord with --text-column)",
    )
    parser.add_argument("--model-dir", required=True, help="where the run's files go (resumes if present)")
    parser.add_argument("--vocabulary-from", help="a run directory whose vocabulary to use instead of learning one")
    parser.add_argument("--config", help="JSON file overriding config fields (see pipeline/config.py)")
    parser.add_argument("--tpu", nargs="?", const="local", help="pre-train on a TPU, as pipeline.train")
    parser.add_argument("--text-column", help="column or field holding the text (default text)")
    parser.add_argument(
        "--text-pair-column",
        help="column or field of a pair's second text: each pair is one sequence, [CLS] text [SEP] pair, and "
        "the segment embedding is pre-trained (data.text_pair_column)",
    )
    parser.add_argument(
        "--epochs",
        type=int,
        help=f"masked-LM epochs (default train.pretrain_epochs, {Config().train.pretrain_epochs}, "
        "as pipeline.train's own pre-training; more where --min-steps needs them)",
    )
    parser.add_argument(
        "--batch-size",
        type=int,
        help=f"sequences per masked-LM step, pretrain.batch_size (default {Config().pretrain.batch_size})",
    )
    parser.add_argument(
        "--learning-rate",
        type=float,
        help=f"peak masked-LM learning rate, pretrain.learning_rate (default {Config().pretrain.learning_rate})",
    )
    parser.add_argument(
        "--steps",
        type=int,
        help="masked-LM optimizer steps, pretrain.steps, instead of epochs (a corpus larger than "
        "data.sample_size needs no counting pass then)",
    )
    parser.add_argument(
        "--min-steps",
        type=int,
        help=f"the fewest masked-LM optimizer steps the epochs give, pretrain.min_steps (default "
        f"{Config().pretrain.min_steps}): a small corpus gets more epochs; 0 keeps --epochs",
    )
    parser.add_argument(
        "--documents",
        choices=("line", "blank_line"),
        help="pretrain.documents: each line is a document (default), or a blank line ends one and its "
        "lines are packed into sequences together",
    )
    parser.add_argument("--sample-size", type=int, help="texts the vocabulary is learned from, data.sample_size")
    parser.add_argument(
        "--data-service",
        help="grpc://HOST:PORT of a tf.data service dispatcher (python -m pipeline.data_service) whose workers "
        "read, tokenize, pack and mask the plain text files, pretrain.data_service",
    )
    parser.add_argument("--max-length", type=int)
    parser.add_argument("--max-predictions", type=int, help="predicted positions per sequence (default 20)")
    parser.add_argument("--whole-word-masking", action="store_true", help="mask all pieces of a word together")
    parser.add_argument(
        "--sentence-order",
        action="store_true",
        help="also predict whether a document's two halves were swapped (ALBERT's SOP)",
    )
    args = parser.parse_args(argv)
    values = {"data": {}, "train": {}, "model": {}, "pretrain": {}}
    for flag, section, field in [
        ("text_column", "data", "text_column"),
        ("text_pair_column", "data", "text_pair_column"),
        ("batch_size", "pretrain", "batch_size"),
        ("max_length", "model", "max_length"),
        ("learning_rate", "pretrain", "learning_rate"),
        ("max_predictions", "pretrain", "max_predictions"),
        ("steps", "pretrain", "steps"),
        ("min_steps", "pretrain", "min_steps"),
        ("documents", "pretrain", "documents"),
        ("sample_size", "data", "sample_size"),
        ("data_service", "pretrain", "data_service"),
    ]:
        if getattr(args, flag) is not None:
            values[section][field] = getattr(args, flag)
    for flag in ("whole_word_masking", "sentence_order"):
        if getattr(args, flag):
            values["pretrain"][flag] = True
    try:
        strategy = resolve_strategy(args.tpu)
        config = run_config(args.config, values, strategy, args.tpu)
        pretrain(
            with_pretrain_epochs(config, args.epochs),
            args.model_dir,
            args.text,
            args.vocabulary_from,
            args.tpu,
            strategy,
        )
    except (DataError, TPUUnavailableError, TrainingError, ValueError) as error:
        sys.exit(f"error: {error}")


if __name__ == "__main__":
    main()
