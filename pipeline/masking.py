"""Masked-language-model batches, made in tf.data with tensorflow-text's BERT ops.

Of the tokens of each sequence ([CLS], [SEP] and padding excluded), 15% are
chosen (rounded per sequence, at least one, as BERT's data script does); of
those 80% become [MASK], 10% a random token and 10% stay as they were (the
rates are settable). With whole-word masking, all pieces of a chosen word are
chosen together. Every sequence of a batch has the same number of prediction
slots, weight 0 where unused: `max_predictions`, so shapes are static on
TPUs, or fewer in length-bucketed batches (`mask_tokens`). Optionally,
ALBERT's sentence-order task too (`swap_segments`).
"""

import dataclasses
import functools

import tensorflow as tf
import tensorflow_text as tf_text
from tensorflow_text.python.ops import item_selector_ops

from pipeline.config import PretrainConfig
from pipeline.dataset import batch_sizes, replica_batches, shuffled_steps
from pipeline.tokenizer import CLS_ID, MASK_ID, PAD_ID, SEP_ID, first_words, one_word


class BertItemSelector(item_selector_ops.ItemSelector):
    """Chooses `max(1, round(n * rate))` of the n selectable items of each row.

    BERT's data script rounds; tensorflow-text's `RandomItemSelector` takes
    the ceiling, which chooses about 20% instead of 15% of the tokens of the
    short sequences classification corpora hold. Items are the entries of
    axis 1: tokens, or whole words for `(batch, (words), (pieces))` ids (a
    word is selectable when its first piece is).
    """

    def __init__(self, rate, max_selections, unselectable_ids):
        super().__init__(unselectable_ids)
        self.rate, self.max_selections = rate, max_selections

    def get_selection_mask(self, input_ids, axis=1):
        items = first_pieces(input_ids) if input_ids.ragged_rank > 1 else input_ids  # a word: its first piece
        selectable = tf.ragged.map_flat_values(
            lambda ids: tf.reduce_all(ids[:, None] != tf.constant(self.unselectable_ids, ids.dtype), -1), items
        )
        dense = selectable.to_tensor(False)  # (batch, items)
        count = tf.reduce_sum(tf.cast(dense, tf.float32), axis=1)
        wanted = tf.minimum(tf.maximum(1.0, tf.round(count * self.rate)), float(self.max_selections))
        scores = tf.where(dense, tf.random.uniform(tf.shape(dense)), 2.0)  # unselectable sort last
        rank = tf.argsort(tf.argsort(scores, axis=1), axis=1)
        chosen = dense & (tf.cast(rank, tf.float32) < wanted[:, None])
        chosen = tf.RaggedTensor.from_tensor(chosen, lengths=items.row_lengths())
        if input_ids.ragged_rank > 1:  # every piece of a chosen word
            pieces = tf.repeat(chosen.flat_values, input_ids.values.row_lengths())
            return input_ids.with_flat_values(pieces)
        return chosen


def first_pieces(word_ids):
    """The first piece of each word of `(batch, (words), (pieces))` ids, `(batch, (words))`."""
    pieces = word_ids.values  # (words, (pieces)), or uniform where each word is one piece
    first = pieces[:, 0] if isinstance(pieces, tf.Tensor) else tf.gather(pieces.flat_values, pieces.row_starts())
    return tf.RaggedTensor.from_row_splits(first, word_ids.row_splits)


