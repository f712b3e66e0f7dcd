import numpy as np
import pytest
import tensorflow as tf

from layers.fused_gradients import gelu


def _value_and_gradient(function, x):
    x = tf.constant(x)
    with tf.GradientTape() as tape:
        tape.watch(x)
        y = function(x)
        loss = tf.reduce_sum(tf.cos(2.0 * y))
    return y.numpy(), tape.gradient(loss, x).numpy()


def test_gelu_equals_exact_gelu_and_its_gradient():
    x = np.linspace(-6.0, 6.0, 241, dtype="float32")
    ours = _value_and_gradient(gelu, x)
    reference = _value_and_gradient(lambda v: tf.nn.gelu(v, approximate=False), x)
    np.testing.assert_allclose(ours[0], reference[0], rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(ours[1], reference[1], rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("x, derivative", [(0.0, 0.5), (1.0, 1.0833155), (-1.0, -0.0833155)])
def test_gelu_derivative_golden_values(x, derivative):
    # d/dx x * Phi(x) = Phi(x) + x * phi(x), computed independently.
    x = tf.constant(x)
    with tf.GradientTape() as tape:
        tape.watch(x)
        y = gelu(x)
    assert float(tape.gradient(y, x)) == pytest.approx(derivative, abs=1e-6)
