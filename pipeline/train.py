"""Train, evaluate and export a text classifier.

    python -m pipeline.train --train FILES --eval FILES --model-dir DIR [--tpu [NAME|local]]

With no --train, it trains on the embedded demo corpus. Killed and started
again with the same command, it resumes from its last checkpoint. It holds
out --validation-split of the training examples (10%, stratified) to keep
the best epoch on, pre-trains on the other training texts (and on
--unlabelled files of text, streamed) for --pretrain-epochs masked-LM
epochs, at least --pretrain-min-steps steps, or for --pretrain-steps steps
(as pipeline.pretrain does, in DIR/pretrain; 0 epochs trains from scratch),
fine-tunes the classifier from that
(for --epochs, by default enough for train.min_steps steps, stopping after
train.patience epochs without a better held-out score), then trains it
again from the same start on all the training examples up to the kept
epoch (the refit, in DIR/refit; --no-refit exports the kept epoch) and
exports that. --eval only scores the exported model: it chooses nothing
and is never trained on. With --validation-split 0, --eval chooses the epoch
instead (give it a validation set then) and the refit trains on it too.
--members N fine-tunes N classifiers from the one pre-training (seeds
--seed, --seed + 1, ...; members 2..N in DIR/members/<n>) and exports their
ensemble. A finished run started again with --refit, or with another
--members, adds the refit or the new members and exports again.
"""

import argparse
import dataclasses
import functools
import json
import os
import sys

import keras
import numpy as np
import tensorflow as tf

from layers import fast_path
from pipeline import model_dir as run_dir
from pipeline.config import Config, override
from pipeline.dataset import (
    concatenate,
    hold_out,
    learn_vocabulary,
    load_split,
    read_split,
    resolved_chinese_words,
    train_dataset,
    usable_length_bucket,
)
from pipeline.demo_corpus import write_demo_corpus
from pipeline.export import export_saved_model
from pipeline.files import atomic_write
from pipeline.labels import class_weights, load_label_names, save_thresholds
from pipeline.layout import (
    BEST_WEIGHTS,
    EXPORT_DIR,
    LOGS_DIR,
    MEMBERS_DIR,
    METRICS_FILE,
    PRETRAIN_DIR,
    REFIT_DIR,
    VOCABULARY_FILE,
)
from pipeline.metrics import (
    BEST_METRICS,
    format_report,
    one_class_warning,
    report_of,
    score_keys,
    scores_line,
    selection_score,
)
from pipeline.model import build_model
from pipeline.pretrain import initialize_from, pretrain, vocabulary_texts, with_pretrain_epochs
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
from pipeline.tokenizer import Tokenizer
from pipeline.trainer import Predictor, Trainer, TrainingError, build_optimizer

# Fields `prepare_data` fills in from the data and the vocabulary.
DERIVED_FIELDS = {
    "model": (
        "vocabulary_size",
        "num_classes",
        "max_length",
        "head_activation",
        "target_mean",
        "target_scale",
        "label_log_odds",
    ),
    "data": ("chinese_words",),
    "train": ("epochs",),
}
# Derived epochs (train.epochs 0) are at least this many, and at most the other.
MIN_EPOCHS, MAX_EPOCHS = 3, 200


@dataclasses.dataclass(frozen=True)
class PreparedData:
    """What `prepare_data` gives the stages after it: the config with the
    model's sizes filled in, the label names and tokenizer, and the tokenized
    splits. `validation` keeps the epoch: the held-out training examples, or
    (with `held_out` false) the evaluation files themselves."""

    config: Config
    names: list
    tokenizer: Tokenizer
    train: object
    validation: object
    evaluation: object
    held_out: bool
    whole: object = None  # with `held_out`, every training example, in file order
    derived_epochs: bool = False  # whether `train.epochs` came from the data (it was 0)
    repeated: list = dataclasses.field(default_factory=list)  # `repeated_texts` of the evaluation files

    def refit_split(self):
        """The examples `refit` trains on: every training example, and the
        evaluation files too where they kept the epoch."""
        if self.whole is None:
            return concatenate([self.train, self.evaluation])
        return load_split(self.whole, self.config.data, self.tokenizer, self.names)


@dataclasses.dataclass(frozen=True)
class Classifier:
    """One fine-tuned classifier of a run: the model its validation examples
    kept, the model it exports (with `train.refit`, the refit), and its report."""

    kept: keras.Model
    exported: keras.Model
    report: dict


