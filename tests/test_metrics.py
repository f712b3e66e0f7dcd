import keras
import numpy as np
import pytest

from pipeline.config import Config, override
from pipeline.labels import class_weights
from pipeline.metrics import (
    classification_report,
    format_report,
    multi_label_report,
    one_class_warning,
    ranks,
    regression_report,
    selection_score,
)


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
    with pytest.raises(
        ValueError,
        match="train.best_metric must be one of loss, accuracy, macro_f1 for data.task classification, got 'f1'",
    ):
        override(Config(), {"train": {"best_metric": "f1"}})


def test_a_regression_is_scored_by_rmse_and_pearson_and_spearman_correlations():
    targets = [1.0, 2.0, 3.0, 4.0, 5.0]
    scores = [1.5, 1.5, 3.5, 3.0, 6.0]  # a tie, and one pair out of order
    report = regression_report(targets, scores, scale=2.0)
    # errors 0.5, -0.5, 0.5, -1, 1: squares sum to 2.75
    assert report["rmse"] == pytest.approx(np.sqrt(2.75 / 5))
    assert report["mae"] == pytest.approx(3.5 / 5)
    assert report["loss"] == pytest.approx(2.75 / 5 / 4)  # standardized by the scale, as the training loss
    assert report["pearson"] == pytest.approx(np.corrcoef(targets, scores)[0, 1])
    # ranks of the scores, the tie at its mean: 1.5 1.5 4 3 5
    assert report["spearman"] == pytest.approx(np.corrcoef([1, 2, 3, 4, 5], [1.5, 1.5, 4, 3, 5])[0, 1])
    assert ranks([3, 1, 3, 2]).tolist() == [3.5, 1.0, 3.5, 2.0]
    assert format_report(report) == (
        f"RMSE {np.sqrt(0.55):.4f}, Pearson {report['pearson']:.4f}, Spearman {report['spearman']:.4f}, "
        "loss 0.1375, MAE 0.7000, examples 5"
    )
    # The Huber loss of the standardized errors 0.25, 0.25, 0.25, 0.5, 0.5 at delta 0.3: three halved squares,
    # two linear parts.
    huber = regression_report(targets, scores, scale=2.0, huber_delta=0.3)
    assert huber["loss"] == pytest.approx((3 * 0.5 * 0.25**2 + 2 * 0.3 * (0.5 - 0.15)) / 5)
    keras_huber = keras.losses.Huber(delta=0.3)(np.array(targets) / 2, np.array(scores) / 2)
    assert huber["loss"] == pytest.approx(float(keras_huber), rel=1e-6)
    assert {key: value for key, value in huber.items() if key != "loss"} == {
        key: value for key, value in report.items() if key != "loss"
    }
    constant = regression_report(targets, [3.0] * 5)
    assert constant["pearson"] == constant["spearman"] == 0.0
    assert one_class_warning(report) is None
    # An error is better low, a correlation high.
    assert selection_score(report, "rmse") > selection_score(constant, "rmse")
    assert selection_score(report, "spearman") > selection_score(constant, "spearman")


