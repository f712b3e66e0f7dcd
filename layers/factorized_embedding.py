"""ALBERT's factorized embedding: a V x E lookup, then an E x H projection."""

import keras
from keras import ops


@keras.saving.register_keras_serializable(package="albert_pipeline")
class FactorizedEmbedding(keras.layers.Layer):
    """Token embedding factorized into a small table and a projection.

    A vocabulary of V words embedded directly at hidden size H costs V * H
    parameters; ALBERT looks words up in a V x E table with E much smaller
    than H and projects to H with one E x H matrix, for V * E + E * H (+ H
    with a bias). Id 0 is padding: the layer emits a mask that is False there.

    Args:
        vocabulary_size: int, V, the number of token ids.
        embedding_size: int, E, the width of the lookup table.
        hidden_size: int, H, the width the projection maps to.
        use_bias: bool, whether the projection has a bias.
        initializer_range: float, stddev of the truncated-normal initializer.
        unit_scale: bool, give the outputs about unit variance, as
            tensor2tensor does for embeddings that a unit-amplitude timing
            signal is added to: table and projection drawn with stddev
            `E ** -0.5` and looked-up rows multiplied by `sqrt(E)`
            (`multiply_embedding_mode="sqrt_depth"`). With ALBERT's 0.02 for
            both, the outputs are about `0.02 ** 2 * sqrt(E)` (0.005 at
            E = 128), so the timing signal drowns the words.
        **kwargs: standard `keras.layers.Layer` arguments (`name`, `dtype`).

    Call arguments:
        inputs: int tensor of token ids, shape `(batch, length)`; with
            `reverse=True`, float hidden states `(..., hidden_size)`.
        reverse: bool, map hidden states back to vocabulary logits through
            the same weights, transposed (H x E, then E x V): the tied
            output projection of a masked-language-model head.

    Example:

    >>> layer = FactorizedEmbedding(1000, 16, 512)
    >>> layer(keras.ops.ones((2, 10), "int32")).shape
    (2, 10, 512)
    >>> layer.count_params()  # 1000 * 16 + 16 * 512 + 512
    24704

    References:
        - [Lan et al., 2019](https://arxiv.org/abs/1909.11942), section 3.1
    """

    def __init__(
        self,
        vocabulary_size,
        embedding_size,
        hidden_size,
        use_bias=True,
        initializer_range=0.02,
        unit_scale=False,
        **kwargs,
    ):
        super().__init__(**kwargs)
        self.vocabulary_size = int(vocabulary_size)
        self.embedding_size = int(embedding_size)
        self.hidden_size = int(hidden_size)
        self.use_bias = bool(use_bias)
        self.initializer_range = float(initializer_range)
        self.unit_scale = bool(unit_scale)

    def build(self, input_shape):
        stddev = self.embedding_size**-0.5 if self.unit_scale else self.initializer_range
        initializer = keras.initializers.TruncatedNormal(stddev=stddev)
        self.token_embedding = keras.layers.Embedding(
            self.vocabulary_size,
            self.embedding_size,
            embeddings_initializer=initializer,
            dtype=self.dtype_policy,
            name="token_embedding",
        )
        self.projection = keras.layers.Dense(
            self.hidden_size,
            use_bias=self.use_bias,
            kernel_initializer=initializer,
            dtype=self.dtype_policy,
            name="projection",
        )
        self.token_embedding.build(input_shape)
        self.projection.build(tuple(input_shape) + (self.embedding_size,))

    def call(self, inputs, reverse=False):
        if reverse:
            kernel = ops.cast(self.projection.kernel, self.compute_dtype)  # (E, H)
            table = ops.cast(self.token_embedding.embeddings, self.compute_dtype)  # (V, E)
            reduced = ops.matmul(inputs, ops.transpose(kernel))  # (..., E)
            return ops.matmul(reduced, ops.transpose(table))  # (..., V)
        embedded = self.token_embedding(inputs)  # (batch, length, E)
        if self.unit_scale:
            embedded = embedded * ops.cast(self.embedding_size**0.5, embedded.dtype)
        return self.projection(embedded)  # (batch, length, H)

    def compute_mask(self, inputs, mask=None):
        if "int" not in keras.backend.standardize_dtype(inputs.dtype):
            return None  # reverse mode: hidden states carry no padding mask
        return ops.not_equal(inputs, 0)

    def compute_output_spec(self, inputs, reverse=False):
        if reverse:
            shape = tuple(inputs.shape[:-1]) + (self.vocabulary_size,)
        else:
            shape = tuple(inputs.shape) + (self.hidden_size,)
        return keras.KerasTensor(shape, dtype=self.compute_dtype)

    def get_config(self):
        config = super().get_config()
        config.update(
            {
                "vocabulary_size": self.vocabulary_size,
                "embedding_size": self.embedding_size,
                "hidden_size": self.hidden_size,
                "use_bias": self.use_bias,
                "initializer_range": self.initializer_range,
                "unit_scale": self.unit_scale,
            }
        )
        return config
