"""`build_model(config)`: the one place the classifier is assembled.

Training, tuning, export and tests all call it, so the model has exactly one
definition. `model_internals` runs a built model's layers (same weights)
to expose every layer's output and attention maps for visualization.
"""

import keras

from layers import (
    ClassificationHead,
    Dropout,
    FactorizedEmbedding,
    LayerNormalization,
    MaskedLMHead,
    SegmentEmbedding,
    SharedEncoder,
    TimingSignal1D,
)
from pipeline.tokenizer import SEP_ID

# The name of the segment embedding, which a model of pairs of texts (`ModelConfig.segments`) has.
SEGMENT_LAYER = "segment_embedding"


def build_model(config):
    """Builds the classifier from int32 ids `(batch, length <= max_length)` to
    probabilities (or, with `config.head_activation` "linear", a regression's scores).

    Args:
        config: a `pipeline.config.ModelConfig` with `vocabulary_size` and
            `num_classes` filled in.

    Returns:
        A functional `keras.Model` named `albert_classifier` whose output is
        float32 `(batch, num_classes)`: probabilities, or scores.
    """
    _check_sizes(config, ("vocabulary_size", "num_classes", "max_length"))
    # Any length up to max_length: training batches are cut to their longest
    # example (TrainConfig.length_bucket); the head pads back where it must.
    token_ids = keras.Input((None,), dtype="int32", name="token_ids")
    _, layer_outputs, padding_mask = _encode(config, token_ids)
    probabilities = ClassificationHead(
        config.num_classes,
        pooling=config.pooling,
        max_length=config.max_length,
        shared_kernel=config.head_shared_kernel,
        dropout_rate=config.dropout_rate,
        initializer_range=config.initializer_range,
        activation=config.head_activation,
        output_offset=config.target_mean,
        logit_offset=config.label_log_odds or 0.0,
        output_scale=config.target_scale,
        name="head",
    )(layer_outputs, mask=padding_mask)
    return keras.Model(token_ids, probabilities, name="albert_classifier")


def build_pretraining_model(config, sentence_order=False):
    """The same embeddings and encoder under a masked-language-model head.

    Inputs: `token_ids` int32 `(batch, length <= max_length)` and
    `masked_positions` int32 `(batch, predictions)` (the slots of
    `pipeline.masking.mask_tokens`). Output: float32 probabilities
    `(batch, predictions, vocabulary_size)`, through an output projection
    tied to the embedding. With `sentence_order`, the output is a dict of
    those (`masked_lm`) and `sentence_order` `(batch, 2)` probabilities from
    the top layer's [CLS] vector (ALBERT's sentence-order prediction). The
    layers `embedding`, `embedding_norm` and `encoder` carry the names
    `build_model` gives them, so a classifier can start from them
    (`pipeline.pretrain.initialize_from`).
    """
    _check_sizes(config, ("vocabulary_size", "max_length"))
    token_ids = keras.Input((None,), dtype="int32", name="token_ids")  # as build_model's
    positions = keras.Input((None,), dtype="int32", name="masked_positions")
    embedding, layer_outputs, _ = _encode(config, token_ids)
    last_layer = layer_outputs[:, -1]  # (batch, length, hidden), the top layer
    probabilities = MaskedLMHead(
        config.vocabulary_size,
        token_embedding=embedding,
        activation=config.hidden_activation,
        layer_norm_epsilon=config.layer_norm_epsilon,
        initializer_range=config.initializer_range,
        name="masked_lm",
    )(last_layer, positions)
    if sentence_order:
        initializer = keras.initializers.TruncatedNormal(stddev=config.initializer_range)
        pooled = keras.layers.Dense(
            config.hidden_size, activation="tanh", kernel_initializer=initializer, name="sentence_order_pooler"
        )(last_layer[:, 0])  # [CLS]
        logits = keras.layers.Dense(2, kernel_initializer=initializer, name="sentence_order_logits")(pooled)
        order = keras.layers.Softmax(dtype="float32", name="sentence_order")(logits)
        probabilities = {"masked_lm": probabilities, "sentence_order": order}
    return keras.Model(
        {"token_ids": token_ids, "masked_positions": positions}, probabilities, name="albert_pretraining"
    )


def _check_sizes(config, fields):
    for field in fields:
        if getattr(config, field) <= 0:
            raise ValueError(f"ModelConfig.{field} must be positive, got {getattr(config, field)}")


def _encode(config, token_ids):
    """Embeddings, timing signal and shared encoder: `(embedding, layer_outputs, mask)`."""
    embedding = FactorizedEmbedding(
        config.vocabulary_size,
        config.embedding_size,
        config.hidden_size,
        initializer_range=config.initializer_range,
        unit_scale=config.embedding_unit_scale,
        name="embedding",
    )
    x = embedding(token_ids)  # (batch, length, hidden)
    padding_mask = embedding.compute_mask(token_ids)  # (batch, length)
    if config.segments > 1:
        x = x + SegmentEmbedding(
            config.segments, config.hidden_size, SEP_ID, config.initializer_range, name=SEGMENT_LAYER
        )(token_ids)
    x = TimingSignal1D(name="timing_signal")(x)
    x = LayerNormalization(epsilon=config.layer_norm_epsilon, name="embedding_norm")(x)
    x = Dropout(config.dropout_rate, name="embedding_dropout")(x)
    encoder = SharedEncoder(
        num_layers=config.num_layers,
        num_heads=config.num_heads,
        intermediate_size=config.intermediate_size,
        num_groups=config.num_groups,
        dropout_rate=config.dropout_rate,
        attention_dropout_rate=config.attention_dropout_rate,
        activation=config.hidden_activation,
        norm_first=config.norm_first,
        layer_norm_epsilon=config.layer_norm_epsilon,
        initializer_range=config.initializer_range,
        name="encoder",
    )
    layer_outputs = encoder(x, mask=padding_mask)  # (batch, layers, length, hidden)
    return embedding, layer_outputs, padding_mask


def takes_pairs(model):
    """Whether a built model reads pairs of texts: it has a segment embedding."""
    return any(layer.name == SEGMENT_LAYER for layer in model.layers)


def model_internals(model, token_ids):
    """Runs `model`'s own layers (same weights) and returns its internals.

    Works eagerly and inside a `tf.function` (the export's attention
    signature uses it). A second functional model cannot do this in Keras
    3.15: its graph check assumes a re-called layer keeps the output arity of
    its first call, and the encoder returns one more tensor here.

    Args:
        model: a model from `build_model`.
        token_ids: int32 `(batch, max_length)`.

    Returns:
        A dict with `probabilities` `(batch, classes)`, `layer_outputs`
        `(batch, layers, length, hidden)` and `attention`
        `(batch, layers, heads, length, length)`, all in inference mode.
    """
    embedding = model.get_layer("embedding")
    padding_mask = embedding.compute_mask(token_ids)  # (batch, length)
    x = embedding(token_ids)
    if takes_pairs(model):
        x = x + model.get_layer(SEGMENT_LAYER)(token_ids)
    for name in ("timing_signal", "embedding_norm", "embedding_dropout"):
        x = model.get_layer(name)(x, training=False)
    layer_outputs, attention = model.get_layer("encoder")(
        x, mask=padding_mask, training=False, return_attention_scores=True
    )
    probabilities = model.get_layer("head")(layer_outputs, mask=padding_mask, training=False)
    return {
        "probabilities": probabilities,
        "layer_outputs": layer_outputs,
        "attention": attention,
    }
