import numpy as np
import pytest
from layer_test_helper import run_layer_test

from layers import ClassificationHead


def _inputs():
    rng = np.random.default_rng(4)
    layer_outputs = rng.normal(size=(2, 3, 5, 4)).astype("float32")
    mask = np.array([[1, 1, 1, 0, 0], [1, 0, 0, 0, 0]], bool)
    return layer_outputs, mask


@pytest.mark.parametrize("pooling", ["flatten", "mean", "first"])
def test_layer_contract(pooling):
    layer_outputs, mask = _inputs()
    kwargs = {"num_classes": 3, "pooling": pooling}
    run_layer_test(ClassificationHead, kwargs, {"inputs": layer_outputs, "mask": mask}, (2, 3))


def test_flatten_head_is_the_source_design():
    layer_outputs, mask = _inputs()
    head = ClassificationHead(num_classes=3)
    probabilities = np.asarray(head(layer_outputs, mask=mask))
    averaged = layer_outputs.mean(axis=1) * mask[:, :, None]  # padding zeroed
    logits = averaged.reshape(2, -1) @ np.asarray(head.logits.kernel) + np.asarray(head.logits.bias)
    expected = np.exp(logits) / np.exp(logits).sum(-1, keepdims=True)
    np.testing.assert_allclose(probabilities, expected, atol=1e-5)


def test_mean_pooling_ignores_padding_and_length():
    layer_outputs, mask = _inputs()
    head = ClassificationHead(num_classes=3, pooling="mean")
    reference = np.asarray(head(layer_outputs, mask=mask))
    longer = np.concatenate([layer_outputs, np.ones((2, 3, 4, 4), "float32")], axis=2)
    longer_mask = np.concatenate([mask, np.zeros((2, 4), bool)], axis=1)
    np.testing.assert_allclose(head(longer, mask=longer_mask), reference, atol=1e-6)


def test_probabilities_are_float32_under_mixed_precision():
    layer_outputs, mask = _inputs()
    probabilities = ClassificationHead(3, dtype="mixed_bfloat16")(layer_outputs, mask=mask)
    assert probabilities.dtype == "float32"
    np.testing.assert_allclose(np.asarray(probabilities).sum(-1), 1.0, atol=1e-6)


def test_unknown_pooling_is_rejected():
    with pytest.raises(ValueError, match="pooling"):
        ClassificationHead(2, pooling="max")
