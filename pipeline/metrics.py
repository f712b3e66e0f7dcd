"""The scores of an evaluation, as written to `metrics.json`: of classes
(`classification_report`), of labels (`multi_label_report`) or of a score
(`regression_report`)."""

import numpy as np

# What `data.task` may name.
TASKS = ("classification", "multi_label", "regression")
# The validation scores of each task that `train.best_metric` may keep an
# epoch on (and a sweep rank its trials by), each with the direction that is
# better; "loss" is the training loss.
BEST_METRICS = {
    "classification": {"loss": "min", "accuracy": "max", "macro_f1": "max"},
    "multi_label": {"loss": "min", "micro_f1": "max", "macro_f1": "max"},
    "regression": {"loss": "min", "rmse": "min", "pearson": "max", "spearman": "max"},
}
# Every task's metrics in one dict: a metric's direction is the same in every task that has it.
_DIRECTIONS = {name: direction for metrics in BEST_METRICS.values() for name, direction in metrics.items()}
# A model that predicts one class for at least this share of the examples,
# where that class's true share is at most ONE_CLASS_TRUE_SHARE, has learned
# little beyond always answering it (`one_class_warning`).
ONE_CLASS_PREDICTED_SHARE = 0.95
ONE_CLASS_TRUE_SHARE = 0.9


def classification_report(labels, probabilities, label_names):
    """Accuracy, macro-F1, loss, per-class precision/recall/F1 and the confusion matrix.

    Args:
        labels: int array of true class ids.
        probabilities: float array of class probabilities, one row per label;
            an example is predicted as its most probable class.
        label_names: class names, indexed by id.
    """
    labels, probabilities = np.asarray(labels), np.asarray(probabilities)
    predictions = np.argmax(probabilities, axis=-1)
    classes = len(label_names)
    confusion = np.zeros((classes, classes), "int64")  # rows: true, columns: predicted
    np.add.at(confusion, (labels, predictions), 1)
    true_positives = np.diag(confusion).astype("float64")
    precision = _divide(true_positives, confusion.sum(axis=0))
    recall = _divide(true_positives, confusion.sum(axis=1))
    f1 = _divide(2 * precision * recall, precision + recall)
    per_class = {
        name: {"precision": precision[i], "recall": recall[i], "f1": f1[i], "support": int(confusion[i].sum())}
        for i, name in enumerate(label_names)
    }
    return {
        "examples": int(len(labels)),
        "accuracy": float(true_positives.sum() / max(len(labels), 1)),
        "macro_f1": float(f1.mean()),
        "loss": log_loss(labels, probabilities),
        "per_class": {
            name: {k: float(v) if k != "support" else v for k, v in stats.items()} for name, stats in per_class.items()
        },
        "confusion_matrix": {"labels": list(label_names), "rows_true_columns_predicted": confusion.tolist()},
    }


def regression_report(targets, scores, scale=1.0, huber_delta=0.0):
    """RMSE, mean absolute error, Pearson's and Spearman's correlations and
    the loss (the training loss: the mean squared error of scores
    standardized by `scale`, or with `huber_delta` their Huber loss) of
    predicted `scores` against the true `targets`."""
    targets = np.asarray(targets, "float64")
    scores = np.asarray(scores, "float64").reshape(len(targets))
    errors = scores - targets
    return {
        "examples": int(len(targets)),
        "rmse": float(np.sqrt(np.mean(errors**2))) if len(targets) else 0.0,
        "mae": float(np.mean(np.abs(errors))) if len(targets) else 0.0,
        "pearson": pearson(targets, scores),
        "spearman": pearson(ranks(targets), ranks(scores)),
        "loss": float(np.mean(regression_loss(errors / scale, huber_delta))) if len(targets) else 0.0,
    }


def regression_loss(errors, huber_delta=0.0):
    """Each standardized error's loss, as the trainer's: its square, or with
    `huber_delta` its Huber loss (half the square up to `huber_delta`,
    linear beyond)."""
    if not huber_delta:
        return errors**2
    return np.where(abs(errors) <= huber_delta, 0.5 * errors**2, huber_delta * (abs(errors) - 0.5 * huber_delta))


