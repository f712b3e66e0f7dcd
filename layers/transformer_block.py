"""One Transformer encoder block: self-attention and feed-forward sub-layers."""

import keras

from layers import fast_block, fast_path
from layers.dropout import Dropout
from layers.layer_normalization import LayerNormalization


@keras.saving.register_keras_serializable(package="albert_pipeline")
class TransformerBlock(keras.layers.Layer):
    """Bidirectional self-attention and a position-wise feed-forward network.

    Each sub-layer is wrapped in a residual connection and layer
    normalization: after the sub-layer by default (post-norm, as in BERT and
    ALBERT), or before it with `norm_first=True` (pre-norm, steadier for deep
    stacks). Attention is not causal: every position sees both sides.

    Args:
        num_heads: int, number of attention heads; the head size is
            `hidden_size // num_heads`.
        intermediate_size: int, width of the feed-forward hidden layer.
        dropout_rate: float, dropout after each sub-layer.
        attention_dropout_rate: float, dropout on the attention weights.
        activation: activation of the feed-forward hidden layer.
        norm_first: bool, pre-norm instead of post-norm.
        layer_norm_epsilon: float, epsilon of the layer normalizations.
        initializer_range: float, stddev of the truncated-normal initializer.
        **kwargs: standard `keras.layers.Layer` arguments (`name`, `dtype`).

    Call arguments:
        inputs: float tensor of shape `(batch, length, hidden_size)`.
        attention_mask: optional bool tensor `(batch, length, length)`, True
            where a query may attend to a key, or `(batch, 1, length)` for
            the same keys at every query.
        training: bool, whether dropout is active.
        return_attention_scores: bool, also return the attention weights
            `(batch, num_heads, length, length)`.

    Example:

    >>> block = TransformerBlock(num_heads=2, intermediate_size=32)
    >>> block(keras.ops.zeros((2, 5, 8))).shape
    (2, 5, 8)

    References:
        - [Vaswani et al., 2017](https://arxiv.org/abs/1706.03762)
    """

    def __init__(
        self,
        num_heads,
        intermediate_size,
        dropout_rate=0.0,
        attention_dropout_rate=0.0,
        activation="gelu",
        norm_first=False,
        layer_norm_epsilon=1e-12,
        initializer_range=0.02,
        **kwargs,
    ):
        super().__init__(**kwargs)
        self.num_heads = int(num_heads)
        self.intermediate_size = int(intermediate_size)
        self.dropout_rate = float(dropout_rate)
        self.attention_dropout_rate = float(attention_dropout_rate)
        self.activation = keras.activations.get(activation)
        self.norm_first = bool(norm_first)
        self.layer_norm_epsilon = float(layer_norm_epsilon)
        self.initializer_range = float(initializer_range)
        self.supports_masking = True

    def build(self, input_shape):
        hidden_size = input_shape[-1]
        if hidden_size % self.num_heads:
            raise ValueError(f"hidden size {hidden_size} is not divisible by num_heads={self.num_heads}")
        initializer = keras.initializers.TruncatedNormal(stddev=self.initializer_range)
        self.attention = keras.layers.MultiHeadAttention(
            num_heads=self.num_heads,
            key_dim=hidden_size // self.num_heads,
            dropout=self.attention_dropout_rate,
            kernel_initializer=initializer,
            dtype=self.dtype_policy,
            name="attention",
        )
        self.attention.build(input_shape, input_shape)
        self.attention_norm = self._layer_norm("attention_norm", input_shape)
        self.intermediate = keras.layers.Dense(
            self.intermediate_size,
            activation=None,  # applied in `call`, which knows `training`
            kernel_initializer=initializer,
            dtype=self.dtype_policy,
            name="intermediate",
        )
        self.intermediate.build(input_shape)
        self.output_dense = keras.layers.Dense(
            hidden_size,
            kernel_initializer=initializer,
            dtype=self.dtype_policy,
            name="output",
        )
        self.output_dense.build(tuple(input_shape[:-1]) + (self.intermediate_size,))
        self.output_norm = self._layer_norm("output_norm", input_shape)
        self.dropout = Dropout(self.dropout_rate, dtype=self.dtype_policy)

    def _layer_norm(self, name, input_shape):
        # Computed in float32 under mixed precision, as Keras's layer is.
        layer = LayerNormalization(epsilon=self.layer_norm_epsilon, dtype=self.dtype_policy, name=name)
        layer.build(input_shape)
        return layer

    def call(
        self,
        inputs,
        attention_mask=None,
        training=None,
        return_attention_scores=False,
    ):
        if fast_path.enabled():  # the same values, faster on CPUs (layers/fast_block.py)
            return fast_block.call(self, inputs, attention_mask, training, return_attention_scores)
        x = self.attention_norm(inputs) if self.norm_first else inputs
        attended = self.attention(  # (batch, length, hidden)
            x,
            x,
            attention_mask=attention_mask,
            training=training,
            return_attention_scores=return_attention_scores,
        )
        if return_attention_scores:
            attended, scores = attended  # scores: (batch, heads, length, length)
        x = self._add(inputs, attended, self.attention_norm, training)
        y = self.output_norm(x) if self.norm_first else x
        y = self.output_dense(self.activation(self.intermediate(y)))  # (batch, length, hidden)
        outputs = self._add(x, y, self.output_norm, training)
        if return_attention_scores:
            return outputs, scores
        return outputs

    def _add(self, residual, y, norm, training):
        """`residual + dropout(y)`, then `norm` after it in post-norm blocks."""
        if self.norm_first:
            return residual + self.dropout(y, training=training)
        return norm(residual + self.dropout(y, training=training))

    def compute_output_shape(self, input_shape):
        return input_shape

    def get_config(self):
        config = super().get_config()
        config.update(
            {
                "num_heads": self.num_heads,
                "intermediate_size": self.intermediate_size,
                "dropout_rate": self.dropout_rate,
                "attention_dropout_rate": self.attention_dropout_rate,
                "activation": keras.activations.serialize(self.activation),
                "norm_first": self.norm_first,
                "layer_norm_epsilon": self.layer_norm_epsilon,
                "initializer_range": self.initializer_range,
            }
        )
        return config
