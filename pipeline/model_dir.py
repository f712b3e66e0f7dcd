"""Reading, checking and restoring a training run's directory (its layout: `pipeline.layout`)."""

import contextlib
import json
import os

import tensorflow as tf

from pipeline.config import Config
from pipeline.files import open_text
from pipeline.labels import load_label_names, save_label_names
from pipeline.layout import BEST_EPOCH, BEST_WEIGHTS, CHECKPOINT_DIR, CONFIG_FILE, LABELS_FILE, MEMBERS_DIR, REFIT_DIR
from pipeline.model import build_model
from pipeline.tokenizer import Tokenizer
from pipeline.trainer import model_variables

# How the host drives the training steps, not what they compute: a run
# trains the same weights to the digit whatever they are (tests), so it
# resumes with others, and a finished pre-training is shared across them.
HOST_LOOP_FIELDS = {"train": {"steps_per_execution", "checkpoint_every"}}
# Where the input is computed: a run resumes with another tf.data service
# dispatcher or none, and a finished pre-training is shared whatever it used
# (its steps are drawn alike, though not the same).
INPUT_SERVICE_FIELDS = {"pretrain": {"data_service"}}
# Fields a resumed run may change: those, and those that act after
# everything a run resumes from. train.refit and members 2..N of
# train.members come after the run's own training, so a finished run gets
# its refit by being started again with --refit, and grows (or shrinks) its
# ensemble with another --members.
CHANGEABLE_ON_RESUME = {"train": {"refit", "members"} | HOST_LOOP_FIELDS["train"], **INPUT_SERVICE_FIELDS}


def load_config(model_dir):
    """The config a run saved, which holds every field: one lacking some was
    saved by another version of this project, whose defaults may differ."""
    path = os.path.join(model_dir, CONFIG_FILE)
    with open_text(path) as f:
        try:
            saved = json.load(f)
        except json.JSONDecodeError as error:
            raise ValueError(f"{path}: not valid JSON: {error}") from None
    missing = [
        f"{section}.{field}"
        for section, fields in Config().to_dict().items()
        for field in fields
        if field not in saved.get(section, {})
    ]
    if missing:
        raise ValueError(
            f"{path} lacks {', '.join(missing)}: saved by another version of this project; "
            "train it again in a new --model-dir"
        )
    return Config.from_dict(saved, source=path)


def check_or_save_config(model_dir, config):
    """Saves `config`, or checks it equals the one a previous run saved.

    Resuming with different settings would silently mix two runs, so a
    mismatch is an error that names the differing fields, except those of
    `CHANGEABLE_ON_RESUME`, which are saved anew.
    """
    path = os.path.join(model_dir, CONFIG_FILE)
    if tf.io.gfile.exists(path):
        saved = check_resumable(model_dir, config)
        if saved == config.to_dict():
            return
    config.save(path)


def check_resumable(model_dir, config, skip=None):
    """Raises, naming the fields, if `model_dir` holds a run saved with other
    settings than `config` (`CHANGEABLE_ON_RESUME` and `skip`, a dict of
    section to fields, excepted). Returns the saved settings as a dict, or
    None where no run was saved."""
    if not tf.io.gfile.exists(os.path.join(model_dir, CONFIG_FILE)):
        return None
    saved = load_config(model_dir).to_dict()
    changed = [
        f"{section}.{key}: {saved[section][key]!r} -> {value!r}"
        for section, values in config.to_dict().items()
        for key, value in values.items()
        if saved[section][key] != value
        and key not in CHANGEABLE_ON_RESUME.get(section, ())
        and key not in (skip or {}).get(section, ())
    ]
    if changed:
        raise ValueError(
            f"{model_dir} holds a run with other settings ({'; '.join(changed)}); "
            "use a new --model-dir, or the same settings to resume"
        )
    return saved


def save_vocabulary(model_dir, tokenizer, label_names):
    tokenizer.save(model_dir)
    save_label_names(label_names, model_dir)


def has_vocabulary(model_dir):
    return tf.io.gfile.exists(os.path.join(model_dir, LABELS_FILE))


def load_run(model_dir):
    """`(config, tokenizer, label_names)` of a run directory."""
    path = os.path.join(model_dir, CONFIG_FILE)
    if not tf.io.gfile.exists(path):
        raise ValueError(f"{model_dir}: no {CONFIG_FILE}; not a pipeline.train model directory")
    return load_config(model_dir), Tokenizer.load(model_dir), load_label_names(model_dir)


def member_dirs(model_dir):
    """`model_dir` and, for a run with `train.members` N, its members 2..N."""
    members = load_config(model_dir).train.members if tf.io.gfile.exists(os.path.join(model_dir, CONFIG_FILE)) else 1
    return [model_dir] + [os.path.join(model_dir, MEMBERS_DIR, str(n)) for n in range(2, members + 1)]


def restore_variables(model, checkpoint_path, averaged=False):
    """Loads `model`'s variables from a training checkpoint, all or none;
    `averaged`: its trainable ones from the moving averages the checkpoint
    holds (`optimizer.weight_averaging`), what the run scores and keeps."""
    status = tf.train.Checkpoint(model=model_variables(model)).restore(checkpoint_path)
    status.expect_partial()  # the optimizer's state is not wanted here
    status.assert_existing_objects_matched()
    if averaged:
        averages = {f"average_{index}": variable for index, variable in enumerate(model.trainable_variables)}
        status = tf.train.Checkpoint(averages=averages).restore(checkpoint_path)
        status.expect_partial()
        status.assert_existing_objects_matched()


def kept_epoch(model_dir):
    """The epoch (counted from 1) whose weights a run kept as its best."""
    path = os.path.join(model_dir, BEST_EPOCH)
    if not tf.io.gfile.exists(path):
        raise ValueError(f"{model_dir}: no {BEST_EPOCH}, so the epoch it kept is unknown (no epoch has finished)")
    with open_text(path) as f:
        return json.load(f)["epoch"]


def restore_model(model_dir, strategy=None, refit=True):
    """The trained model of a run: its best weights, else its latest checkpoint.

    Of a `train.refit` run, the refit (what it exports); with `refit` false,
    the model it kept on its validation examples instead. Built in
    `strategy.scope()` when a strategy is given (to predict with it).
    """
    config, tokenizer, names = load_run(model_dir)
    with strategy.scope() if strategy else contextlib.nullcontext():
        model = build_model(config.model)
    if config.train.refits and refit:
        final = os.path.join(model_dir, REFIT_DIR, BEST_WEIGHTS)
        if not tf.io.gfile.exists(final):
            raise ValueError(f"{model_dir}: its refit (train.refit) has not finished; start the run again to finish it")
        model.load_weights(final)
        return model, tokenizer, names
    best = os.path.join(model_dir, BEST_WEIGHTS)
    if tf.io.gfile.exists(best):
        model.load_weights(best)
    else:
        latest = tf.train.latest_checkpoint(os.path.join(model_dir, CHECKPOINT_DIR))
        if latest is None:
            raise ValueError(f"{model_dir}: no best weights and no checkpoint to restore")
        restore_variables(model, latest, averaged=bool(config.optimizer.weight_averaging))
    return model, tokenizer, names