def train_and_evaluate(
    config,
    model_dir,
    train_paths=None,
    eval_paths=None,
    tpu=None,
    strategy=None,
    export=True,
    init_from=None,
    vocabulary_from=None,
):
    """Trains `config` on the files given (the demo corpus without any).

    The run's stages, each resumed or found done when the run is started
    again: `read_training_files`, `pretrain_on_training_texts` (with
    `train.pretrain_epochs`), `prepare_data`, `train_classifier` (its
    `fit_and_evaluate` and `refit`) for each of `train.members`, the ensemble
    report, `export_saved_model`.

    `strategy` overrides the one `resolve_strategy(tpu)` picks; `init_from`
    is a `pipeline.pretrain` run whose vocabulary, embeddings and encoder
    the classifier starts from (with `train.pretrain_epochs` 0);
    `vocabulary_from` a run whose vocabulary alone it takes. With
    `train.holds_out`, a slice of the training examples keeps the best epoch
    and the evaluation files score the exported model; otherwise they keep
    the epoch. Returns the final evaluation report (also written to
    `metrics.json`).
    """
    if config.train.pretrain_epochs and init_from:
        raise ValueError(
            f"--init-from starts from {init_from}'s pre-training, but train.pretrain_epochs is "
            f"{config.train.pretrain_epochs}: add --pretrain-epochs 0, or leave out --init-from "
            "to pre-train on the training texts"
        )
    if init_from and vocabulary_from:
        raise ValueError("--init-from brings its own vocabulary; leave out --vocabulary-from")
    if config.pretrain.unlabelled and not config.train.pretrain_epochs:
        raise ValueError(
            f"pretrain.unlabelled (--unlabelled) {config.pretrain.unlabelled}: unlabelled texts are pre-trained "
            "on, but train.pretrain_epochs is 0 (no pre-training); give --pretrain-epochs 1 or more (or its "
            "default), or --pretrain-steps for its length in steps"
        )
    strategy = strategy or resolve_strategy(tpu)
    # Refused before any work (the pre-training, the held-out draw) rather than once the data is read.
    batch_sizes = {"train.batch_size": config.train.batch_size}
    if config.train.pretrain_epochs:
        batch_sizes["pretrain.batch_size"] = config.pretrain.batch_size
    check_batch_sizes(strategy, batch_sizes)
    run_dir.check_resumable(output_dir(model_dir, strategy), config, skip=DERIVED_FIELDS)
    train_paths, eval_paths = data_paths(train_paths, eval_paths, output_dir(model_dir, strategy))
    fit_data, held_out, whole = read_training_files(config, train_paths)
    if config.train.pretrain_epochs:
        init_from = pretrain_on_training_texts(config, model_dir, fit_data, vocabulary_from, tpu, strategy)
    data = prepare_data(
        config, model_dir, fit_data, eval_paths, held_out, whole, strategy, vocabulary_from=init_from or vocabulary_from
    )
    _print_start(data, strategy, configure_runtime(data.config, tpu))
    classifiers = [train_classifier(data, model_dir, tpu, strategy, init_from)]
    for member in range(2, config.train.members + 1):
        classifiers.append(train_member(data, model_dir, member, tpu, strategy, init_from))
    report = classifiers[0].report if len(classifiers) == 1 else ensemble(classifiers, data, model_dir, strategy)
    output = output_dir(model_dir, strategy)  # model_dir but on a cluster's other workers
    report["evaluation_texts_in_training"] = len(data.repeated)
    _write_report(report, output)
    thresholds = report.get("thresholds")  # a multi-label run's, of its validation examples
    if thresholds:  # those the export answers with: of the ensemble, with members
        save_thresholds(thresholds, output)
    _print_report(report, data, members=len(classifiers))
    if export:
        path = export_saved_model(
            [c.exported for c in classifiers],
            data.tokenizer,
            data.names,
            os.path.join(output, EXPORT_DIR),
            thresholds=thresholds and [thresholds[name] for name in data.names],
        )
        if output == model_dir:  # not a worker folder, removed at the end
            print("Exported", path)
    finish_run(model_dir, strategy)
    return report


def read_training_files(config, train_paths):
    """`(fit, held_out, whole)`: with `train.holds_out`, the `Examples` of the
    training files that `dataset.hold_out` keeps and holds out for
    validation, and all of them; otherwise the paths, None and None."""
    if not config.train.holds_out:
        return train_paths, None, None
    whole = read_split(train_paths, config.data)
    return (*hold_out(whole, config.train.validation_split, data_config=config.data), whole)


