"""The segment embedding of a pair of texts, `[CLS] a [SEP] b [SEP]`."""

import keras
from keras import ops


@keras.saving.register_keras_serializable(package="albert_pipeline")
class SegmentEmbedding(keras.layers.Layer):
    """A learned vector per segment, added to each token's embedding, as
    BERT's and ALBERT's token type embedding.

    The segment of each token is read from the ids themselves: a token is in
    the segment after as many separators as come before it, so `[CLS] a
    [SEP]` is segment 0 and `b [SEP]` segment 1, as BERT numbers them. The
    model then takes one input, the ids, in training, pre-training (whose
    sentence-order prediction packs `[CLS] A [SEP] B` the same way) and
    serving alike. Padding after the last segment counts as that segment;
    its positions are masked downstream.

    Args:
        segments: int, the number of segments (2 for a pair).
        hidden_size: int, the width of the embeddings it is added to.
        separator_id: int, the id that ends a segment ([SEP]).
        initializer_range: float, stddev of the truncated-normal initializer.
        **kwargs: standard `keras.layers.Layer` arguments (`name`, `dtype`).

    Call arguments:
        inputs: int tensor of token ids, shape `(batch, length)`.

    Returns:
        float tensor `(batch, length, hidden_size)`, the segment vectors.

    Example:

    >>> layer = SegmentEmbedding(2, 4, separator_id=3)
    >>> layer(keras.ops.convert_to_tensor([[2, 7, 3, 8, 9, 3, 0]])).shape
    (1, 7, 4)
    >>> [int(s) for s in layer.segment_ids(keras.ops.convert_to_tensor([[2, 7, 3, 8, 9, 3, 0]]))[0]]
    [0, 0, 0, 1, 1, 1, 1]
    """

    def __init__(self, segments, hidden_size, separator_id, initializer_range=0.02, **kwargs):
        super().__init__(**kwargs)
        self.segments, self.hidden_size = int(segments), int(hidden_size)
        self.separator_id, self.initializer_range = int(separator_id), float(initializer_range)

    def build(self, input_shape):
        self.embeddings = self.add_weight(
            shape=(self.segments, self.hidden_size),
            initializer=keras.initializers.TruncatedNormal(stddev=self.initializer_range),
            name="embeddings",
        )

    def segment_ids(self, token_ids):
        """int32 `(batch, length)`: each token's segment, the last one for any beyond it."""
        separators = ops.cast(ops.equal(token_ids, self.separator_id), "int32")
        before = ops.cumsum(separators, axis=1) - separators  # separators strictly before each token
        return ops.minimum(before, self.segments - 1)

    def call(self, inputs):
        return ops.take(ops.cast(self.embeddings, self.compute_dtype), self.segment_ids(inputs), axis=0)

    def compute_output_shape(self, input_shape):
        return (*input_shape, self.hidden_size)

    def get_config(self):
        config = super().get_config()
        config.update(
            {
                "segments": self.segments,
                "hidden_size": self.hidden_size,
                "separator_id": self.separator_id,
                "initializer_range": self.initializer_range,
            }
        )
        return config
