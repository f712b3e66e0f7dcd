"""Packing the lines of documents into pre-training sequences, as BERT's and
ALBERT's data scripts do, but inside tf.data, on batches of tokenized lines.

A document's tokens fill sequences of `max_length` tokens one after another
(a line or word that does not fit goes on in the next), so only a document's
last sequence holds padding and nothing past `max_length` is lost. With
`join_lines`, the lines of a document follow one another; otherwise each
line is a document of its own. A document never shares a sequence with
another.
"""

import numpy as np
import tensorflow as tf

from pipeline.tokenizer import CLS_ID, one_word


def pack(pieces, starts, max_length, join_lines):
    """Sequences of `max_length` tokens at most, [CLS] first.

    Args:
        pieces: `(lines, (words), (pieces))` int32 ids of consecutive lines
            (`Tokenizer.word_pieces`).
        starts: `(lines,)` bool, true where a line starts a document (the
            first line always does).
        max_length: tokens per sequence, [CLS] included.
        join_lines: pack the lines of a document together.

    Returns:
        `(sequences, (words), (pieces))` int32, in line order.
    """
    capacity = max_length - 1  # room for [CLS]
    if isinstance(pieces.values, tf.Tensor):  # one piece per word, a uniform dimension
        pieces = pieces.with_values(tf.RaggedTensor.from_tensor(pieces.values))
    tokens = pieces.merge_dims(1, 2)  # (lines, (tokens))
    values = tokens.flat_values
    if not join_lines:
        starts = tf.ones_like(starts)
    # Each document's tokens, and each token's place in its document.
    starts = tf.concat([[True], starts[1:]], axis=0)[: tf.size(starts)]
    document_of_line = tf.cumsum(tf.cast(starts, tf.int64)) - 1
    document_of_token = tf.gather(document_of_line, tokens.value_rowids())
    documents = tf.RaggedTensor.from_value_rowids(
        values, document_of_token, nrows=tf.reduce_sum(tf.cast(starts, tf.int64))
    )
    position = tf.ragged.range(documents.row_lengths()).flat_values
    chunks_per_document = (documents.row_lengths() + capacity - 1) // capacity
    first_chunk = tf.cumsum(chunks_per_document, exclusive=True)
    sequence_of_token = tf.gather(first_chunk, document_of_token) + position // capacity
    word_of_token = pieces.values.value_rowids()
    # A word ends where its sequence does, so a word cut there is two words.
    new_word = tf.concat(
        [[True], (word_of_token[1:] != word_of_token[:-1]) | (sequence_of_token[1:] != sequence_of_token[:-1])],
        axis=0,
    )[: tf.size(values)]
    words = tf.RaggedTensor.from_value_rowids(values, tf.cumsum(tf.cast(new_word, tf.int64)) - 1)
    word_sequence = tf.boolean_mask(sequence_of_token, new_word)
    packed = tf.RaggedTensor.from_value_rowids(words, word_sequence, nrows=tf.reduce_sum(chunks_per_document))
    return tf.concat([one_word(CLS_ID, packed.nrows()), packed], axis=1)


def padding_share(sequence_lengths, max_length):
    """The share of `max_length`-token sequences of these lengths that is padding."""
    return float(1.0 - np.sum(sequence_lengths) / (len(sequence_lengths) * max_length))