def train_classifier(data, model_dir, tpu, strategy, init_from=None):
    """Fine-tunes one classifier in `model_dir` (from `init_from`'s
    pre-training, else from `data.config`'s seed), refits it with
    `train.refit`, and scores what it exports on the evaluation files."""
    config = data.config
    configure_runtime(config, tpu)
    with strategy.scope():
        model = build_model(config.model)
        if init_from:  # a resumed run's checkpoint then overrides these
            initialize_from(model, init_from, config.model, data.tokenizer.vocabulary)
    report = fit_and_evaluate(model, config, strategy, data.train, data.validation, data.names, model_dir)
    exported = model
    if config.train.refits:
        exported, report["refit"] = refit(
            config, model_dir, data.refit_split(), data.names, tpu, strategy, init_from, data.tokenizer.vocabulary
        )
    if data.held_out:  # the held-out examples chose the epoch; the evaluation files score what is exported
        report = scored_on(report, [exported], data, strategy)
    return Classifier(model, exported, report)


def train_member(data, model_dir, member, tpu, strategy, init_from):
    """Member `member` (2..N) of `train.members`: `train_classifier` in
    `model_dir/members/<member>` with seed `train.seed + member - 1`, on the
    run's data and from its pre-training (`init_from`): to the digit what
    `--init-from <run>/pretrain --pretrain-epochs 0 --seed <seed>` trains by
    hand. The member's directory is a run of its own (config, vocabulary,
    `metrics.json`), so that it resumes, or is found done, like one."""
    directory = os.path.join(model_dir, MEMBERS_DIR, str(member))
    config = override(
        data.config, {"train": {"seed": data.config.train.seed + member - 1, "members": 1, "pretrain_epochs": 0}}
    )
    print(f"Member {member} of {data.config.train.members} (seed {config.train.seed}) in {directory}")
    output = output_dir(directory, strategy)
    tf.io.gfile.makedirs(output)
    if not run_dir.has_vocabulary(output):
        run_dir.save_vocabulary(output, data.tokenizer, data.names)
    run_dir.check_or_save_config(output, config)
    classifier = train_classifier(dataclasses.replace(data, config=config), directory, tpu, strategy, init_from)
    _write_report(classifier.report, output)
    print(format_report(classifier.report))
    finish_run(directory, strategy)
    return classifier


def ensemble(classifiers, data, model_dir, strategy):
    """The report of the run's ensemble: the kept models' mean probabilities
    on the validation examples and, where those were held out, the exported
    models' on the evaluation files; each member's scores under `members`."""
    first = classifiers[0].report
    directories = [model_dir] + [os.path.join(model_dir, MEMBERS_DIR, str(n)) for n in range(2, len(classifiers) + 1)]
    scores = [
        _member_scores(directory, data.config.train.seed + index, classifier.report)
        for index, (directory, classifier) in enumerate(zip(directories, classifiers))
    ]
    report = ensemble_report([c.kept for c in classifiers], data.validation, data.names, strategy, data.config)
    report.update(skipped_rows=first["skipped_rows"], train_loss_by_epoch=first["train_loss_by_epoch"], members=scores)
    if "refit" in first:
        report["refit"] = first["refit"]
    print(
        "\n".join(
            f"member {index} (seed {score['seed']}): {_scores_line(score)}" for index, score in enumerate(scores, 1)
        )
    )
    print(f"The ensemble of {len(classifiers)} members:")
    if data.held_out:
        report = scored_on(report, [c.exported for c in classifiers], data, strategy)
    return report


def scored_on(report, models, data, strategy):
    """`report`, of the kept models on the held-out validation examples, with
    the scores of `models` (the exported ones) on the evaluation files in
    place of its own, which move under `validation`."""
    scores = ensemble_report(models, data.evaluation, data.names, strategy, data.config, report.get("thresholds"))
    validation = {key: report[key] for key in (*score_keys(report), "examples")}
    rest = {key: value for key, value in report.items() if key not in scores and key != "validation"}
    return {
        **scores,
        **rest,
        "validation": validation,
        "skipped_rows": {**report["skipped_rows"], "eval": data.evaluation.skipped},
    }


def ensemble_report(models, split, names, strategy, config, thresholds=None):
    """The report (`metrics.report_of`) of the mean of `models`' outputs
    (probabilities or scores) on `split`, under the run's `config`; a
    multi-label task's with `thresholds` (`{label: threshold}`), or
    choosing them on `split`."""
    predictions = [Predictor(model, strategy, config.train.batch_size)(split) for model in models]
    labels = predictions[0][1]
    if any(not np.array_equal(other, labels) for _, other in predictions):
        raise RuntimeError("the members' evaluation batches came in different orders")  # never expected
    probabilities = np.mean([member_probabilities for member_probabilities, _ in predictions], axis=0)
    thresholds = thresholds and [thresholds[name] for name in names]
    return report_of(config, labels, probabilities, names, thresholds)


