import keras
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


@pytest.mark.parametrize("shared_kernel", [True, False])
def test_flatten_head_is_the_source_design(shared_kernel):
    layer_outputs, mask = _inputs()
    head = ClassificationHead(num_classes=3, shared_kernel=shared_kernel)
    head(layer_outputs, mask=mask)
    if shared_kernel:  # a per-position part, so the kernel is not the same at every position
        head.positional.assign(np.random.default_rng(5).normal(size=(20, 3)))
    probabilities = np.asarray(head(layer_outputs, mask=mask))
    averaged = layer_outputs.mean(axis=1) * mask[:, :, None]  # padding zeroed
    logits = averaged.reshape(2, -1) @ np.asarray(head.flatten_kernel()) + np.asarray(head.logits.bias)
    expected = np.exp(logits) / np.exp(logits).sum(-1, keepdims=True)
    np.testing.assert_allclose(probabilities, expected, atol=1e-5)


def test_shared_kernel_starts_as_mean_pooling_and_holds_any_flatten_kernel():
    layer_outputs, mask = _inputs()
    head = ClassificationHead(num_classes=3)
    probabilities = np.asarray(head(layer_outputs, mask=mask))
    summed = (layer_outputs.mean(axis=1) * mask[:, :, None]).sum(axis=1)  # (batch, hidden)
    logits = summed / 5 @ np.asarray(head.logits.kernel)  # the mean over all 5 positions
    np.testing.assert_allclose(probabilities, np.exp(logits) / np.exp(logits).sum(-1, keepdims=True), atol=1e-6)

    plain = ClassificationHead(num_classes=3, shared_kernel=False)
    plain(layer_outputs, mask=mask)
    kernel = np.random.default_rng(6).normal(size=(20, 3)).astype("float32")
    plain.logits.kernel.assign(kernel)
    head.logits.kernel.assign(np.zeros((4, 3)))
    head.positional.assign(kernel * 5)
    np.testing.assert_allclose(head(layer_outputs, mask=mask), plain(layer_outputs, mask=mask), atol=1e-6)


def _fit_head_on_positions(shared_kernel, positions, test_positions, length=16, hidden=8):
    """Trains the head alone: the class is a vector placed at one position in noise."""
    rng = np.random.default_rng(7)
    signals = rng.normal(size=(2, hidden))

    def examples(count, allowed):
        x = 0.1 * rng.normal(size=(count, 1, length, hidden))
        labels = rng.integers(0, 2, count)
        x[np.arange(count), 0, rng.choice(allowed, count)] += signals[labels]
        return x.astype("float32"), labels

    keras.utils.set_random_seed(8)
    inputs = keras.Input((1, length, hidden))
    model = keras.Model(inputs, ClassificationHead(2, shared_kernel=shared_kernel)(inputs))
    model.compile(keras.optimizers.Adam(1e-2), "sparse_categorical_crossentropy", metrics=["accuracy"])
    model.fit(*examples(256, positions), epochs=20, batch_size=32, verbose=0)
    return model.evaluate(*examples(512, test_positions), verbose=0)[1]


def test_shared_kernel_generalizes_to_positions_unseen_in_training():
    """What the shared kernel is for: a word's weight learnt at one position holds at the others."""
    seen, unseen = np.arange(8), np.arange(8, 16)
    assert _fit_head_on_positions(True, seen, seen) > 0.95
    assert _fit_head_on_positions(False, seen, seen) > 0.95  # both learn the training positions
    assert _fit_head_on_positions(True, seen, unseen) > 0.85  # measured 0.92
    assert _fit_head_on_positions(False, seen, unseen) < 0.65  # a plain kernel knows nothing there (0.49)


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


def test_a_sigmoid_head_starts_at_the_base_rates_its_logit_offsets_give():
    layer_outputs, mask = _inputs()
    rates = np.array([0.02, 0.5, 0.9])
    head = ClassificationHead(3, pooling="mean", activation="sigmoid", logit_offset=np.log(rates / (1 - rates)))
    head(layer_outputs, mask=mask)
    head.logits.kernel.assign(np.zeros((4, 3)))  # the pooled text adds nothing
    np.testing.assert_allclose(head(layer_outputs, mask=mask), np.tile(rates, (2, 1)), rtol=1e-5)
    # Saved with the layer: a copy from its config starts at the same rates.
    copy = ClassificationHead.from_config(head.get_config())
    copy(layer_outputs, mask=mask)
    copy.set_weights(head.get_weights())
    np.testing.assert_allclose(copy(layer_outputs, mask=mask), np.tile(rates, (2, 1)), rtol=1e-5)
    with pytest.raises(ValueError, match="logit_offset must be a float or 3 floats"):
        ClassificationHead(3, activation="sigmoid", logit_offset=[0.0, 1.0])
