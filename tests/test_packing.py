import pytest
import tensorflow as tf

from pipeline.packing import pack, padding_share
from pipeline.tokenizer import CLS_ID, SEP_ID

# Five lines of ids by word: a document of two lines, one of three (its first
# line of 6 tokens), and an empty line that starts a third.
LINES = tf.ragged.constant(
    [[[5], [6, 7]], [[8]], [[9, 10, 11], [12], [13], [14]], [[15]], [], [[16]]], dtype=tf.int32, ragged_rank=2
)
STARTS = tf.constant([True, False, True, False, True, False])


def _packed(*args):
    return pack(*args).to_list()


def test_lines_of_a_document_fill_sequences_and_a_long_line_fills_several():
    # 4 tokens fit beside [CLS]: the second document's 7 fill one sequence and start the next.
    assert _packed(LINES, STARTS, 5, True) == [
        [[CLS_ID], [5], [6, 7], [8]],
        [[CLS_ID], [9, 10, 11], [12]],
        [[CLS_ID], [13], [14], [15]],
        [[CLS_ID], [16]],  # an empty line still started its document
    ]


def test_a_line_that_does_not_fit_goes_on_in_the_next_sequence_of_its_document():
    lines = tf.ragged.constant([[[1], [2], [3]], [[4], [5, 6]], [[7]]], dtype=tf.int32, ragged_rank=2)
    assert _packed(lines, tf.constant([True, False, True]), 5, True) == [
        [[CLS_ID], [1], [2], [3], [4]],
        [[CLS_ID], [5, 6]],  # the rest of the first document: padding only at its end
        [[CLS_ID], [7]],
    ]


def test_each_line_is_a_document_of_its_own_without_join_lines():
    assert _packed(LINES, STARTS, 5, False) == [
        [[CLS_ID], [5], [6, 7]],
        [[CLS_ID], [8]],
        [[CLS_ID], [9, 10, 11], [12]],
        [[CLS_ID], [13], [14]],
        [[CLS_ID], [15]],
        [[CLS_ID], [16]],
    ]


def test_a_word_longer_than_a_sequence_is_cut_between_sequences():
    word = tf.ragged.constant([[[1, 2, 3, 4, 5, 6, 7]]], dtype=tf.int32, ragged_rank=2)
    assert _packed(word, tf.constant([True]), 4, True) == [
        [[CLS_ID], [1, 2, 3]],
        [[CLS_ID], [4, 5, 6]],
        [[CLS_ID], [7]],
    ]


@pytest.mark.parametrize("join_lines", [True, False])
def test_no_lines_or_only_empty_ones_make_no_sequence(join_lines):
    empty = tf.ragged.constant([[]], dtype=tf.int32, ragged_rank=2)
    assert _packed(empty, tf.constant([True]), 5, join_lines) == []
    assert _packed(LINES[:0], STARTS[:0], 5, join_lines) == []


def test_padding_share():
    assert padding_share([4, 2], 8) == pytest.approx(1 - 6 / 16)


def test_a_pair_is_one_sequence_a_sep_b_cut_from_its_longer_text_and_a_line_after_it_starts_a_document():
    firsts = tf.ragged.constant(
        [[[5], [6, 7], [8], [9], [10], [11]], [[20], [21]], [[30]]], dtype=tf.int32, ragged_rank=2
    )
    seconds = tf.ragged.constant(
        [[[40], [41]], [], [[50], [51], [52], [53], [54], [55]]], dtype=tf.int32, ragged_rank=2
    )
    # 6 tokens beside [CLS] and [SEP]: a long first text keeps whole words up to what the second leaves,
    # at least half; the line after a pair is a document even though it does not start one.
    assert _packed(firsts, tf.constant([True, False, False]), 8, True, seconds) == [
        [[CLS_ID], [5], [6, 7], [8], [SEP_ID], [40], [41]],
        [[CLS_ID], [20], [21]],
        [[CLS_ID], [30], [SEP_ID], [50], [51], [52], [53], [54]],
    ]
