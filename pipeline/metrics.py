"""Classification metrics of an evaluation, as written to `metrics.json`."""

import numpy as np

# The validation scores `train.best_metric` may keep an epoch on (and a
# sweep rank its trials by), each with the direction that is better.
BEST_METRICS = {"loss": "min", "accuracy": "max", "macro_f1": "max"}
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


def one_class_warning(report):
    """A one-line warning where a `classification_report`'s model predicts
    (nearly) one class for every example, else None."""
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
    """`report`'s `metric` (one of `BEST_METRICS`) as a score that is higher
    the better: the loss negated."""
    return report[metric] if BEST_METRICS[metric] == "max" else -report[metric]


def scores_line(report):
    """`report`'s accuracy, macro-F1 and loss on one line."""
    return f"accuracy {report['accuracy']:.4f}, macro-F1 {report['macro_f1']:.4f}, loss {report['loss']:.4f}"


def format_report(report):
    """A plain-text table of a `classification_report`."""
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
