"""Packing the lines of documents into pre-training sequences, as BERT's and
ALBERT's data scripts do, but inside tf.data, on batches of tokenized lines.

A document's tokens fill sequences of `max_length` tokens one after another
(a line or word that does not fit goes on in the next), so only a document's
last sequence holds padding and nothing past `max_length` is lost. With
`join_lines`, the lines of a document follow one another; otherwise each
line is a document of its own. A document never shares a sequence with
another. A pair of texts is a document of one sequence, `[CLS] a [SEP] b`,
cut to fit as the classifier's input is: its [SEP] is where the
sentence-order task cuts it (`masking.swap_segments`).
"""

import numpy as np
import tensorflow as tf

from pipeline.tokenizer import CLS_ID, SEP_ID, first_words, one_word


def pack(pieces, starts, max_length, join_lines, pairs=None):
    """Sequences of `max_length` tokens at most, [CLS] first.

    Args:
        pieces: `(lines, (words), (pieces))` int32 ids of consecutive lines
            (`Tokenizer.word_pieces`).
        starts: `(lines,)` bool, true where a line starts a document (the
            first line always does).
        max_length: tokens per sequence, [CLS] included.
        join_lines: pack the lines of a document together.
        pairs: `(lines, (words), (pieces))` ids of each line's second text,
            no words where the line is a text alone.

    Returns:
        `(sequences, (words), (pieces))` int32, in line order.
    """
    capacity = max_length - 1  # room for [CLS]
    pieces = _ragged_pieces(pieces)
    if pairs is not None:
        pieces, starts = _joined_pairs(pieces, _ragged_pieces(pairs), starts, capacity - 1)  # room for [SEP]
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


def _ragged_pieces(pieces):
    # One piece per word makes a uniform dimension: ragged, as the rest expects.
    if isinstance(pieces.values, tf.Tensor):
        return pieces.with_values(tf.RaggedTensor.from_tensor(pieces.values))
    return pieces


def _joined_pairs(firsts, seconds, starts, budget):
    """`(a [SEP] b, starts)` where a line has a second text, each a document
    of its own, with whole words cut from the longer text first to fit
    `budget` tokens (as `Tokenizer.pair` cuts tokens); other lines as they
    are, but a line after a pair starts a document."""
    paired = seconds.row_lengths() > 0
    a_tokens, b_tokens = (tf.reduce_sum(text.row_lengths(axis=2), axis=1) for text in (firsts, seconds))
    a_budget = tf.where(paired, tf.maximum(tf.constant(-(-budget // 2), tf.int64), budget - b_tokens), a_tokens)
    firsts = first_words(firsts, a_budget[:, None])
    b_budget = budget - tf.reduce_sum(firsts.row_lengths(axis=2), axis=1)
    seconds = tf.concat([one_word(SEP_ID, seconds.nrows()), first_words(seconds, b_budget[:, None])], axis=1)
    keep = tf.RaggedTensor.from_row_lengths(tf.repeat(paired, seconds.row_lengths()), seconds.row_lengths())
    after_pair = tf.concat([[False], paired[:-1]], axis=0)[: tf.size(paired)]
    return tf.concat([firsts, tf.ragged.boolean_mask(seconds, keep)], axis=1), starts | paired | after_pair


def padding_share(sequence_lengths, max_length):
    """The share of `max_length`-token sequences of these lengths that is padding."""
    return float(1.0 - np.sum(sequence_lengths) / (len(sequence_lengths) * max_length))