def multi_label_report(indicators, probabilities, label_names, thresholds=None, metric="micro_f1"):
    """Micro- and macro-F1, exact-match accuracy, loss and per-label
    precision/recall/F1 of a multi-label task's probabilities, each label
    predicted where its probability reaches its threshold.

    Args:
        indicators: `(examples, labels)` 0/1 array of the true labels.
        probabilities: float array of the same shape.
        label_names: label names, indexed by column.
        thresholds: each label's threshold, in `label_names` order; None
            chooses them here, the best for `metric` on these examples
            (`best_thresholds`).
        metric: "micro_f1" or "macro_f1", what chosen thresholds maximize.
    """
    truth = np.asarray(indicators, "float64") > 0.5
    probabilities = np.asarray(probabilities, "float64").reshape(truth.shape)
    if thresholds is None:
        thresholds = best_thresholds(truth, probabilities, metric)
    predicted = probabilities >= np.asarray(thresholds)
    true_positives = (truth & predicted).sum(axis=0).astype("float64")
    precision = _divide(true_positives, predicted.sum(axis=0).astype("float64"))
    recall = _divide(true_positives, truth.sum(axis=0).astype("float64"))
    f1 = _divide(2 * precision * recall, precision + recall)
    micro_precision = true_positives.sum() / max(predicted.sum(), 1)
    micro_recall = true_positives.sum() / max(truth.sum(), 1)
    clipped = np.clip(probabilities, 1e-7, 1 - 1e-7)  # as Keras's binary cross-entropy clips them
    loss = -(truth * np.log(clipped) + ~truth * np.log(1 - clipped)).mean(axis=-1)
    return {
        "examples": int(len(truth)),
        "micro_f1": float(_divide(2 * micro_precision * micro_recall, micro_precision + micro_recall)),
        "macro_f1": float(f1.mean()) if len(label_names) else 0.0,
        "exact_match": float((predicted == truth).all(axis=1).mean()) if len(truth) else 0.0,
        "loss": float(loss.mean()) if len(truth) else 0.0,
        "thresholds": {name: float(threshold) for name, threshold in zip(label_names, thresholds)},
        "per_label": {
            name: {
                "precision": float(precision[i]),
                "recall": float(recall[i]),
                "f1": float(f1[i]),
                "support": int(truth[:, i].sum()),
            }
            for i, name in enumerate(label_names)
        },
    }


def best_thresholds(truth, probabilities, metric="micro_f1"):
    """Each label's probability threshold, the best for `metric` on these
    examples, each midway between the lowest probability it predicts and
    the next (or, predicting none, the highest and 1).

    "macro_f1", the mean of the labels' F1, is best with each label's own
    F1-best threshold (0.5 for a label these examples never have; every
    label's, for examples without any). Labels
    the model has barely learned are F1-best predicted on every text (F1
    2p / (1 + p) at a share p), which floods the predictions of all the
    others: "micro_f1" starts from the one threshold best for every label
    at once, then moves each label's to its micro-F1-best given the others'
    until none moves.
    """
    truth = np.asarray(truth, bool)
    probabilities = np.asarray(probabilities, "float64")
    if metric == "macro_f1":
        return [
            _best_cut(truth[:, j], probabilities[:, j])[0] if truth[:, j].any() else 0.5 for j in range(truth.shape[1])
        ]
    if metric != "micro_f1":
        raise ValueError(f"thresholds maximize micro_f1 or macro_f1, not {metric!r}")
    if not truth.any():
        return [0.5] * truth.shape[1]
    shared = _best_cut(truth.ravel(), probabilities.ravel())[0]
    thresholds = np.full(truth.shape[1], shared)
    predicted = probabilities >= thresholds
    hits, count, actual = int((truth & predicted).sum()), int(predicted.sum()), int(truth.sum())
    for _ in range(10):  # coordinate ascent; rarely more than two rounds
        moved = False
        for j in range(truth.shape[1]):
            column = predicted[:, j]
            other_hits, other_count = hits - int((truth[:, j] & column).sum()), count - int(column.sum())
            threshold, _ = _best_cut(truth[:, j], probabilities[:, j], other_hits, other_count + actual)
            if threshold != thresholds[j]:
                thresholds[j], moved = threshold, True
                predicted[:, j] = probabilities[:, j] >= threshold
            hits = other_hits + int((truth[:, j] & predicted[:, j]).sum())
            count = other_count + int(predicted[:, j].sum())
        if not moved:
            break
    return [float(threshold) for threshold in thresholds]


