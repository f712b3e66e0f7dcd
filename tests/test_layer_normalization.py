import keras
import numpy as np
import tensorflow as tf

from layer_test_helper import run_layer_test
from layers.layer_normalization import LayerNormalization


def _inputs():
    return np.random.default_rng(3).normal(2.0, 3.0, size=(4, 6, 16)).astype("float32")


def test_layer_contract():
    run_layer_test(LayerNormalization, {"epsilon": 1e-12}, {"inputs": _inputs()}, (4, 6, 16))


def _values_and_gradients(layer, x):
    layer.build(x.shape)
    rng = np.random.default_rng(4)
    layer.gamma.assign(rng.normal(1.0, 0.3, size=16).astype("float32"))
    layer.beta.assign(rng.normal(0.0, 0.3, size=16).astype("float32"))
    x = tf.constant(x)
    with tf.GradientTape() as tape:
        tape.watch(x)
        y = layer(x)
        loss = tf.reduce_sum(tf.sin(3.0 * y))  # a non-trivial upstream gradient
    return [y.numpy()] + [g.numpy() for g in tape.gradient(loss, [x, layer.gamma, layer.beta])]


def test_values_and_gradients_equal_keras():
    x = _inputs()
    ours = _values_and_gradients(LayerNormalization(epsilon=1e-12), x)
    theirs = _values_and_gradients(keras.layers.LayerNormalization(epsilon=1e-12), x)
    for mine, reference, name in zip(ours, theirs, ["output", "d_inputs", "d_gamma", "d_beta"]):
        np.testing.assert_allclose(mine, reference, rtol=1e-4, atol=1e-5, err_msg=name)


def test_other_axes_fall_back_to_keras():
    x = _inputs()
    ours = _values_and_gradients(LayerNormalization(axis=1), x.transpose(0, 2, 1))
    theirs = _values_and_gradients(keras.layers.LayerNormalization(axis=1), x.transpose(0, 2, 1))
    np.testing.assert_allclose(ours[0], theirs[0], rtol=1e-6, atol=1e-6)


def test_mixed_precision_computes_in_float32():
    x = _inputs() * 100.0  # bfloat16 statistics would be off by far more
    layer = LayerNormalization(dtype="mixed_bfloat16")
    y = layer(x.astype("float32"))
    assert y.dtype == "bfloat16"
    expected = (x - x.mean(-1, keepdims=True)) / x.std(-1, keepdims=True)
    np.testing.assert_allclose(np.asarray(y, "float32"), expected, atol=0.02)
