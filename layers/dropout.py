"""Dropout with its keep mask hashed from the element index, in one pass.

Keras's dropout (`tf.nn.experimental.stateless_dropout`) draws one Philox
random float per element, converts it, compares it and multiplies twice:
five passes over the activations forward, and the mask kept for the
backward pass. Here each element's draw is an integer hash of its index
and the seed, computed where it is used: one XLA-compiled pass that hashes,
compares and scales forward, and the same pass again on the gradient, with
no mask held in between. The hash is two rounds of `lowbias32` (Chris
Wellons' hash prospector; a few multiplies, shifts and xors per element);
its top 16 bits are compared with a 16-bit threshold, so the rate is rounded
to a multiple of 1/65536 and the kept values are scaled by the inverse of
that rounded keep probability: the expected output still equals the input
exactly. The scaling of 16-bit floats computes in float32 (XLA's CPU code
for bfloat16 arithmetic is slow). Measured side by side on the README's
Zen 5 machine, forward and backward of a (32, 128, 256) activation (one of
the nine dropouts of a default training step): float32 1.4-1.6 -> 0.4 ms,
bfloat16 1.4-1.7 -> 0.5 ms, against 16-bit draws from
`tf.random.stateless_uniform` (which had taken it from Keras's 6.7 and 7.5
ms on the first machine).
"""

import keras
import tensorflow as tf

from layers import fast_path

_LEVELS = 1 << 16


def dropout(x, rate, seed):
    """`x` with each element zeroed with probability `rate`, the rest scaled up.

    Args:
        x: float tensor.
        rate: float in [0, 1), the drop probability (rounded to a multiple
            of 1/65536).
        seed: int32 tensor `(2,)`, the stateless random seed: the same seed
            and shape give the same mask, on every device.
    """
    threshold = drop_threshold(rate)
    if threshold == 0:
        return x
    seed = tf.convert_to_tensor(seed, tf.int32)

    @tf.custom_gradient
    def masked(x):
        # The backward pass hashes the same mask again rather than keeping it.
        return _masked(x, seed, threshold), lambda upstream: _masked(upstream, seed, threshold)

    return masked(x)


def drop_threshold(rate):
    """`rate` in 65536ths: an element drops where its 16-bit draw is below it."""
    threshold = round(rate * _LEVELS)
    if threshold >= _LEVELS:
        raise ValueError(f"dropout rate must round below 1 in steps of 1/{_LEVELS}, got {rate}")
    return threshold


def keep_scale(x, seed, threshold, dtype=tf.float32):
    """`dtype`, `x`'s shape: 0 where an element drops, `65536 / (65536 -
    threshold)` where it stays; for use inside compiled functions, where
    the hash fuses with what multiplies by it."""
    # Keys from both seed words, mixed so that neighbouring seeds (Keras's
    # seed generator counts up by one) give unrelated masks.
    words = tf.bitcast(seed, tf.uint32)
    first_key = _lowbias32(tf.bitwise.bitwise_xor(words[0], _lowbias32(words[1] + 0x9E3779B9)))
    second_key = _lowbias32(first_key + 0x85EBCA6B)
    index = tf.bitcast(tf.range(tf.size(x), dtype=tf.int32), tf.uint32)
    draws = tf.bitwise.right_shift(_lowbias32(tf.bitwise.bitwise_xor(_lowbias32(index + first_key), second_key)), 16)
    keep = tf.reshape(draws >= threshold, tf.shape(x))
    return tf.where(keep, tf.constant(_LEVELS / (_LEVELS - threshold), dtype), tf.zeros([], dtype))


@tf.function(jit_compile=True, reduce_retracing=True)  # XLA compiles per shape
def _masked(x, seed, threshold):
    dtype = tf.float64 if x.dtype == tf.float64 else tf.float32  # 16-bit floats: in float32
    return tf.cast(tf.cast(x, dtype) * keep_scale(x, seed, threshold, dtype), x.dtype)


def _lowbias32(x):
    """A 32-bit integer hash with low bias (uint32 in, uint32 out)."""
    x = tf.bitwise.bitwise_xor(x, tf.bitwise.right_shift(x, 16)) * tf.constant(0x7FEB352D, tf.uint32)
    x = tf.bitwise.bitwise_xor(x, tf.bitwise.right_shift(x, 15)) * tf.constant(0x846CA68B, tf.uint32)
    return tf.bitwise.bitwise_xor(x, tf.bitwise.right_shift(x, 16))


@keras.saving.register_keras_serializable(package="albert_pipeline")
class Dropout(keras.layers.Dropout):
    """`keras.layers.Dropout` drawing its mask with `dropout` above.

    Same arguments, config and (absence of) weights as Keras's layer; with a
    `noise_shape`, or a rate that rounds to 1 (everything dropped), Keras's
    own implementation runs.
    """

    @property
    def hashed(self):
        """Whether training calls `dropout` above (else Keras's dropout, as
        with `layers.fast_path` off)."""
        return fast_path.enabled() and self.noise_shape is None and round(self.rate * _LEVELS) < _LEVELS

    def call(self, inputs, training=False):
        if not training or self.rate == 0 or not self.hashed:
            return super().call(inputs, training=training)
        return dropout(inputs, self.rate, self.next_seed())

    def next_seed(self):
        """The int32 `(2,)` seed of the next mask; advances the layer's
        seed generator, whose state checkpoints hold."""
        # Keras keeps seed state in int64; the hash takes int32 words.
        return tf.cast(tf.math.floormod(self.seed_generator.next(), tf.int32.max - 1), tf.int32)
