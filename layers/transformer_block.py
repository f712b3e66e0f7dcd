"""One Transformer encoder block: self-attention and feed-forward sub-layers."""

import keras
from keras import ops

from layers import fast_path, fused_gradients
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
        if not fast_path.enabled():
            return self._call_plain(inputs, attention_mask, training, return_attention_scores)
        # A compiled sub-layer end (`_add`) adds the sub-layer's last bias too.
        fused_end = self._ends_compiled(training)
        x = self.attention_norm(inputs) if self.norm_first else inputs
        if self.attention_dropout_rate:  # Keras's explicit path drops weights
            attended = self.attention(  # (batch, length, hidden)
                x,
                x,
                attention_mask=attention_mask,
                training=training,
                return_attention_scores=return_attention_scores,
            )
            attention_bias = None
        else:
            attended = self._attend(x, attention_mask, return_attention_scores, output_bias=not fused_end)
            attention_bias = self.attention.output_dense.bias if fused_end else None
        if return_attention_scores:
            attended, scores = attended  # scores: (batch, heads, length, length)
        x = self._add(inputs, attended, self.attention_norm, training, attention_bias)  # (batch, length, hidden)

        y = self.output_norm(x) if self.norm_first else x
        y = self._feed_forward_hidden(y, training)  # (batch, length, intermediate)
        if fused_end:  # the bias is added in `_add`
            y = fused_gradients.project(y, self.output_dense.kernel)
        else:
            y = self.output_dense(y)  # (batch, length, hidden)
        outputs = self._add(x, y, self.output_norm, training, self.output_dense.bias if fused_end else None)
        if return_attention_scores:
            return outputs, scores
        return outputs

    def _call_plain(self, inputs, attention_mask, training, return_attention_scores):
        """The block as plain Keras composition: the same weights and values,
        as a TPU runs it (`layers.fast_path` off), where XLA fuses the step."""
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

    def _add(self, residual, y, norm, training, bias=None):
        """`residual + dropout(y)`, then `norm` after it in post-norm blocks.

        Post-norm training runs `fused_gradients.residual_norm`: the same
        values (and dropout mask) in one compiled pass each way, `bias`
        added to `y` in it; exports trace the layers, which call no XLA.
        """
        if self.norm_first:
            return residual + self.dropout(y, training=training)
        if self._ends_compiled(training):
            seed = self.dropout.next_seed() if self.dropout.rate else None
            return fused_gradients.residual_norm(
                residual, y, norm.gamma, norm.beta, norm.epsilon, self.dropout.rate, seed, bias
            )
        return norm(residual + self.dropout(y, training=training))

    def _ends_compiled(self, training):
        """Whether `_add` ends each sub-layer in one compiled function:
        post-norm training with hashed dropout masks."""
        return training is True and not self.norm_first and self.dropout.hashed and fast_path.enabled()

    def _feed_forward_hidden(self, x, training):
        """The feed-forward's first projection and activation.

        In training through `fused_gradients` (same values and variables):
        the projection with a faster input gradient and, for Keras's exact
        GELU, the activation with a written-out gradient, compiled (one XLA
        pass each way) with the projection's bias added in it. Otherwise the
        Dense layer and GELU in TensorFlow's kernels, as exports trace them:
        exports call no XLA, which TensorFlow Serving runs only behind an
        experimental flag.
        """
        gelu = self.activation is keras.activations.gelu
        if training is not True:
            x = self.intermediate(x)
            return fused_gradients.gelu(x) if gelu else self.activation(x)
        kernel, bias = self.intermediate.kernel, self.intermediate.bias
        if gelu:
            return fused_gradients.dense_gelu(x, kernel, bias)
        return self.activation(fused_gradients.dense(x, kernel, bias))

    def _attend(self, x, attention_mask, return_attention_scores, output_bias=True):
        """Self-attention with `self.attention`'s weights, in batched matmuls.

        Keras's einsums transpose every operand on CPU; projecting once and
        laying heads out as (batch, heads, length, head_size) - keys as
        (batch, heads, head_size, length) - needs one transpose per operand.
        Measured forward and backward at (32, 128, 256), 4 heads, 2 cores:
        58 -> 48 ms. Logits and softmax are float32 under mixed precision.
        `output_bias=False` leaves the output projection's bias for the
        caller to add.
        """
        length, hidden = ops.shape(x)[1], x.shape[2]  # length may be dynamic
        head_size = hidden // self.num_heads
        flat = ops.reshape(x, (-1, hidden))  # (batch * length, hidden)

        def affine(dense, inputs, bias=True):  # (rows, hidden) through an EinsumDense's weights
            y = ops.matmul(inputs, ops.cast(ops.reshape(dense.kernel, (hidden, hidden)), x.dtype))
            return y + ops.cast(ops.reshape(dense.bias, (hidden,)), x.dtype) if bias else y

        def project(dense, layout):
            y = ops.reshape(affine(dense, flat), (-1, length, self.num_heads, head_size))
            return ops.transpose(y, layout)

        queries = project(self.attention.query_dense, (0, 2, 1, 3)) * ops.cast(head_size**-0.5, x.dtype)
        keys = project(self.attention.key_dense, (0, 2, 3, 1))  # transposed
        values = project(self.attention.value_dense, (0, 2, 1, 3))
        logits = ops.cast(ops.matmul(queries, keys), "float32")  # (batch, heads, length, length)
        if attention_mask is not None:
            # (batch, 1, length or 1, length): -1e9 where a key is hidden.
            logits += ops.where(ops.expand_dims(attention_mask, 1), 0.0, -1e9)
        weights = ops.softmax(logits, axis=-1)
        mixed = ops.matmul(ops.cast(weights, x.dtype), values)  # (batch, heads, length, head_size)
        mixed = ops.reshape(ops.transpose(mixed, (0, 2, 1, 3)), (-1, hidden))
        attended = ops.reshape(affine(self.attention.output_dense, mixed, output_bias), (-1, length, hidden))
        if return_attention_scores:
            return attended, ops.cast(weights, x.dtype)
        return attended

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