def swap_segments(word_ids, max_length):
    """ALBERT's sentence-order task.

    Cuts each sequence of `Tokenizer.word_ids` or `packing.pack` output
    (`[CLS]` first) into two segments and returns `[CLS] A [SEP] B`, or, for
    half of the sequences, `[CLS] B [SEP] A`. A pair of texts (`[CLS] a
    [SEP] b`) is cut at its [SEP], so that its segments are those the
    classifier reads; a single text at a random word boundary, where, if the
    [SEP] does not fit, the last word makes room. A sequence that cannot be
    cut in two non-empty segments stays in order with weight 0.

    Returns:
        `(word_ids, swapped int32 (batch,), weights float32 (batch,))`.
    """
    words = word_ids[:, 1:]  # without [CLS]
    leading = first_pieces(words)
    separator = leading.with_flat_values(leading.flat_values == SEP_ID)
    paired = tf.reduce_any(separator, axis=1)
    # A pair's [SEP]: as many words before it as come first.
    pair_cut = tf.argmax(tf.cast(separator.to_tensor(False), tf.int32), axis=1, output_type=tf.int64)
    # Room for [CLS] and [SEP].
    words = first_words(tf.ragged.boolean_mask(words, tf.logical_not(separator)), max_length - 2)
    count = words.row_lengths()
    # A single text's cut: 1 .. count - 1 words before it.
    random_cut = 1 + tf.cast(
        tf.random.uniform(tf.shape(count)) * tf.cast(tf.maximum(count - 1, 1), tf.float32), tf.int64
    )
    cut = tf.where(paired, pair_cut, random_cut)
    cuttable = (cut >= 1) & (cut < count)
    swapped = cuttable & (tf.random.uniform(tf.shape(count)) < 0.5)
    first = tf.not_equal(tf.ragged.range(count) < cut[:, None], swapped[:, None])  # the segment put first
    cls, sep = (one_word(token, words.nrows()) for token in (CLS_ID, SEP_ID))
    ordered = tf.concat(
        [cls, tf.ragged.boolean_mask(words, first), sep, tf.ragged.boolean_mask(words, tf.logical_not(first))], axis=1
    )
    return ordered, tf.cast(swapped, tf.int32), tf.cast(cuttable, tf.float32)


def mask_tokens(word_ids, vocabulary_size, max_length, pretrain_config, length_bucket=0):
    """Masks a batch of `Tokenizer.word_ids` output.

    With `length_bucket`, `token_ids` are cut to the longest sequence of the
    batch rounded up to a multiple of it, instead of `max_length`, and
    the prediction slots to the most any row of that length can have
    chosen, `ceil(length * mask_rate)` (with whole-word masking, whose words
    bring all their pieces, the most any row of the step chose), instead of
    `max_predictions`: on short texts most slots are empty, and the output
    projection costs as much on an empty slot as on a real one.

    Returns:
        `({"token_ids": (batch, length), "masked_positions": (batch, P)},
        targets (batch, P), weights (batch, P))`; length = `max_length` and
        P = `max_predictions` unless cut as above.
        With `sentence_order`, the segments are swapped first
        (`swap_segments`), and targets and weights are dicts: `masked_lm` as
        above and `sentence_order` (batch,), 1 where swapped.
    """
    if pretrain_config.sentence_order:
        word_ids, swapped, order_weights = swap_segments(word_ids, max_length)
    ids = word_ids if pretrain_config.whole_word_masking else word_ids.merge_dims(1, 2)
    selector = BertItemSelector(
        pretrain_config.mask_rate, pretrain_config.max_predictions, unselectable_ids=[PAD_ID, CLS_ID, SEP_ID]
    )
    chooser = tf_text.MaskValuesChooser(
        vocabulary_size,
        MASK_ID,
        mask_token_rate=pretrain_config.mask_token_rate,
        random_token_rate=pretrain_config.random_token_rate,
    )
    masked, positions, targets = tf_text.mask_language_model(ids, selector, chooser, axis=1)
    if masked.ragged_rank > 1:
        masked = masked.merge_dims(1, 2)
    token_ids = _pad(masked, max_length, length_bucket)
    slots = pretrain_config.max_predictions
    if length_bucket and pretrain_config.whole_word_masking:
        # A chosen word brings all its pieces: the most any row of the step chose.
        slots = tf.minimum(slots, tf.cast(tf.reduce_max(positions.row_lengths()), tf.int32))
    elif length_bucket:
        # A row chooses max(1, round(n * rate)) of its n <= length - 1 tokens.
        length = tf.cast(tf.shape(token_ids)[1], tf.float32)
        slots = tf.minimum(slots, tf.cast(tf.math.ceil(length * pretrain_config.mask_rate), tf.int32))
    features = {
        "token_ids": token_ids,
        # A whole word beyond the slots is left unpredicted: cut here.
        "masked_positions": tf.cast(_to_slots(positions, slots), tf.int32),
    }
    weights = _to_slots(tf.ones_like(targets, tf.float32), slots)
    targets = tf.cast(_to_slots(targets, slots), tf.int32)
    if pretrain_config.sentence_order:
        return (
            features,
            {"masked_lm": targets, "sentence_order": swapped},
            {"masked_lm": weights, "sentence_order": order_weights},
        )
    return features, targets, weights