def _scores_line(score):
    line = scores_line(score)
    if "validation" in score:
        line += f" (validation {scores_line(score['validation'])})"
    return line


def _member_scores(directory, seed, report):
    scores = {"model_dir": directory, "seed": seed, **{key: report[key] for key in score_keys(report)}}
    if "validation" in report:
        scores["validation"] = {key: report["validation"][key] for key in score_keys(report)}
    if "refit" in report:
        scores["refit_epochs"] = report["refit"]["epochs"]
    return scores


def _write_report(report, output):
    with atomic_write(os.path.join(output, METRICS_FILE)) as f:  # whole or absent, as a run's other files
        json.dump(report, f, indent=2, ensure_ascii=False)


def _print_start(data, strategy, precision):
    config, train = data.config, data.train
    filled = int((train.ids[:, -1] != 0).sum())  # truncated, or exactly max_length long
    held = f"{len(data.validation)} validation (held out of the training files) and " if data.held_out else ""
    derived = f" (derived: at least {config.train.min_steps} steps)" if data.derived_epochs else ""
    patience = (
        f", stopping after {config.train.patience} without a better validation score" if config.train.patience else ""
    )
    print(
        f"{len(train)} training, {held}{len(data.evaluation)} evaluation examples, "
        f"{_targets_said(data)}, vocabulary of {len(data.tokenizer.vocabulary)}"
        f"{' (Chinese as words)' if data.tokenizer.settings['chinese_words'] else ''}, max length "
        f"{config.model.max_length} ({filled} training examples fill it and may be truncated), "
        f"{strategy.num_replicas_in_sync} replica(s) of {type(strategy).__name__}, {precision}, "
        f"batches of {config.train.batch_size}, {config.train.steps_per_execution} steps per host round trip, "
        f"a checkpoint every {config.train.checkpoint_every} steps, {config.train.epochs} epoch(s)"
        f"{derived}{patience}"
        f"{'' if fast_path.enabled() else ', plain Keras layers'}"
        f"{', XLA-compiled steps' if config.train.jit_compile else ''}"
    )


def _targets_said(data):
    # What the run predicts, for the start's line.
    if data.config.data.task == "multi_label":
        return f"{len(data.names)} labels ({data.train.labels.sum(axis=1).mean():.2f} a training text)"
    if data.config.data.task == "regression":
        scores = data.train.labels
        return (
            f"a score ({data.names[0]}: training mean {scores.mean():.4g}, standard deviation {scores.std():.4g}, "
            f"{scores.min():.4g} to {scores.max():.4g})"
        )
    return f"{len(data.names)} classes"


def _print_report(report, data, members):
    if data.held_out:
        print(
            f"validation (the kept epoch{'s' if members > 1 else ''}, on the held-out training examples): "
            + scores_line(report["validation"])
        )
        print(
            "On the evaluation files, the exported model"
            f"{' (the refit, trained on all the training files)' if data.config.train.refits else ''}:"
        )
    print(format_report(report))
    if warning := one_class_warning(report):
        print(warning)
    if data.repeated:
        source, training = data.repeated[0]
        print(
            f"Warning: {len(data.repeated)} of the {len(data.evaluation)} evaluation examples "
            f"({len(data.repeated) / len(data.evaluation):.1%}) repeat a training text (the first: {source}, "
            f"as {training}); on those the scores measure recall of the training files, not generalization."
        )
    _print_skipped(report["skipped_rows"])
    if data.config.train.refits and not data.held_out:
        print(
            "These scores are of the epoch kept on the evaluation files; the refit, trained on them too, is "
            "what the export serves."
        )


def refit(config, model_dir, data, names, tpu, strategy, init_from=None, vocabulary=None):
    """`train.refit`: the run's classifier trained again on `data`, its
    training examples and those that kept its epoch together, for the epochs
    it kept.

    From the run's start: `init_from`'s pre-training (with the run's
    `vocabulary`), or without one the initialization of the run's seed.
    Training stops after the epoch the run kept (`best_epoch.json`); the
    learning-rate schedule spans `train.epochs` over all those examples, as
    the run's stood there, or with `train.refit_schedule` "kept" the kept
    epochs, decaying to 0 at their end. In `model_dir/refit`, resumed or found done
    like the run. Returns the model and a summary of the refit for
    `metrics.json`.
    """
    epochs = run_dir.kept_epoch(output_dir(model_dir, strategy))
    directory = os.path.join(model_dir, REFIT_DIR)
    configure_runtime(config, tpu)  # the run's seeds again: from scratch, its initialization
    planned = epochs if config.train.refit_schedule == "kept" else config.train.epochs
    print(
        f"Refit: {epochs} of {config.train.epochs} epoch(s) on {len(data)} training and validation "
        f"examples in {directory}, the learning rate planned for {planned} epoch(s)"
    )
    with strategy.scope():
        model = build_model(config.model)
        if init_from:  # a resumed refit's checkpoint then overrides these
            initialize_from(model, init_from, config.model, vocabulary)
        steps = len(data) // config.train.batch_size * planned
        trainer = Trainer(
            model,
            build_optimizer(config.optimizer, steps),
            strategy,
            config.train,
            config.optimizer,
            directory,
            class_weights=_class_weights(config, data, names),
            task=config.data.task,
            target_scale=config.model.target_scale,
        )
    losses = trainer.fit(_training_batches(config, strategy, data), len(data), epochs)
    model.save_weights(os.path.join(trainer.output_dir, BEST_WEIGHTS))
    finish_run(directory, strategy)
    return model, {"epochs": epochs, "examples": len(data), "train_loss_by_epoch": losses}


