"""Packing the lines of documents into pre-training sequences, as BERT's and
ALBERT's data scripts do, but inside tf.data, on batches of tokenized lines.

A line longer than a sequence is cut into chunks that fill whole sequences
(a word cut there is split between them), so nothing past `max_length` is
lost. With `join_lines`, consecutive chunks of one document share a
sequence while they fit, and a document never shares one with another;
otherwise each line is a document of its own.
"""

import tensorflow as tf

from pipeline.tokenizer import CLS_ID, one_word


def pack(pieces, starts, max_length, join_lines):
    """Sequences of `max_length` tokens at most, [CLS] first.

    Args:
        pieces: `(lines, (words), (pieces))` int32 ids of consecutive lines
            (`Tokenizer.word_pieces`).
        starts: `(lines,)` bool, true where a line starts a document.
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
    line_of_token = tokens.value_rowids()
    position = tf.ragged.range(tokens.row_lengths()).flat_values  # within its line
    chunks_per_line = (tokens.row_lengths() + capacity - 1) // capacity
    first_chunk = tf.cumsum(chunks_per_line, exclusive=True)
    chunk_of_token = tf.gather(first_chunk, line_of_token) + position // capacity
    if join_lines:
        chunk_line = tf.repeat(tf.range(tokens.nrows()), chunks_per_line)
        # A document's number for every chunk: a line holding no token still starts one.
        document = tf.gather(tf.cumsum(tf.cast(starts, tf.int64)), chunk_line)
        chunk_starts = tf.concat([[True], document[1:] != document[:-1]], axis=0)[: tf.size(document)]
        lengths = tf.math.unsorted_segment_sum(
            tf.ones_like(chunk_of_token), chunk_of_token, tf.reduce_sum(chunks_per_line)
        )
        sequence_of_chunk = _greedy(lengths, chunk_starts, capacity)
    else:
        sequence_of_chunk = tf.range(tf.reduce_sum(chunks_per_line))  # no chunk fits beside a full one
    sequences = tf.maximum(tf.reduce_max(sequence_of_chunk), -1) + 1
    word_of_token = pieces.values.value_rowids()
    # A word ends where the chunk does, so a word cut there is two words.
    new_word = tf.concat(
        [[True], (word_of_token[1:] != word_of_token[:-1]) | (chunk_of_token[1:] != chunk_of_token[:-1])], axis=0
    )[: tf.size(values)]
    words = tf.RaggedTensor.from_value_rowids(values, tf.cumsum(tf.cast(new_word, tf.int64)) - 1)
    word_sequence = tf.boolean_mask(tf.gather(sequence_of_chunk, chunk_of_token), new_word)
    packed = tf.RaggedTensor.from_value_rowids(words, word_sequence, nrows=sequences)
    return tf.concat([one_word(CLS_ID, packed.nrows()), packed], axis=1)


def _greedy(lengths, starts, capacity):
    # The sequence of each chunk: the one before it while the chunk fits and
    # its document goes on, else a new one.
    def step(state, chunk):
        sequence, filled = state
        length, start = chunk
        new = start | (filled + length > capacity)
        return sequence + tf.cast(new, tf.int64), tf.where(new, length, filled + length)

    initial = (tf.constant(-1, tf.int64), tf.constant(0, tf.int64))
    sequence_of_chunk, _ = tf.scan(step, (lengths, starts), initializer=initial)
    return sequence_of_chunk


def padding_share(sequence_lengths, max_length):
    """The share of `max_length`-token sequences of these lengths that is padding."""
    lengths = tf.cast(sequence_lengths, tf.float64)
    return float(1.0 - tf.reduce_sum(lengths) / (tf.cast(tf.size(lengths), tf.float64) * max_length))