def _pad(ids, max_length, length_bucket):
    """Ragged ids to dense: to `max_length`, or with `length_bucket` to the
    longest row rounded up to a multiple of it (`max_length` at most)."""
    if not length_bucket:
        return ids.to_tensor(default_value=PAD_ID, shape=[None, max_length])
    longest = tf.reduce_max(ids.row_lengths())
    length = tf.minimum(-(-longest // length_bucket) * length_bucket, max_length)
    dense = ids.to_tensor(default_value=PAD_ID)
    return tf.pad(dense, [[0, 0], [0, length - tf.shape(dense, out_type=tf.int64)[1]]], constant_values=PAD_ID)


def _to_slots(values, slots):
    """Ragged `(batch, (chosen))` to dense `(batch, slots)`, zero-padded or cut."""
    if isinstance(slots, int):  # static, as TPUs need
        return values.to_tensor(shape=[None, slots])
    dense = values.to_tensor()[:, :slots]
    return tf.pad(dense, [[0, 0], [0, slots - tf.shape(dense)[1]]])


def masked_lm_dataset(
    sequences,
    vocabulary_size,
    max_length,
    global_batch_size,
    pretrain_config,
    seed,
    epoch=0,
    skip_batches=0,
    input_context=None,
    length_bucket=0,
    data_service="",
):
    """One epoch of masked batches of `sequences` (a `text_stream.Sequences`),
    shuffled by `(seed, epoch)`: a pass of a cached corpus, or steps of a
    stream without end.

    Steps are made as `pipeline.dataset.train_dataset` makes them: with
    `length_bucket`, the sequences of a step have similar lengths and its
    `token_ids` are cut to the longest (a dynamic length, which TPUs do not
    allow); each step is masked whole, then split among this host's
    replicas. A resumed run reads and masks again the `skip_batches` steps
    it skips, so it goes on with the steps an uninterrupted run takes.

    With `data_service` (a tf.data service dispatcher's address), its
    workers make the steps of a stream of files: the dispatcher hands the
    files out to them as they ask, so each pass reads every document once,
    in an order that depends on their speed; no step is skipped, as none
    would repeat, and the steps go on without end.
    """
    batch_size, step_size = batch_sizes(global_batch_size, input_context)
    epoch_seed = seed * 1000 + epoch
    dataset = shuffled_steps(
        sequences(input_context, epoch_seed),
        sequences.shuffle_buffer,
        step_size,
        epoch_seed,
        _sort_by_length if length_bucket else None,
    )
    # Mask whole steps: the ops are vectorized. Sequential, so the random
    # choices depend only on the seed and the step order; the skipped steps
    # are masked too, so a resumed run draws what an uninterrupted one would.
    mask = _traced_masking(vocabulary_size, max_length, dataclasses.astuple(pretrain_config), length_bucket)
    dataset = dataset.map(lambda word_ids: _with_step_size(mask(word_ids), step_size))
    if data_service:
        service = tf.data.experimental.service
        dataset = dataset.apply(service.distribute(service.ShardingPolicy.DYNAMIC, data_service)).repeat()
    else:
        dataset = dataset.skip(skip_batches)
    return replica_batches(dataset, batch_size, step_size)


def _sort_by_length(sequences):
    return tf.gather(sequences, tf.argsort(sequences.merge_dims(1, 2).row_lengths(), stable=True))


def _with_step_size(values, step_size):
    # Masking ragged rows loses the static batch dimension, which TPUs need.
    return tf.nest.map_structure(lambda value: tf.ensure_shape(value, [step_size, *value.shape[1:]]), values)


@functools.lru_cache(maxsize=16)
def _traced_masking(vocabulary_size, max_length, pretrain_settings, length_bucket):
    """`mask_tokens` traced once per settings, not at every epoch's dataset
    (about 0.4 s each). Each dataset still runs it on random kernels of its
    own, so an epoch's draws do not depend on the epochs run before it."""
    pretrain_config = PretrainConfig(*pretrain_settings)
    return tf.function(
        lambda word_ids: mask_tokens(word_ids, vocabulary_size, max_length, pretrain_config, length_bucket),
        autograph=False,
    )