def data_paths(train_paths, eval_paths, directory):
    """The files to train and evaluate on; without training files, the demo
    corpus, written to `directory/demo_data`."""
    if train_paths is None:
        return write_demo_corpus(os.path.join(directory, "demo_data"))
    if not eval_paths:
        raise ValueError("--eval is required with --train")
    return train_paths, eval_paths


def pretrain_on_training_texts(config, model_dir, train_paths, vocabulary_from, tpu, strategy):
    """`pipeline.pretrain` on `train_paths`' texts, and those of
    `pretrain.unlabelled`, for `train.pretrain_epochs` (or `pretrain.steps`;
    with `vocabulary_from`'s vocabulary, if given), in `model_dir/pretrain`;
    returns that directory. A resumed run resumes it, or finds it done.
    Sweep trials call it too. `tpu` as `configure_runtime` takes it: the
    pre-training sets the precision policy again, `auto` by the device."""
    directory = os.path.join(model_dir, PRETRAIN_DIR)
    pretrain(
        with_pretrain_epochs(config),
        directory,
        train_paths,
        vocabulary_from=vocabulary_from,
        tpu=tpu,
        strategy=strategy,
    )
    return directory


def prepare_data(config, model_dir, train, eval_paths, held_out=None, whole=None, strategy=None, vocabulary_from=None):
    """Learns (or reloads) the vocabulary, tokenizes the splits and fixes the
    config: `train` as `read_training_files` gives it (files, or the kept
    `Examples` with the `held_out` and `whole` ones).

    With `vocabulary_from` (a run directory), its vocabulary is used instead
    of learning one; the labels still come from the training data. A
    resumed run reloads its own. Files are written where `strategy` says
    this process writes (`pipeline.strategy.output_dir`). Returns the
    `PreparedData`, its config's vocabulary size and class count filled in
    and saved.
    """
    output = output_dir(model_dir, strategy or tf.distribute.get_strategy())
    tf.io.gfile.makedirs(output)
    original_epochs = config.train.epochs
    train_examples = read_split(train, config.data)  # read once: vocabulary and split
    names, tokenizer = _vocabulary(model_dir, output, config, train_examples, vocabulary_from)
    train = load_split(train_examples, config.data, tokenizer, names)
    evaluation_examples = read_split(eval_paths, config.data)
    evaluation = load_split(evaluation_examples, config.data, tokenizer, names)
    validation = evaluation if held_out is None else load_split(held_out, config.data, tokenizer, names)
    config = dataclasses.replace(
        config,
        model=dataclasses.replace(
            config.model,
            vocabulary_size=len(tokenizer.vocabulary),
            num_classes=len(names),
            max_length=tokenizer.max_length,
            **head_fields(config.data.task, train.labels),
        ),
        data=dataclasses.replace(config.data, chinese_words=resolved_chinese_words(tokenizer)),
        train=dataclasses.replace(config.train, epochs=epochs_for(config.train, len(train))),
    )
    derived = not original_epochs
    run_dir.check_or_save_config(output, config)
    return PreparedData(
        config,
        names,
        tokenizer,
        train,
        validation,
        evaluation,
        held_out is not None,
        whole,
        derived_epochs=derived,
        repeated=repeated_texts(train_examples if whole is None else whole, evaluation_examples),
    )


def head_fields(task, targets):
    """The model fields `data.task` decides: the head's activation; for a
    regression, the mean and standard deviation of its training `targets`
    (float64, as JSON saves them), which the head's scores are scaled by;
    for a multi-label task, each label's log-odds in the `(examples, labels)`
    0/1 `targets`, which its logit starts from."""
    fields = {"head_activation": "softmax", "target_mean": 0.0, "target_scale": 1.0, "label_log_odds": []}
    if task == "multi_label":
        return {**fields, "head_activation": "sigmoid", "label_log_odds": label_log_odds(targets)}
    if task != "regression":
        return fields
    scale = float(np.std(targets, dtype="float64"))
    return {
        **fields,
        "head_activation": "linear",
        "target_mean": float(np.mean(targets, dtype="float64")),
        "target_scale": scale if scale > 0 else 1.0,
    }


