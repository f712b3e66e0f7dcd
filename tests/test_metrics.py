import keras
import numpy as np
import pytest

from pipeline.config import Config, override
from pipeline.metrics import classification_report, format_report, selection_score


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
    assert Config().train.best_metric == "loss"
    with pytest.raises(ValueError, match="train.best_metric must be one of loss, accuracy, macro_f1, got 'f1'"):
        override(Config(), {"train": {"best_metric": "f1"}})
