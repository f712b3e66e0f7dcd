"""The label set: taken from the training data, sorted, saved with the model."""

import json
import os

import numpy as np

from pipeline.files import atomic_write, open_text
from pipeline.layout import LABELS_FILE
from pipeline.readers import DataError


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
    if len(keep) < len(examples):
        for field in ("texts", "labels", "sources"):
            values = getattr(examples, field)
            setattr(examples, field, [values[i] for i in keep])
    return np.asarray(ids, "int32")


def save_label_names(names, directory):
    # Written last with the vocabulary and atomically: its presence says the
    # vocabulary is complete (other workers of a cluster may be reading).
    with atomic_write(os.path.join(directory, LABELS_FILE)) as f:
        json.dump(list(names), f, ensure_ascii=False, indent=1)


def load_label_names(directory):
    with open_text(os.path.join(directory, LABELS_FILE)) as f:
        return json.load(f)


def _is_integer(name):
    try:
        return str(int(name)) == name
    except ValueError:
        return False
