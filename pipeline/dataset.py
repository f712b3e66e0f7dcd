"""tf.data pipelines from validated examples to static-shape TPU batches.

Corpora are read and validated on the host once (see `readers`), tokenized
once with tensorflow-text ops in parallel batches, and kept as int32 arrays:
every epoch after that only shuffles and slices, so the input never bounds
training. Training batches drop the remainder (a static batch dimension) and,
off TPUs, group texts of similar length and cut the common padding; evaluation
pads the last batch with zero-weight examples so every example counts once.
"""

import collections
import dataclasses
import functools

import numpy as np
import tensorflow as tf

from pipeline.labels import output_names, strata, targets
from pipeline.readers import Examples, read_examples
from pipeline.tokenizer import CLS_ID, LONGEST, PAD_ID, UNK_ID, Tokenizer, mostly_chinese

TOKENIZE_BATCH = 1024
# Seed of the held-out draw (`hold_out`): fixed, not train.seed, so a run's
# ensemble members (seeds seed, seed + 1, ...) and its resumes share one slice.
HOLD_OUT_SEED = 0
# Length bucketing sorts windows of this many batches by length.
LENGTH_WINDOW_BATCHES = 64


@dataclasses.dataclass
class Split:
    ids: np.ndarray  # (examples, max_length) int32
    labels: np.ndarray  # (examples,) int32 class ids or float32 scores; (examples, labels) float32 indicators
    sources: list  # "file:line" of each example
    skipped: dict  # reason -> rows skipped

    def __len__(self):
        return len(self.labels)


def tokenize(tokenizer, texts):
    """int32 ids `(len(texts), max_length)` of a list of strings (or of pairs
    of strings, packed by `Tokenizer.pair`)."""
    if not texts:
        return np.zeros((0, tokenizer.max_length), "int32")
    # The tokenizer's arguments: the texts, or a pair's first and second texts.
    columns = tuple(map(list, zip(*texts))) if is_pairs(texts) else (texts,)
    traced = tokenizer.traced(pairs=len(columns) == 2)
    if len(texts) <= TOKENIZE_BATCH:  # one call: a tf.data pipeline would take 0.2-0.4 s to start
        return traced(*columns).numpy()
    return np.concatenate(list(in_batches(columns, traced).as_numpy_iterator()))


def is_pairs(texts):
    """Whether `texts` (a non-empty list) are pairs of texts."""
    return isinstance(texts[0], tuple)


def singles(texts):
    """Every text of `texts` (strings, pairs of them, or both), each of a pair's two in turn."""
    return [text for row in texts for text in (row if isinstance(row, tuple) else (row,))]


def in_batches(columns, function):
    """`function` of one `[None]` string tensor per column of `columns`
    (lists of strings, of one length), in parallel batches, in order."""
    return (
        tf.data.Dataset.from_tensor_slices(columns)
        .batch(TOKENIZE_BATCH)  # batch first: the tokenizer ops are vectorized
        .map(function, num_parallel_calls=tf.data.AUTOTUNE, deterministic=True)
    )


def read_split(paths, data_config):
    """The validated examples of `paths` (see `readers.read_examples`)."""
    return read_examples(
        paths,
        data_config.text_columns,
        data_config.label_column,
        data_config.file_format,
        data_config.skip_bad_rows,
        data_config.label_delimiter if data_config.task == "multi_label" else None,
    )


def load_split(paths, data_config, tokenizer, names):
    """Reads (unless given `Examples`), validates and tokenizes one split."""
    examples = read_split(paths, data_config)
    labels = targets(examples, names, data_config)
    return Split(tokenize(tokenizer, examples.texts), labels, examples.sources, dict(examples.skipped))


def concatenate(splits):
    """One split of the examples of `splits`, in order: what `load_split`
    gives for all their files in one list."""
    skipped = collections.Counter()
    for split in splits:
        skipped.update(split.skipped)
    return Split(
        np.concatenate([split.ids for split in splits]),
        np.concatenate([split.labels for split in splits]),
        [source for split in splits for source in split.sources],
        dict(skipped),
    )


