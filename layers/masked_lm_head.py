"""The masked-language-model head used to pre-train the shared encoder."""

import keras
from keras import ops


@keras.saving.register_keras_serializable(package="albert_pipeline")
class MaskedLMHead(keras.layers.Layer):
    """Predicts the tokens at masked positions, as BERT and ALBERT pre-train.

    Gathers the hidden states at `masked_positions`, transforms them (dense,
    activation, layer normalization), and maps them to vocabulary
    probabilities. With `token_embedding` (a `FactorizedEmbedding`), the
    output projection is tied to the input embedding: the transposed E x H
    projection, then the transposed V x E table. Without it, the layer owns
    an H x V projection.

    Args:
        vocabulary_size: int, V.
        token_embedding: optional `FactorizedEmbedding` to tie the output to.
        activation: activation of the transform.
        layer_norm_epsilon: float, epsilon of the layer normalization.
        initializer_range: float, stddev of the truncated-normal initializer.
        **kwargs: standard `keras.layers.Layer` arguments (`name`, `dtype`).

    Call arguments:
        inputs: float tensor `(batch, length, hidden)`.
        masked_positions: int tensor `(batch, predictions)`.

    Returns:
        float32 probabilities `(batch, predictions, vocabulary_size)`.

    Example:

    >>> head = MaskedLMHead(vocabulary_size=100)
    >>> head(keras.ops.ones((2, 10, 8)), keras.ops.zeros((2, 3), "int32")).shape
    (2, 3, 100)

    References:
        - [Devlin et al., 2018](https://arxiv.org/abs/1810.04805)
        - [Lan et al., 2019](https://arxiv.org/abs/1909.11942)
    """

    def __init__(
        self,
        vocabulary_size,
        token_embedding=None,
        activation="gelu",
        layer_norm_epsilon=1e-12,
        initializer_range=0.02,
        **kwargs,
    ):
        super().__init__(**kwargs)
        self.vocabulary_size = int(vocabulary_size)
        self.token_embedding = token_embedding
        self.activation = keras.activations.get(activation)
        self.layer_norm_epsilon = float(layer_norm_epsilon)
        self.initializer_range = float(initializer_range)
        # The padding mask of `inputs` does not apply to the predictions.
        self.supports_masking = True

    def build(self, inputs_shape, masked_positions_shape=None):
        hidden = inputs_shape[-1]
        initializer = keras.initializers.TruncatedNormal(stddev=self.initializer_range)
        self.transform = keras.layers.Dense(
            hidden,
            activation=self.activation,
            kernel_initializer=initializer,
            dtype=self.dtype_policy,
            name="transform",
        )
        self.transform.build((None, None, hidden))
        self.norm = keras.layers.LayerNormalization(
            epsilon=self.layer_norm_epsilon, dtype=self.dtype_policy, name="norm"
        )
        self.norm.build((None, None, hidden))
        self.output_projection = None
        if self.token_embedding is None:
            self.output_projection = keras.layers.Dense(
                self.vocabulary_size,
                use_bias=False,
                kernel_initializer=initializer,
                dtype=self.dtype_policy,
                name="output_projection",
            )
            self.output_projection.build((None, None, hidden))
        self.bias = self.add_weight(shape=(self.vocabulary_size,), initializer="zeros", name="bias")
        self.softmax = keras.layers.Softmax(dtype="float32", name="probabilities")

    def call(self, inputs, masked_positions):
        positions = ops.cast(masked_positions, "int32")[:, :, None]  # (batch, predictions, 1)
        x = ops.take_along_axis(inputs, positions, axis=1)  # (batch, predictions, hidden)
        x = self.norm(self.transform(x))
        if self.output_projection is None:
            logits = self.token_embedding(x, reverse=True)  # tied: (batch, predictions, V)
        else:
            logits = self.output_projection(x)
        return self.softmax(ops.cast(logits, "float32") + ops.cast(self.bias, "float32"))

    def compute_mask(self, inputs, masked_positions=None, mask=None):
        return None

    def compute_output_shape(self, inputs_shape, masked_positions_shape):
        return (inputs_shape[0], masked_positions_shape[1], self.vocabulary_size)

    def get_config(self):
        config = super().get_config()
        config.update(
            {
                "vocabulary_size": self.vocabulary_size,
                "token_embedding": (
                    keras.layers.serialize(self.token_embedding) if self.token_embedding is not None else None
                ),
                "activation": keras.activations.serialize(self.activation),
                "layer_norm_epsilon": self.layer_norm_epsilon,
                "initializer_range": self.initializer_range,
            }
        )
        return config

    @classmethod
    def from_config(cls, config):
        config = dict(config)
        if config.get("token_embedding") is not None:
            config["token_embedding"] = keras.layers.deserialize(config["token_embedding"])
        return cls(**config)