def _best_cut(positives, scores, other_hits=0, other_total=None):
    """`(threshold, f1)` of the cut of `scores` best for the F1 `2 (hits +
    other_hits) / (predicted + other_total)`: with the defaults, this column's
    own F1 (`other_total` its positives), never predicting none; given the
    other labels' true positives and predicted-plus-true count, the micro-F1,
    which predicting none may maximize."""
    order = np.argsort(-scores, kind="stable")
    ranked = scores[order]
    hits = np.cumsum(positives[order])
    cuts = np.flatnonzero(np.append(ranked[1:] < ranked[:-1], True))  # the last of each run of ties
    if other_total is None:
        f1 = 2 * hits[cuts] / (cuts + 1 + positives.sum())
    else:
        f1 = 2 * (other_hits + hits[cuts]) / np.maximum(other_total + cuts + 1, 1)
        none = 2 * other_hits / max(other_total, 1)
        if none >= f1.max():
            return float((ranked[0] + 1.0) / 2), none
    best = cuts[int(np.argmax(f1))]
    below = ranked[best + 1] if best + 1 < len(ranked) else 0.0
    return float((ranked[best] + below) / 2), float(f1.max())


def report_of(config, labels, outputs, label_names, thresholds=None):
    """The report of a run's `config` (its `data.task`): the
    `classification_report` of class ids and probabilities, the
    `multi_label_report` of label indicators and probabilities (with
    `thresholds`, or choosing them for the F1 `train.best_metric` names,
    micro-F1 unless it is macro-F1), or the `regression_report` of targets
    and scores."""
    if config.data.task == "regression":
        return regression_report(labels, outputs, config.model.target_scale, config.train.huber_delta)
    if config.data.task == "multi_label":
        metric = "macro_f1" if config.train.best_metric == "macro_f1" else "micro_f1"
        return multi_label_report(labels, outputs, label_names, thresholds, metric)
    return classification_report(labels, outputs, label_names)


def pearson(x, y):
    """Pearson's correlation of two arrays; 0 where either is constant."""
    x, y = np.asarray(x, "float64"), np.asarray(y, "float64")
    if len(x) < 2:
        return 0.0
    x, y = x - x.mean(), y - y.mean()
    norm = np.sqrt((x**2).sum() * (y**2).sum())
    return float((x * y).sum() / norm) if norm > 0 else 0.0


def ranks(values):
    """Ranks from 1 of `values`, ties given their mean rank (as Spearman's
    correlation takes them)."""
    values = np.asarray(values)
    order = np.argsort(values, kind="stable")
    ranked = np.empty(len(values), "float64")
    ranked[order] = np.arange(1, len(values) + 1)
    _, first, counts = np.unique(values[order], return_index=True, return_counts=True)
    for start, count in zip(first, counts):
        if count > 1:
            ranked[order[start : start + count]] = start + (count + 1) / 2
    return ranked