def hold_out(examples, fraction, seed=HOLD_OUT_SEED, data_config=None):
    """`(kept, held_out)`: `Examples` of `fraction` of each label's distinct
    texts, drawn at random with `seed`, and of the rest, each in file order.

    Every copy of a drawn text is held out with it, so the held-out score
    never rewards recalling a training text; a text given two labels stays
    in training. Every label keeps at least one text; the rows the reader
    skipped are counted with the kept ones. A draw that holds out nothing is
    an error. Under `data_config`'s `data.task` regression, each score
    decile stands for a label (`labels.strata`).
    """
    stratum = _objects(strata(examples, data_config) if data_config else examples.labels)
    rows = collections.defaultdict(list)
    for index, text in enumerate(examples.texts):
        rows[text].append(index)
    labels = _objects(examples.labels)
    single = [group for group in rows.values() if len(set(labels[group])) == 1]
    first = np.array([group[0] for group in single], dtype=np.int64)
    rng = np.random.default_rng(seed)
    chosen = np.zeros(len(labels), bool)
    for value in sorted(set(stratum)):
        groups = np.flatnonzero(stratum[first] == value)
        count = min(round(fraction * len(groups)), len(groups) - 1)
        for group in rng.permutation(groups)[:count]:
            chosen[single[group]] = True
    if not chosen.any():
        raise ValueError(
            f"train.validation_split {fraction} of {len(labels)} training examples holds out none: "
            "give more examples or a larger split, or set train.validation_split 0 to keep the best "
            "epoch on the evaluation files"
        )

    def part(mask, skipped):
        return Examples(
            *(
                [value for value, keep in zip(values, mask) if keep]
                for values in (examples.texts, examples.labels, examples.sources)
            ),
            skipped,
        )

    return part(~chosen, collections.Counter(examples.skipped)), part(chosen, collections.Counter())


def _objects(values):
    # A 1-D object array, even of equal-length tuples (a multi-label task's labels).
    array = np.empty(len(values), dtype=object)
    for index, value in enumerate(values):
        array[index] = value
    return array


def learn_vocabulary(paths, data_config, max_length, reuse=None, texts=None):
    """Learns the label set (`labels.output_names`) and tokenizer from the training files (or `Examples`).

    With `reuse` (a `Tokenizer`, e.g. of a pre-trained run) its vocabulary
    and settings are kept and only `max_length` is set (0: derived from the
    training texts). With `texts`, the vocabulary is learned from them
    instead of the training texts (`max_length` still fits the training texts).
    """
    examples = read_split(paths, data_config)
    names = output_names(examples.labels, data_config)
    if reuse is not None:
        tokenizer = Tokenizer(reuse.vocabulary, **{**reuse.settings, "max_length": max_length or LONGEST})
        if not max_length:
            tokenizer.settings["max_length"] = tokenizer.fitting_length(examples.texts)
        return names, tokenizer
    texts = examples.texts if texts is None else texts
    return names, learn_tokenizer(texts, data_config, max_length, length_texts=examples.texts)


def learn_tokenizer(texts, data_config, max_length, length_texts=None):
    """A tokenizer learned from `texts` with the data config's settings; a
    `max_length` of 0 is derived from `length_texts` (by default `texts`):
    the texts classified, where the vocabulary learns from more."""
    chinese_words = data_config.chinese_words
    length_texts = texts if length_texts is None else length_texts
    texts = singles(texts)
    tokenizer = Tokenizer.learn(
        texts,
        kind=data_config.tokenizer,
        vocabulary_size=data_config.vocabulary_size,
        min_count=data_config.min_count,
        max_length=max_length or LONGEST,
        lower_case=data_config.lower_case,
        normalization_form=data_config.normalization_form,
        chinese_words=chinese_words == "on" or (chinese_words == "auto" and mostly_chinese(texts)),
    )
    if not max_length:
        tokenizer.settings["max_length"] = tokenizer.fitting_length(length_texts)
    return tokenizer


def resolved_chinese_words(tokenizer):
    """`data.chinese_words` as `tokenizer` resolved it: "on" or "off"."""
    return "on" if tokenizer.settings["chinese_words"] else "off"


def train_dataset(
    split, global_batch_size, seed, epoch=0, skip_batches=0, input_context=None, length_bucket=0, token_dropout=0.0
):
    """One epoch of shuffled `(ids, labels)` batches, `(batch, max_length)`.

    The shuffle order depends only on `(seed, epoch)`, so a resumed run skips
    `skip_batches` steps and sees exactly the batches it would have seen.
    With `length_bucket`, each step's batch holds examples of similar length
    and is cut to its longest one rounded up to a multiple of
    `length_bucket`: the length dimension is then dynamic, which TPUs do not
    allow. With `token_dropout`, that fraction of real tokens ([CLS]
    excepted) becomes [UNK], drawn from `(seed, epoch, step)` alone. Batches
    are per replica under `input_context`.
    """
    dataset = tf.data.Dataset.from_tensor_slices((split.ids, split.labels))
    batch_size, step_size, dataset = per_pipeline(dataset, global_batch_size, input_context)
    epoch_seed = seed * 1000 + epoch  # every draw of the epoch derives from it
    dataset = shuffled_steps(dataset, len(split), step_size, epoch_seed, _sort_by_length if length_bucket else None)
    if length_bucket:
        dataset = dataset.map(functools.partial(_cut_padding, length_bucket=length_bucket))
    if token_dropout:
        pipeline = input_context.input_pipeline_id if input_context else 0
        dataset = dataset.enumerate().map(
            functools.partial(_drop_tokens, rate=token_dropout, seed=epoch_seed * 1000 + pipeline)
        )
    return replica_batches(dataset.skip(skip_batches), batch_size, step_size)