def label_log_odds(targets):
    """`log(p / (1 - p))` of each label's share `p` of the `(examples,
    labels)` 0/1 `targets`, kept half an example from 0 and 1 so that a
    label on every text stays finite."""
    targets = np.asarray(targets, dtype="float64")
    count = len(targets)
    share = np.clip(targets.mean(axis=0), 0.5 / count, 1 - 0.5 / count)
    return [float(value) for value in np.log(share / (1 - share))]


def repeated_texts(training, evaluation):
    """The sources ("file:line") of the `evaluation` examples whose text is
    also a training text's, each with the first such training source."""
    first = {}
    for text, source in zip(training.texts, training.sources):
        first.setdefault(text, source)
    return [(source, first[text]) for text, source in zip(evaluation.texts, evaluation.sources) if text in first]


def epochs_for(train_config, examples):
    """`train.epochs`, or where it is 0 the epochs that give `examples` at
    least `train.min_steps` optimizer steps (`MIN_EPOCHS` to `MAX_EPOCHS`)."""
    if train_config.epochs:
        return train_config.epochs
    steps_per_epoch = max(1, examples // train_config.batch_size)
    return min(MAX_EPOCHS, max(MIN_EPOCHS, -(-train_config.min_steps // steps_per_epoch)))


def fit_and_evaluate(model, config, strategy, train, evaluation, names, model_dir, epochs=None):
    """Trains `model` (built in `strategy.scope()`), keeping the best epoch.

    Resumes from `model_dir`'s checkpoints, evaluates after every epoch, and
    returns the report of the best weights (the last epoch's without
    `train.keep_best_epoch`), which the model holds afterwards.
    """
    epochs = epochs or config.train.epochs
    steps = len(train) // config.train.batch_size * epochs
    with strategy.scope():
        trainer = Trainer(
            model,
            build_optimizer(config.optimizer, steps),
            strategy,
            config.train,
            config.optimizer,
            model_dir,
            class_weights=_class_weights(config, train, names),
            task=config.data.task,
            target_scale=config.model.target_scale,
        )
    eval_writer = tf.summary.create_file_writer(os.path.join(trainer.output_dir, LOGS_DIR, "eval"))

    def on_epoch_end(epoch):
        report = _evaluate(trainer, evaluation, names, config)
        with eval_writer.as_default(step=int(trainer.step.numpy())):
            for key in score_keys(report):
                tf.summary.scalar(key, report[key])
        print(f"validation {scores_line(report)}")
        return selection_score(report, config.train.best_metric)

    epoch_losses = trainer.fit(_training_batches(config, strategy, train), len(train), epochs, on_epoch_end)
    model.load_weights(os.path.join(trainer.output_dir, BEST_WEIGHTS))
    report = _evaluate(trainer, evaluation, names, config)
    if "thresholds" in report:  # chosen on the validation examples; a sweep's trial exports with them
        save_thresholds(report["thresholds"], trainer.output_dir)
    report["skipped_rows"] = {"train": train.skipped, "eval": evaluation.skipped}
    report["train_loss_by_epoch"] = epoch_losses
    return report


def _class_weights(config, split, names):
    # `train.class_weight` for `split`'s labels, said when there are any.
    weights = class_weights(config.train.class_weight, split.labels, names)
    if weights is not None:
        print(
            f"class weights ({config.train.class_weight}): "
            + ", ".join(f"{name} {weight:.3g}" for name, weight in zip(names, weights))
        )
    return weights


def _training_batches(config, strategy, split):
    # `make_dataset` of `Trainer.fit`: one epoch of `split`'s training batches.
    return functools.partial(
        train_dataset,
        split,
        config.train.batch_size,
        config.train.seed,
        length_bucket=usable_length_bucket(config, strategy),
        token_dropout=config.train.token_dropout,
    )


def _vocabulary(model_dir, output, config, train_examples, vocabulary_from=None):
    # Learned once per run and reloaded on resume, so ids never shift. A
    # cluster's other workers learn the same one the chief does (the same data
    # and settings) unless the chief's is there already.
    if run_dir.has_vocabulary(model_dir):
        return load_label_names(model_dir), Tokenizer.load(model_dir)
    if vocabulary_from and not tf.io.gfile.exists(os.path.join(vocabulary_from, VOCABULARY_FILE)):
        raise ValueError(
            f"{vocabulary_from}: no {VOCABULARY_FILE}; not a pipeline.train or pipeline.pretrain directory"
        )
    reuse = Tokenizer.load(vocabulary_from) if vocabulary_from else None
    texts = vocabulary_texts(config, train_examples) if reuse is None else None  # unlabelled files: a sweep's
    names, tokenizer = learn_vocabulary(train_examples, config.data, config.model.max_length, reuse, texts)
    run_dir.save_vocabulary(output, tokenizer, names)
    return names, tokenizer


def _evaluate(trainer, split, names, config):
    probabilities, labels = trainer.predict(split)
    return report_of(config, labels, probabilities, names)


def _print_skipped(skipped):
    for split, counts in skipped.items():
        for reason, count in counts.items():
            print(f"skipped {count} {split} row(s): {reason}")


# pipeline.train's flags of config fields; DATA_FLAGS are what a sweep takes too.
FLAGS = {  # flag: (config section, field, type)
    "task": ("data", "task", str),
    "label-delimiter": ("data", "label_delimiter", str),
    "text-column": ("data", "text_column", str),
    "text-pair-column": ("data", "text_pair_column", str),
    "label-column": ("data", "label_column", str),
    "tokenizer": ("data", "tokenizer", str),
    "chinese-words": ("data", "chinese_words", str),
    "max-length": ("model", "max_length", int),
    "pooling": ("model", "pooling", str),
    "epochs": ("train", "epochs", int),
    "patience": ("train", "patience", int),
    "batch-size": ("train", "batch_size", int),
    "learning-rate": ("optimizer", "learning_rate", float),
    "seed": ("train", "seed", int),
    "pretrain-epochs": ("train", "pretrain_epochs", int),
    "validation-split": ("train", "validation_split", float),
    "members": ("train", "members", int),
    "best-metric": ("train", "best_metric", str),
    "class-weight": ("train", "class_weight", str),
    "pretrain-learning-rate": ("pretrain", "learning_rate", float),
    "pretrain-batch-size": ("pretrain", "batch_size", int),
    "pretrain-steps": ("pretrain", "steps", int),
    "pretrain-min-steps": ("pretrain", "min_steps", int),
    "refit-schedule": ("train", "refit_schedule", str),
    "huber-delta": ("train", "huber_delta", float),
    "unlabelled": ("pretrain", "unlabelled", str),
    "steps-per-execution": ("train", "steps_per_execution", int),
    "checkpoint-every": ("train", "checkpoint_every", int),
    "precision": ("train", "precision", str),
}
DATA_FLAGS = [flag for flag, (section, _, _) in FLAGS.items() if section == "data"]
NOTES = {
    "task": "classification (a class per text), multi_label (any number of labels per text; --multi-label) "
    "or regression (a number per text, predicted as a score); ",
    "label-delimiter": "what separates a multi_label row's labels in CSV and TSV; ",
    "text-pair-column": "the column of a pair's second text, packed as [CLS] text [SEP] pair [SEP]; ",
    "tokenizer": "wordpiece or word; ",
    "chinese-words": "auto, on or off: Chinese as the words jieba finds in training, not characters; ",
    "max-length": "0 derives it from the training data; ",
    "pooling": "the head's: mean, flatten (the source design's) or first; ",
    "epochs": "0 derives them: enough for train.min_steps steps, at least 3; ",
    "pretrain-epochs": "masked-LM epochs on the training texts first, 0 = none; ",
    "patience": "stop after this many epochs without a better validation score, 0 = never; ",
    "validation-split": "fraction of --train held out to keep the best epoch on, 0 = keep it on --eval; ",
    "members": "classifiers fine-tuned from the one pre-training, exported as one ensemble; ",
    "best-metric": "the validation score that keeps the epoch: loss (the lowest) or, by --task, "
    + "; ".join(f"{task}: {', '.join(m for m in metrics if m != 'loss')}" for task, metrics in BEST_METRICS.items())
    + "; ",
    "class-weight": "the classes' weights in the loss: none, balanced, or NAME:WEIGHT,...; ",
    "pretrain-learning-rate": "masked-LM's peak learning rate; ",
    "pretrain-batch-size": "sequences per masked-LM step; ",
    "pretrain-steps": "masked-LM optimizer steps in place of the --pretrain-epochs passes, 0 = epochs; ",
    "pretrain-min-steps": "the fewest masked-LM steps: a small corpus gets more than --pretrain-epochs passes; ",
    "refit-schedule": "the refit's learning rate: run (the run's, cut at the kept epoch) or kept (planned for "
    "the kept epochs, decaying to 0); ",
    "huber-delta": "a regression's loss: 0 the squared error, above 0 the Huber loss with this delta, in standard "
    "deviations of the training scores; ",
    "unlabelled": "files of unlabelled text, streamed into the pre-training with the training texts, the "
    "vocabulary learned from both: path, glob or comma-separated list of plain text (a text a line) or of any "
    "--train format, labels ignored; ",
    "steps-per-execution": "training steps per host round trip (--tpu: 200); ",
    "precision": "auto, float32 or mixed_bfloat16; ",
}


def add_flags(parser, flags):
    """Adds `flags` (names of `FLAGS`) to `parser`, with --skip-bad-rows and,
    where --task is among them, --multi-label."""
    for flag in flags:
        section, field, kind = FLAGS[flag]
        default = getattr(getattr(Config(), section), field)
        parser.add_argument(
            f"--{flag}",
            type=kind,
            help=f"{section}.{field} ({NOTES.get(flag, '')}default {'none' if default == '' else default})",
        )
    parser.add_argument(
        "--skip-bad-rows", action="store_true", help="skip and count bad rows instead of stopping at the first"
    )
    if "task" in flags:
        parser.add_argument(
            "--multi-label",
            action="store_true",
            help="--task multi_label: each row's label is a list (a;b in CSV and TSV, a JSON list in JSON Lines, "
            "several values in TFRecord); the export answers with the labels over their thresholds",
        )


def flag_overrides(parser, args, flags):
    """The config overrides (`{section: {field: value}}`) of the `add_flags` flags given."""
    values = {}
    for flag in flags:
        section, field, _ = FLAGS[flag]
        value = getattr(args, flag.replace("-", "_"))
        if value is not None:
            values.setdefault(section, {})[field] = value
    if args.skip_bad_rows:
        values.setdefault("data", {})["skip_bad_rows"] = True
    if getattr(args, "multi_label", False):
        if values.get("data", {}).get("task", "multi_label") != "multi_label":
            parser.error(f"--multi-label is --task multi_label, not {values['data']['task']}")
        values.setdefault("data", {})["task"] = "multi_label"
    return values


def parse_args(argv=None):
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0],
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog=__doc__.split("\n\n", 1)[1],
    )
    parser.add_argument(
        "--train",
        help="training files: path, glob, or comma-separated list "
        "(CSV, TSV, JSONL, TFRecord); the demo corpus if omitted",
    )
    parser.add_argument(
        "--eval",
        help="evaluation files, as --train (required with --train): they score the "
        "exported model and choose nothing (with --validation-split 0, they keep the best epoch)",
    )
    parser.add_argument("--model-dir", required=True, help="where the run's files go (resumes if present)")
    parser.add_argument(
        "--config", help='JSON file overriding config fields, e.g. {"model": {"num_layers": 6}, "train": {"epochs": 5}}'
    )
    parser.add_argument(
        "--tpu",
        nargs="?",
        const="local",
        help="train on a TPU: 'local' (a TPU VM, the default) or a TPU name/address; starts "
        "from TPU defaults (batches per replica, longer host loops, bfloat16; README)",
    )
    parser.add_argument(
        "--init-from",
        help="a pipeline.pretrain directory: start from its vocabulary, "
        "embeddings and encoder (with --pretrain-epochs 0)",
    )
    parser.add_argument(
        "--vocabulary-from",
        help="a pipeline.train or pipeline.pretrain directory: use its "
        "vocabulary instead of learning one (members of an ensemble must share it)",
    )
    add_flags(parser, FLAGS)
    parser.add_argument(
        "--refit",
        action=argparse.BooleanOptionalAction,
        help="train.refit: once the best epoch is kept, train again from the same start on the "
        "training and validation examples together up to that epoch, and export that model "
        f"(default {Config().train.refit}; with --validation-split 0 it trains on --eval too)",
    )
    args = parser.parse_args(argv)
    values = flag_overrides(parser, args, FLAGS)
    if args.refit is not None:
        values.setdefault("train", {})["refit"] = args.refit
    return args, values


def main(argv=None):
    try:
        args, overrides = parse_args(argv)
        strategy = resolve_strategy(args.tpu)
        config = run_config(args.config, overrides, strategy, args.tpu)  # a bad --config or value is an error too
        train_and_evaluate(
            config,
            args.model_dir,
            args.train,
            args.eval,
            args.tpu,
            strategy=strategy,
            init_from=args.init_from,
            vocabulary_from=args.vocabulary_from,
        )
    except (DataError, TPUUnavailableError, TrainingError, ValueError) as error:
        sys.exit(f"error: {error}")


if __name__ == "__main__":
    main()
