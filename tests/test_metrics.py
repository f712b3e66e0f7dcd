import keras
import numpy as np
import pytest

from pipeline.config import Config, override
from pipeline.labels import class_weights
from pipeline.metrics import classification_report, format_report, one_class_warning, selection_score


def test_the_report_of_probabilities_scores_their_most_probable_classes_and_their_loss():
    labels = [0, 2, 1, 1]
    probabilities = np.array([[0.7, 0.2, 0.1], [0.1, 0.6, 0.3], [0.2, 0.5, 0.3], [0.0, 0.0, 1.0]], "float32")
    report = classification_report(labels, probabilities, ["a", "b", "c"])
    assert report["accuracy"] == 0.5
    assert report["confusion_matrix"]["rows_true_columns_predicted"] == [[1, 0, 0], [0, 1, 1], [0, 1, 0]]
    # -(ln 0.7 + ln 0.3 + ln 0.5 + ln 1e-7) / 4: a certain mistake costs what Keras's loss charges it.
    assert report["loss"] == pytest.approx(4.5930, abs=1e-4)
    keras_loss = keras.ops.mean(keras.losses.sparse_categorical_crossentropy(np.array(labels), probabilities))
    assert report["loss"] == pytest.approx(float(keras_loss), rel=1e-5)
    assert "loss 4.5930" in format_report(report)


def test_the_kept_epoch_has_the_lowest_loss_or_the_highest_accuracy_or_macro_f1():
    low, high = {"loss": 0.5, "accuracy": 0.7, "macro_f1": 0.6}, {"loss": 0.6, "accuracy": 0.8, "macro_f1": 0.5}
    assert selection_score(low, "loss") > selection_score(high, "loss")
    assert selection_score(high, "accuracy") > selection_score(low, "accuracy")
    assert selection_score(low, "macro_f1") > selection_score(high, "macro_f1")
    with pytest.raises(ValueError, match="train.best_metric must be one of loss, accuracy, macro_f1, got 'f1'"):
        override(Config(), {"train": {"best_metric": "f1"}})


def _report(labels, predictions, names=("negative", "neutral", "positive")):
    return classification_report(labels, np.eye(len(names))[predictions], list(names))


def test_a_model_answering_one_class_for_nearly_everything_is_warned_of():
    # 65% of the labels are "positive"; the model answers it 97 times in 100.
    labels = [2] * 65 + [0] * 25 + [1] * 10
    collapsed = _report(labels, [2] * 97 + [0] * 3)
    assert one_class_warning(collapsed) == (
        "warning: the model predicts 'positive' for 97% of the 100 examples, 65% of which are 'positive': it has "
        f"learned little beyond always answering it (macro-F1 {collapsed['macro_f1']:.4f}). Try --class-weight "
        "balanced, more epochs or more data."
    )
    assert one_class_warning(_report(labels, [2] * 94 + [0] * 6)) is None  # 94%: it answers others too
    assert one_class_warning(_report([2] * 96 + [0] * 4, [2] * 100)) is None  # the labels are that skewed


def test_class_weights_balance_the_classes_or_follow_the_names_given():
    labels = np.array([0] * 6 + [1] * 3 + [2] * 1)
    names = ["negative", "neutral", "positive"]
    # examples / (classes x the class's examples): 10 / 18, 10 / 9, 10 / 3.
    np.testing.assert_allclose(class_weights("balanced", labels, names), [10 / 18, 10 / 9, 10 / 3], rtol=1e-6)
    np.testing.assert_allclose(class_weights("positive:4,neutral:0.5", labels, names), [1.0, 0.5, 4.0])
    assert class_weights("none", labels, names) is None
    with pytest.raises(
        ValueError,
        match=r"names class 'postive', which the training data does not have; its "
        r"classes: \['negative', 'neutral', 'positive'\]",
    ):
        class_weights("postive:4", labels, names)
    for spec, part in (("positive=4", "positive=4"), ("positive:-1", "positive:-1"), ("a:1,:2", ":2")):
        with pytest.raises(ValueError, match=f"train.class_weight '{spec}': '{part}' is not NAME:WEIGHT"):
            override(Config(), {"train": {"class_weight": spec}})  # refused when the config is read
