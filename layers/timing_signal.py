"""Sinusoidal position signal of tensor2tensor's `get_timing_signal_1d`."""

import math

import keras
from keras import ops


def get_timing_signal_1d(length, channels, min_timescale=1.0, max_timescale=1.0e4, start_index=0):
    """Returns the `[length, channels]` float32 timing signal of tensor2tensor.

    For `n = channels // 2` timescales spaced geometrically between
    `min_timescale` and `max_timescale`, the signal at position `p` is
    `concat(sin(p * inv_timescales), cos(p * inv_timescales))`: all sines
    first, then all cosines, plus one zero column when `channels` is odd.

    Args:
        length: number of positions; may be a symbolic scalar.
        channels: size of the channel axis (a Python int).
        min_timescale: smallest timescale.
        max_timescale: largest timescale.
        start_index: position of the first row.
    """
    num_timescales = channels // 2
    # The max(n - 1, 1) guard keeps channels 2 and 3 (one timescale) finite.
    log_timescale_increment = math.log(float(max_timescale) / float(min_timescale)) / max(num_timescales - 1, 1)
    inv_timescales = min_timescale * ops.exp(ops.arange(num_timescales, dtype="float32") * -log_timescale_increment)
    position = ops.cast(ops.arange(length), "float32") + float(start_index)
    scaled_time = position[:, None] * inv_timescales[None, :]  # (length, n)
    signal = ops.concatenate([ops.sin(scaled_time), ops.cos(scaled_time)], axis=1)
    if channels % 2:
        signal = ops.pad(signal, [[0, 0], [0, 1]])
    return signal  # (length, channels)


@keras.saving.register_keras_serializable(package="albert_pipeline")
class TimingSignal1D(keras.layers.Layer):
    """Adds tensor2tensor's sinusoidal timing signal to a sequence.

    The signal has no weights and is computed from the length seen at call
    time, so a model trained on short sequences accepts longer ones. It is
    computed in float32 and cast to the layer's compute dtype, so a
    `mixed_bfloat16` model gets the same positions as a float32 one.

    Args:
        min_timescale: float, the smallest timescale of the sinusoids.
        max_timescale: float, the largest timescale of the sinusoids.
        start_index: int, the position of the first element of the sequence.
        **kwargs: standard `keras.layers.Layer` arguments (`name`, `dtype`).

    Call arguments:
        inputs: float tensor of shape `(batch, length, channels)`.

    Example:

    >>> layer = TimingSignal1D()
    >>> layer(keras.ops.zeros((2, 10, 16))).shape
    (2, 10, 16)

    References:
        - [Vaswani et al., 2017](https://arxiv.org/abs/1706.03762)
        - tensor2tensor `layers/common_attention.py`, `get_timing_signal_1d`
    """

    def __init__(self, min_timescale=1.0, max_timescale=1.0e4, start_index=0, **kwargs):
        super().__init__(**kwargs)
        self.min_timescale = float(min_timescale)
        self.max_timescale = float(max_timescale)
        self.start_index = int(start_index)
        self.supports_masking = True

    def call(self, inputs):
        signal = get_timing_signal_1d(  # (length, channels)
            ops.shape(inputs)[1],
            inputs.shape[-1],
            self.min_timescale,
            self.max_timescale,
            self.start_index,
        )
        return inputs + ops.cast(signal, self.compute_dtype)[None, :, :]

    def compute_output_shape(self, input_shape):
        return input_shape

    def get_config(self):
        config = super().get_config()
        config.update(
            {
                "min_timescale": self.min_timescale,
                "max_timescale": self.max_timescale,
                "start_index": self.start_index,
            }
        )
        return config
