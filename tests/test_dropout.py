import keras
import numpy as np
import pytest
import tensorflow as tf

from layers import Dropout
from layers.dropout import dropout

SEED = tf.constant([7, 11], tf.int32)


def _lowbias32(x):
    x = (x ^ (x >> 16)) * np.uint32(0x7FEB352D)
    x = (x ^ (x >> 15)) * np.uint32(0x846CA68B)
    return x ^ (x >> 16)


def _reference_keep(size, seed, rate):
    """The mask, written out in NumPy: what every device must draw."""
    with np.errstate(over="ignore"):  # uint32 arithmetic wraps, as intended
        words = np.asarray(seed, np.int32).view(np.uint32)
        first = _lowbias32(words[0] ^ _lowbias32(words[1] + np.uint32(0x9E3779B9)))
        second = _lowbias32(first + np.uint32(0x85EBCA6B))
        index = np.arange(size, dtype=np.uint32)
        return (_lowbias32(_lowbias32(index + first) ^ second) >> 16) >= round(rate * 65536)


@pytest.mark.parametrize("seed", [[7, 11], [-5, 2**31 - 2]])
def test_mask_is_the_written_out_hash(seed):
    x = tf.fill((37, 29), 2.0)
    y = dropout(x, 0.3, tf.constant(seed, tf.int32)).numpy()
    np.testing.assert_array_equal(y.ravel() != 0, _reference_keep(x.shape.num_elements(), seed, 0.3))


@pytest.mark.parametrize("rate", [0.1, 0.5])
def test_drops_at_the_rate_and_keeps_the_expectation(rate):
    x = tf.fill((1000, 999), 3.0)
    y = dropout(x, rate, SEED).numpy()
    dropped = np.mean(y == 0)
    # 999,000 Bernoulli draws: 5 standard deviations is < 0.003.
    assert dropped == pytest.approx(rate, abs=0.003)
    kept = y[y != 0]  # scaled by the inverse of the keep rate, in steps of 1/65536
    np.testing.assert_allclose(kept, 3.0 / (1.0 - round(rate * 65536) / 65536), rtol=1e-6)
    assert np.mean(y) == pytest.approx(3.0, rel=0.01)


def test_draws_are_independent_of_position():
    # Every other column, and neighbouring elements, drop at the rate and
    # independently of each other.
    y = dropout(tf.ones((4000, 256)), 0.1, SEED).numpy() == 0
    assert y[:, 0::2].mean() == pytest.approx(0.1, abs=0.004)
    assert y[:, 1::2].mean() == pytest.approx(0.1, abs=0.004)
    assert abs(np.corrcoef(y[:, :-1].ravel(), y[:, 1:].ravel())[0, 1]) < 0.01
    assert abs(np.corrcoef(y[:-1].ravel(), y[1:].ravel())[0, 1]) < 0.01


def test_same_seed_same_mask_neighbouring_seeds_unrelated_masks():
    # Keras's seed generator counts the second word up by one per call.
    x = tf.ones((1000, 256))
    first, again = dropout(x, 0.1, SEED).numpy(), dropout(x, 0.1, SEED).numpy()
    np.testing.assert_array_equal(first, again)
    for other_seed in ([7, 12], [8, 11]):
        other = dropout(x, 0.1, tf.constant(other_seed, tf.int32)).numpy()
        assert abs(np.corrcoef((first == 0).ravel(), (other == 0).ravel())[0, 1]) < 0.01


def test_gradient_is_the_same_mask():
    x = tf.random.normal((32, 50))
    with tf.GradientTape() as tape:
        tape.watch(x)
        y = dropout(x, 0.25, SEED)
    gradient = tape.gradient(y, x).numpy()
    np.testing.assert_allclose(gradient, np.where(y.numpy() == 0, 0.0, 1.0 / 0.75), rtol=1e-6)  # 0.25 is exact


def test_float64_inputs_keep_their_precision():
    x = tf.fill((50, 50), tf.constant(1.0 + 2.0**-40, tf.float64))
    y = dropout(x, 0.25, SEED).numpy()  # 0.25: the scale 4/3 is what float64 rounds it to
    assert y.dtype == np.float64
    np.testing.assert_array_equal(y[y != 0], (1.0 + 2.0**-40) * (4.0 / 3.0))


def test_bfloat16_inputs_keep_their_dtype():
    y = dropout(tf.ones((100, 100), tf.bfloat16), 0.1, SEED)
    assert y.dtype == tf.bfloat16
    assert set(np.unique(y.numpy().astype("float32"))) <= {0.0, float(tf.cast(65536 / (65536 - 6554), tf.bfloat16))}


def test_compiles_with_xla():
    # TPUs compile every step with XLA: the hash must lower inside it too.
    x = tf.ones((33, 7))
    eager = dropout(x, 0.1, SEED)
    compiled = tf.function(lambda v: dropout(v, 0.1, SEED), jit_compile=True)(x)
    np.testing.assert_array_equal(compiled.numpy(), eager.numpy())


def test_layer_is_identity_at_inference_and_new_mask_each_call():
    layer = Dropout(0.1, seed=3)
    x = tf.ones((20, 64))
    np.testing.assert_array_equal(layer(x).numpy(), x.numpy())
    first, second = layer(x, training=True).numpy(), layer(x, training=True).numpy()
    assert 0.05 < np.mean(first == 0) < 0.15
    assert np.any((first == 0) != (second == 0))


def test_layer_serializes_as_itself():
    layer = Dropout(0.2, seed=5, name="drop")
    restored = keras.saving.deserialize_keras_object(keras.saving.serialize_keras_object(layer))
    assert type(restored) is Dropout
    assert restored.rate == 0.2 and restored.name == "drop"


def test_rate_one_drops_everything_and_the_function_refuses_it():
    # Keras accepts rate=1; 65536/65536 has no 16-bit threshold, so Keras runs.
    y = Dropout(1.0, seed=2)(tf.ones((4, 8)), training=True).numpy()
    np.testing.assert_array_equal(y, np.zeros((4, 8)))
    with pytest.raises(ValueError, match="round below 1"):
        dropout(tf.ones((4, 8)), 0.999999, SEED)


def test_noise_shape_uses_keras_dropout():
    layer = Dropout(0.5, noise_shape=(None, 1), seed=1)
    y = layer(tf.ones((200, 8)), training=True).numpy()
    assert np.all(y == y[:, :1])  # one draw per row, broadcast along it