def one_class_warning(report):
    """A one-line warning where a `classification_report`'s model predicts
    (nearly) one class for every example, else None (a regression's too)."""
    if "confusion_matrix" not in report:
        return None
    confusion = np.asarray(report["confusion_matrix"]["rows_true_columns_predicted"])
    total = int(confusion.sum())
    if not total:
        return None
    predicted_share = confusion.sum(axis=0) / total
    top = int(np.argmax(predicted_share))
    true_share = confusion[top].sum() / total
    if predicted_share[top] < ONE_CLASS_PREDICTED_SHARE or true_share > ONE_CLASS_TRUE_SHARE:
        return None
    name = report["confusion_matrix"]["labels"][top]
    return (
        f"warning: the model predicts {name!r} for {predicted_share[top]:.0%} of the {total} examples, "
        f"{true_share:.0%} of which are {name!r}: it has learned little beyond always answering it "
        f"(macro-F1 {report['macro_f1']:.4f}). Try --class-weight balanced, more epochs or more data."
    )


def log_loss(labels, probabilities):
    """The mean cross-entropy of the true classes' probabilities (clipped
    to 1e-7, as Keras's loss clips them): the classifier's training loss."""
    if not len(labels):
        return 0.0
    true = np.asarray(probabilities, "float64")[np.arange(len(labels)), labels]
    return float(-np.mean(np.log(np.clip(true, 1e-7, 1.0))))


def selection_score(report, metric):
    """`report`'s `metric` (one of its task's `BEST_METRICS`) as a score that
    is higher the better: a loss or an error negated."""
    return report[metric] if _DIRECTIONS[metric] == "max" else -report[metric]


def score_keys(report):
    """The headline scores of a report, by its task: those `scores_line` shows."""
    if "rmse" in report:
        return ("rmse", "pearson", "spearman", "loss")
    if "micro_f1" in report:
        return ("micro_f1", "macro_f1", "loss")
    return ("accuracy", "macro_f1", "loss")


def scores_line(report):
    """`report`'s headline scores on one line."""
    if "rmse" in report:
        return (
            f"RMSE {report['rmse']:.4f}, Pearson {report['pearson']:.4f}, Spearman {report['spearman']:.4f}, "
            f"loss {report['loss']:.4f}"
        )
    if "micro_f1" in report:
        return f"micro-F1 {report['micro_f1']:.4f}, macro-F1 {report['macro_f1']:.4f}, loss {report['loss']:.4f}"
    return f"accuracy {report['accuracy']:.4f}, macro-F1 {report['macro_f1']:.4f}, loss {report['loss']:.4f}"


def format_report(report):
    """A plain-text table of a `classification_report` (a
    `multi_label_report`'s, with each label's threshold); a regression's
    scores on one line."""
    if "rmse" in report:
        return f"{scores_line(report)}, MAE {report['mae']:.4f}, examples {report['examples']}"
    if "micro_f1" in report:
        width = max([len("label")] + [len(name) for name in report["per_label"]])
        lines = [f"{'label':<{width}}  precision  recall     f1  support  threshold"]
        for name, stats in report["per_label"].items():
            lines.append(
                f"{name:<{width}}  {stats['precision']:9.4f}  {stats['recall']:6.4f}"
                f"  {stats['f1']:5.4f}  {stats['support']:7d}  {report['thresholds'][name]:9.4f}"
            )
        lines.append(f"{scores_line(report)}, exact match {report['exact_match']:.4f}, examples {report['examples']}")
        return "\n".join(lines)
    width = max([len("class")] + [len(name) for name in report["per_class"]])
    lines = [f"{'class':<{width}}  precision  recall     f1  support"]
    for name, stats in report["per_class"].items():
        lines.append(
            f"{name:<{width}}  {stats['precision']:9.4f}  {stats['recall']:6.4f}"
            f"  {stats['f1']:5.4f}  {stats['support']:7d}"
        )
    lines.append(
        f"accuracy {report['accuracy']:.4f}   macro-F1 {report['macro_f1']:.4f}"
        f"   loss {report['loss']:.4f}   examples {report['examples']}"
    )
    return "\n".join(lines)


def _divide(numerator, denominator):
    return np.divide(numerator, denominator, out=np.zeros_like(numerator, dtype="float64"), where=denominator > 0)
