"""Labels as targets: a class (or label) set taken from the training data,
sorted, saved with the model; or, for a regression, numbers."""

import collections
import json
import math
import os

import numpy as np
import tensorflow as tf

from pipeline.files import atomic_write, open_text
from pipeline.layout import LABELS_FILE, THRESHOLDS_FILE
from pipeline.readers import DataError

# Strata of a regression's held-out draw: its scores' quantiles.
SCORE_STRATA = 10


def output_names(labels, data_config):
    """The names of the model's outputs: the sorted classes of `labels`, a
    multi-label task's labels (`data.task`), or a regression's one score,
    named by its column."""
    if data_config.task == "regression":
        return [data_config.label_column]
    if data_config.task == "multi_label":
        return label_names([label for row in labels for label in row])
    return label_names(labels)


def targets(examples, names, data_config):
    """The training targets of `examples`: class ids (int32) of the label
    set `names` (`encode_labels`), a multi-label task's label indicators
    (float32 `(examples, labels)`, `encode_label_lists`), or scores
    (float32, `encode_scores`)."""
    if data_config.task == "regression":
        return encode_scores(examples, data_config.skip_bad_rows)
    if data_config.task == "multi_label":
        return encode_label_lists(examples, names, data_config.skip_bad_rows)
    return encode_labels(examples, names, data_config.skip_bad_rows)


def strata(examples, data_config):
    """What a held-out draw keeps the shares of (`dataset.hold_out`): each
    example's label, a multi-label example's rarest label, or a regression's
    score decile; a label that is not a number is an error (or skipped, as
    `encode_scores`) here already."""
    if data_config.task == "multi_label":
        counts = collections.Counter(label for row in examples.labels for label in row)
        return [min(row, key=lambda label: (counts[label], label)) for row in examples.labels]
    if data_config.task != "regression":
        return list(examples.labels)
    scores = encode_scores(examples, data_config.skip_bad_rows)
    edges = np.quantile(scores, np.linspace(0, 1, SCORE_STRATA + 1)[1:-1]) if len(scores) else []
    return np.searchsorted(edges, scores, side="right").tolist()


def encode_scores(examples, skip_bad_rows=False):
    """The labels of `examples` as numbers (float32). A label that is not a
    finite number is a `DataError` naming the file and line, or, with
    `skip_bad_rows`, removes that example and is counted in `examples.skipped`."""
    keep, scores = [], []
    for position, (label, source) in enumerate(zip(examples.labels, examples.sources)):
        try:
            score = float(label)
        except ValueError:
            score = math.nan
        if not math.isfinite(score):
            if not skip_bad_rows:
                raise DataError(f"{source}: label {label!r} is not a number (data.task regression)")
            examples.skipped["label not a number"] += 1
            continue
        keep.append(position)
        scores.append(score)
    _keep(examples, keep)
    return np.asarray(scores, "float32")


def encode_label_lists(examples, names, skip_bad_rows=False):
    """Indicators float32 `(examples, len(names))` of each example's labels
    (tuples, as `readers.labels_of` gives them). A label that training
    never saw is a `DataError` naming the file and line, or, with
    `skip_bad_rows`, removes that example and is counted in `examples.skipped`."""
    index = {name: i for i, name in enumerate(names)}
    keep, rows = [], []
    for position, (labels, source) in enumerate(zip(examples.labels, examples.sources)):
        unknown = [label for label in labels if label not in index]
        if unknown:
            if not skip_bad_rows:
                raise DataError(f"{source}: label {unknown[0]!r} never seen in training; known: {names}")
            examples.skipped["label never seen in training"] += 1
            continue
        keep.append(position)
        rows.append([index[label] for label in labels])
    _keep(examples, keep)
    indicators = np.zeros((len(rows), len(names)), "float32")
    for row, ids in enumerate(rows):
        indicators[row, ids] = 1.0
    return indicators