def test_a_multi_label_report_for_macro_f1_chooses_each_labels_f1_best_threshold_or_applies_the_given_ones():
    truth = np.array([[1, 0], [1, 1], [0, 0], [0, 1], [1, 0]])
    probabilities = np.array([[0.9, 0.2], [0.6, 0.7], [0.6, 0.1], [0.3, 0.4], [0.2, 0.35]])
    report = multi_label_report(truth, probabilities, ["a", "b"], metric="macro_f1")
    # a: cutting after 0.9, the tied 0.6s, 0.3 or 0.2 gives F1 2/4, 4/6, 4/7, 6/8: all of them, below 0.2.
    # b: after 0.7 and 0.4 (2 of 2) is exact; midway to the next, 0.35.
    assert report["thresholds"] == {"a": pytest.approx(0.1), "b": pytest.approx(0.375)}
    assert report["per_label"]["a"] == {"precision": 0.6, "recall": 1.0, "f1": pytest.approx(0.75), "support": 3}
    assert report["per_label"]["b"]["f1"] == 1.0
    assert report["micro_f1"] == pytest.approx(2 * 5 / (7 + 5)) and report["macro_f1"] == pytest.approx(0.875)
    assert report["exact_match"] == 0.6  # a is predicted for every row: rows 3 and 4 get it wrongly
    keras_loss = keras.ops.mean(keras.losses.binary_crossentropy(truth.astype("float32"), probabilities))
    assert report["loss"] == pytest.approx(float(keras_loss), rel=1e-5)
    # Given thresholds are applied, not chosen: at 0.5, a's 0.2 and b's 0.4 are missed.
    given = multi_label_report(truth, probabilities, ["a", "b"], thresholds=[0.5, 0.5])
    assert given["thresholds"] == {"a": 0.5, "b": 0.5}
    assert given["micro_f1"] == pytest.approx(2 * 3 / (4 + 5))
    assert format_report(report).splitlines()[1].split() == ["a", "0.6000", "1.0000", "0.7500", "3", "0.1000"]
    assert selection_score(report, "micro_f1") > selection_score(given, "micro_f1")


def test_thresholds_for_micro_f1_leave_out_a_label_whose_own_best_f1_tags_every_text():
    truth = np.array([[1, 0], [1, 0], [1, 0], [0, 0], [0, 0], [0, 1]], bool)
    # a is learned; b is not: its one positive has its lowest probability.
    probabilities = np.array([[0.9, 0.3], [0.8, 0.31], [0.7, 0.32], [0.2, 0.33], [0.1, 0.34], [0.15, 0.29]])
    # b's own F1 is best tagging every text (2 / 7 against 0), which macro-F1 takes.
    macro = multi_label_report(truth, probabilities, ["a", "b"], metric="macro_f1")
    assert macro["thresholds"] == {"a": pytest.approx(0.45), "b": pytest.approx(0.145)}
    assert macro["micro_f1"] == pytest.approx(2 * 4 / (9 + 4)) and macro["macro_f1"] == pytest.approx((1 + 2 / 7) / 2)
    # Micro-F1: one threshold for both (0.52, midway from 0.7 to 0.34), then a moves to its best and b to
    # none (midway from its highest, 0.34, to 1): 6/7 against 8/13.
    micro = multi_label_report(truth, probabilities, ["a", "b"])
    assert micro["thresholds"] == {"a": pytest.approx(0.45), "b": pytest.approx(0.67)}
    assert micro["micro_f1"] == pytest.approx(2 * 3 / (3 + 4)) and micro["macro_f1"] == pytest.approx(0.5)
    with pytest.raises(ValueError, match="micro_f1 or macro_f1, not 'loss'"):
        multi_label_report(truth, probabilities, ["a", "b"], metric="loss")


def test_a_regressions_best_metric_and_class_weight_are_checked_against_its_task():
    assert override(Config(), {"data": {"task": "regression"}, "train": {"best_metric": "pearson"}})
    with pytest.raises(
        ValueError, match="one of loss, rmse, pearson, spearman for data.task regression, got 'accuracy'"
    ):
        override(Config(), {"data": {"task": "regression"}, "train": {"best_metric": "accuracy"}})
    with pytest.raises(ValueError, match="train.huber_delta is a regression's loss; data.task classification"):
        override(Config(), {"train": {"huber_delta": 1.0}})
    with pytest.raises(ValueError, match="train.huber_delta must be 0 .* got -1.0"):
        override(Config(), {"data": {"task": "regression"}, "train": {"huber_delta": -1.0}})
    with pytest.raises(ValueError, match="train.class_weight 'balanced' weighs one class .* data.task regression has"):
        override(Config(), {"data": {"task": "regression"}, "train": {"class_weight": "balanced"}})
    with pytest.raises(
        ValueError, match="data.task must be one of classification, multi_label, regression, got 'ranking'"
    ):
        override(Config(), {"data": {"task": "ranking"}})


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