def shuffled_steps(dataset, count, step_size, epoch_seed, sort_window=None):
    """`dataset` (this host's examples, `count` of them or fewer) shuffled
    by `epoch_seed` into batches of one step's examples on this host.

    With `sort_window` (a function sorting a batch of examples by length),
    windows of `LENGTH_WINDOW_BATCHES` steps are sorted by length before
    batching, so steps cut to their longest example need little padding,
    and the steps are shuffled again within `LENGTH_WINDOW_BATCHES`.
    """
    # Whole-corpus buffer: the examples are in memory already.
    dataset = dataset.shuffle(count, seed=epoch_seed, reshuffle_each_iteration=False)
    if sort_window:
        # Any example can still meet any other: the windows are shuffled.
        dataset = dataset.batch(LENGTH_WINDOW_BATCHES * step_size).map(sort_window).unbatch()
    # Dropping the remainder keeps the batch dimension static, as TPUs need.
    dataset = dataset.batch(step_size, drop_remainder=True)
    if sort_window:
        # Short and long steps interleave instead of coming in sorted runs.
        dataset = dataset.shuffle(LENGTH_WINDOW_BATCHES, seed=epoch_seed, reshuffle_each_iteration=False)
    return dataset


def replica_batches(steps, batch_size, step_size):
    """Steps split into batches of one replica, in turn; cut or masked as a
    whole step first, the replicas of a step get the same length."""
    if batch_size != step_size:
        steps = steps.unbatch().batch(batch_size, drop_remainder=True)
    return steps.prefetch(tf.data.AUTOTUNE)


def usable_length_bucket(config, strategy):
    """`train.length_bucket`, or 0 under a TPU: TPUs need static shapes, so
    their batches keep `max_length`."""
    return 0 if isinstance(strategy, tf.distribute.TPUStrategy) else config.train.length_bucket


def _lengths(ids):
    # Position after the last real token; padding (id 0) only trails.
    positions = tf.range(1, tf.shape(ids)[1] + 1)
    return tf.reduce_max(tf.where(ids != 0, positions, 0), axis=1)


def _sort_by_length(ids, labels):
    order = tf.argsort(_lengths(ids), stable=True)
    return tf.gather(ids, order), tf.gather(labels, order)


def _cut_padding(ids, labels, length_bucket):
    # To the longest row, rounded up to a multiple of `length_bucket`.
    longest = tf.reduce_max(_lengths(ids))
    keep = tf.minimum(-(-longest // length_bucket) * length_bucket, tf.shape(ids)[1])
    return ids[:, :keep], labels


def _drop_tokens(step, batch, rate, seed):
    ids, labels = batch
    noise = tf.random.stateless_uniform(tf.shape(ids), seed=tf.stack([tf.constant(seed, tf.int64), step]))
    drop = (noise < rate) & (ids != PAD_ID) & (ids != CLS_ID)
    return tf.where(drop, UNK_ID, ids), labels


def eval_dataset(split, global_batch_size, input_context=None):
    """`(ids, labels, weights)` batches covering every example exactly once.

    The split is padded to a whole number of global batches with all-padding
    examples of weight 0, as ALBERT does on TPUs, so no example is dropped
    and the shapes stay static.
    """
    padding = -len(split) % global_batch_size
    ids = np.concatenate([split.ids, np.zeros((padding, split.ids.shape[1]), "int32")])
    labels = np.concatenate([split.labels, np.zeros((padding, *split.labels.shape[1:]), split.labels.dtype)])
    weights = np.concatenate([np.ones(len(split), "float32"), np.zeros(padding, "float32")])
    dataset = tf.data.Dataset.from_tensor_slices((ids, labels, weights))
    batch_size, _, dataset = per_pipeline(dataset, global_batch_size, input_context)
    return dataset.batch(batch_size, drop_remainder=True).prefetch(tf.data.AUTOTUNE)


def distribute(strategy, make_dataset, *args, **kwargs):
    """`make_dataset(*args, input_context=..., **kwargs)` on every input pipeline."""
    return strategy.distribute_datasets_from_function(
        lambda context: make_dataset(*args, input_context=context, **kwargs)
    )


def per_pipeline(dataset, global_batch_size, input_context):
    """`(replica batch size, this host's step size, this host's shard of dataset)`."""
    if input_context is not None and input_context.num_input_pipelines > 1:  # one shard per host
        dataset = dataset.shard(input_context.num_input_pipelines, input_context.input_pipeline_id)
    return (*batch_sizes(global_batch_size, input_context), dataset)


def batch_sizes(global_batch_size, input_context):
    """`(replica batch size, this host's step size)`."""
    if input_context is None:
        return global_batch_size, global_batch_size
    if global_batch_size % input_context.num_replicas_in_sync:
        raise ValueError(
            f"batch size {global_batch_size} does not divide evenly among {input_context.num_replicas_in_sync} replicas"
        )
    return (
        input_context.get_per_replica_batch_size(global_batch_size),
        global_batch_size // input_context.num_input_pipelines,
    )