def label_names(labels):
    """Sorted distinct labels; numerically when every label is an integer."""
    names = set(labels)
    if all(_is_integer(name) for name in names):
        return sorted(names, key=int)
    return sorted(names)


def class_weights(spec, labels, names):
    """The loss weight of each class id for `train.class_weight`'s `spec`,
    float32 `(len(names),)`, or None for "none".

    "balanced" weighs each class by `examples / (classes * its examples)` in
    `labels` (the training label ids), as scikit-learn does, so every class
    adds as much to the loss; "NAME:WEIGHT,..." gives classes by name (the
    others weigh 1).
    """
    if spec == "none":
        return None
    if spec == "balanced":
        counts = np.bincount(labels, minlength=len(names)).astype("float64")
        return (len(labels) / (len(names) * np.maximum(counts, 1))).astype("float32")
    weights = np.ones(len(names), "float32")
    for name, weight in parse_class_weights(spec).items():
        if name not in names:
            raise ValueError(
                f"train.class_weight names class {name!r}, which the training data does not have; "
                f"its classes: {list(names)}"
            )
        weights[list(names).index(name)] = weight
    return weights


def parse_class_weights(spec):
    """`{name: weight}` of a "NAME:WEIGHT,..." `train.class_weight`; a
    `ValueError` naming the part that is not one."""
    weights = {}
    for part in spec.split(","):
        name, separator, weight = part.rpartition(":")
        try:
            value = float(weight)
        except ValueError:
            value = -1.0
        if not separator or not name or not value > 0:
            raise ValueError(
                f"train.class_weight {spec!r}: {part!r} is not NAME:WEIGHT with a positive weight "
                '(or use "balanced" or "none")'
            )
        weights[name] = value
    return weights


def encode_labels(examples, names, skip_bad_rows=False):
    """Label ids of `examples` (int32), for a label set `names`.

    A label that training never saw is a `DataError` naming the file and
    line, or, with `skip_bad_rows`, removes that example from `examples` and
    is counted in `examples.skipped`.
    """
    index = {name: i for i, name in enumerate(names)}
    keep, ids = [], []
    for position, (label, source) in enumerate(zip(examples.labels, examples.sources)):
        if label not in index:
            if not skip_bad_rows:
                raise DataError(f"{source}: label {label!r} never seen in training; known: {names}")
            examples.skipped["label never seen in training"] += 1
            continue
        keep.append(position)
        ids.append(index[label])
    _keep(examples, keep)
    return np.asarray(ids, "int32")


def _keep(examples, positions):
    # Only the examples at `positions` stay in `examples`.
    if len(positions) < len(examples):
        for field in ("texts", "labels", "sources"):
            values = getattr(examples, field)
            setattr(examples, field, [values[i] for i in positions])


def save_label_names(names, directory):
    # Written last with the vocabulary and atomically: its presence says the
    # vocabulary is complete (other workers of a cluster may be reading).
    with atomic_write(os.path.join(directory, LABELS_FILE)) as f:
        json.dump(list(names), f, ensure_ascii=False, indent=1)


def load_label_names(directory):
    with open_text(os.path.join(directory, LABELS_FILE)) as f:
        return json.load(f)


def save_thresholds(thresholds, directory):
    """Writes a multi-label run's `{label: threshold}` (`metrics.multi_label_report`)."""
    with atomic_write(os.path.join(directory, THRESHOLDS_FILE)) as f:
        json.dump(thresholds, f, ensure_ascii=False, indent=1)


def load_thresholds(directory, names):
    """A multi-label run's thresholds, in `names` order; a `ValueError` where
    it has none (no epoch has been scored)."""
    path = os.path.join(directory, THRESHOLDS_FILE)
    if not tf.io.gfile.exists(path):
        raise ValueError(f"{directory}: no {THRESHOLDS_FILE}; the run has not finished an epoch")
    with open_text(path) as f:
        thresholds = json.load(f)
    return [thresholds[name] for name in names]


def _is_integer(name):
    try:
        return str(int(name)) == name
    except ValueError:
        return False
