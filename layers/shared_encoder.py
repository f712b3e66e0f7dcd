"""ALBERT's encoder: N Transformer layers sharing the weights of a few blocks."""

import keras
from keras import ops

from layers.layer_normalization import LayerNormalization
from layers.transformer_block import TransformerBlock


@keras.saving.register_keras_serializable(package="albert_pipeline")
class SharedEncoder(keras.layers.Layer):
    """A stack of `num_layers` Transformer layers with cross-layer sharing.

    The layers are split into `num_groups` consecutive groups that each reuse
    one `TransformerBlock`, as ALBERT does (layer `i` runs block
    `i * num_groups // num_layers`). `num_groups=1`, the default, shares one
    block across every layer, so the weight count does not grow with depth;
    `num_groups=num_layers` is an ordinary unshared BERT stack.

    The encoder returns the outputs of all layers, stacked, because the
    classification head of the source design averages them. Padding
    positions (mask False) are never attended to as keys.

    Args:
        num_layers: int, N, the number of layers applied.
        num_heads: int, attention heads per layer.
        intermediate_size: int, width of the feed-forward hidden layer.
        num_groups: int, number of distinct blocks, 1 <= num_groups <= N.
        dropout_rate: float, dropout after each sub-layer.
        attention_dropout_rate: float, dropout on the attention weights.
        activation: activation of the feed-forward hidden layer.
        norm_first: bool, pre-norm blocks; a final layer normalization
            (shared) is then applied to every returned layer output.
        layer_norm_epsilon: float, epsilon of the layer normalizations.
        initializer_range: float, stddev of the truncated-normal initializer.
        **kwargs: standard `keras.layers.Layer` arguments (`name`, `dtype`).

    Call arguments:
        inputs: float tensor `(batch, length, hidden)`.
        mask: optional bool tensor `(batch, length)`, False at padding.
        training: bool, whether dropout is active.
        return_attention_scores: bool, also return the attention weights of
            every layer and head, `(batch, num_layers, heads, length, length)`.

    Returns:
        `(batch, num_layers, length, hidden)`, and the attention weights if
        asked for.

    Example:

    >>> encoder = SharedEncoder(num_layers=12, num_heads=2, intermediate_size=32)
    >>> encoder(keras.ops.zeros((2, 5, 8))).shape
    (2, 12, 5, 8)

    References:
        - [Lan et al., 2019](https://arxiv.org/abs/1909.11942), section 3.1
        - google-research/albert `modeling.py`, `transformer_model`
    """

    def __init__(
        self,
        num_layers,
        num_heads,
        intermediate_size,
        num_groups=1,
        dropout_rate=0.0,
        attention_dropout_rate=0.0,
        activation="gelu",
        norm_first=False,
        layer_norm_epsilon=1e-12,
        initializer_range=0.02,
        **kwargs,
    ):
        super().__init__(**kwargs)
        if not 1 <= int(num_groups) <= int(num_layers):
            raise ValueError(f"num_groups must be between 1 and num_layers={num_layers}, got {num_groups}")
        self.num_layers = int(num_layers)
        self.num_heads = int(num_heads)
        self.intermediate_size = int(intermediate_size)
        self.num_groups = int(num_groups)
        self.dropout_rate = float(dropout_rate)
        self.attention_dropout_rate = float(attention_dropout_rate)
        self.activation = keras.activations.get(activation)
        self.norm_first = bool(norm_first)
        self.layer_norm_epsilon = float(layer_norm_epsilon)
        self.initializer_range = float(initializer_range)
        # The mask is consumed here; the output carries none.
        self.supports_masking = True

    def build(self, input_shape):
        self.blocks = []
        for group in range(self.num_groups):
            block = TransformerBlock(
                num_heads=self.num_heads,
                intermediate_size=self.intermediate_size,
                dropout_rate=self.dropout_rate,
                attention_dropout_rate=self.attention_dropout_rate,
                activation=self.activation,
                norm_first=self.norm_first,
                layer_norm_epsilon=self.layer_norm_epsilon,
                initializer_range=self.initializer_range,
                dtype=self.dtype_policy,
                name=f"block_{group}",
            )
            block.build(input_shape)
            self.blocks.append(block)
        self.final_norm = None
        if self.norm_first:
            self.final_norm = LayerNormalization(
                epsilon=self.layer_norm_epsilon,
                dtype=self.dtype_policy,
                name="final_norm",
            )
            self.final_norm.build(input_shape)

    def block_for_layer(self, layer_index):
        """The block that layer `layer_index` (0-based) runs."""
        return self.blocks[layer_index * self.num_groups // self.num_layers]

    def call(self, inputs, mask=None, training=None, return_attention_scores=False):
        attention_mask = None
        if mask is not None:
            # Keys at padding are masked for every query: (batch, length, length).
            keys = ops.cast(mask, "int32")[:, None, :]
            queries = ops.ones_like(keys)[:, 0, :, None]
            attention_mask = ops.cast(queries * keys, "bool")
        x = inputs  # (batch, length, hidden)
        outputs, scores = [], []
        for index in range(self.num_layers):
            x = self.block_for_layer(index)(
                x,
                attention_mask=attention_mask,
                training=training,
                return_attention_scores=return_attention_scores,
            )
            if return_attention_scores:
                x, layer_scores = x  # (batch, heads, length, length)
                scores.append(layer_scores)
            outputs.append(self.final_norm(x) if self.final_norm else x)
        outputs = ops.stack(outputs, axis=1)  # (batch, layers, length, hidden)
        if return_attention_scores:
            return outputs, ops.stack(scores, axis=1)
        return outputs

    def compute_output_spec(self, inputs, mask=None, training=None, return_attention_scores=False):
        batch, length, hidden = inputs.shape
        outputs = keras.KerasTensor((batch, self.num_layers, length, hidden), dtype=self.compute_dtype)
        if not return_attention_scores:
            return outputs
        scores = keras.KerasTensor(
            (batch, self.num_layers, self.num_heads, length, length),
            dtype=self.compute_dtype,
        )
        return outputs, scores

    def compute_mask(self, inputs, mask=None):
        return None

    def get_config(self):
        config = super().get_config()
        config.update(
            {
                "num_layers": self.num_layers,
                "num_heads": self.num_heads,
                "intermediate_size": self.intermediate_size,
                "num_groups": self.num_groups,
                "dropout_rate": self.dropout_rate,
                "attention_dropout_rate": self.attention_dropout_rate,
                "activation": keras.activations.serialize(self.activation),
                "norm_first": self.norm_first,
                "layer_norm_epsilon": self.layer_norm_epsilon,
                "initializer_range": self.initializer_range,
            }
        )
        return config
