"""tf.data pipelines from validated examples to static-shape TPU batches.

Corpora are read and validated on the host once (see `readers`), tokenized
once with tensorflow-text ops in parallel batches, and kept as int32 arrays:
every epoch after that only shuffles and slices, so the input never bounds
training. Training batches drop the remainder (static shapes); evaluation
pads the last batch with zero-weight examples so every example counts once.
"""

import dataclasses

import numpy as np
import tensorflow as tf

from pipeline.labels import encode_labels, label_names
from pipeline.readers import Examples, read_examples
from pipeline.tokenizer import LONGEST, Tokenizer

TOKENIZE_BATCH = 1024


@dataclasses.dataclass
class Split:
    ids: np.ndarray  # (examples, max_length) int32
    labels: np.ndarray  # (examples,) int32
    sources: list  # "file:line" of each example
    skipped: dict  # reason -> rows skipped

    def __len__(self):
        return len(self.labels)


def tokenize(tokenizer, texts):
    """int32 ids `(len(texts), max_length)` of a list of strings."""
    if not texts:
        return np.zeros((0, tokenizer.max_length), "int32")
    dataset = (
        tf.data.Dataset.from_tensor_slices(texts)
        .batch(TOKENIZE_BATCH)  # batch first: the tokenizer ops are vectorized
        .map(tokenizer, num_parallel_calls=tf.data.AUTOTUNE, deterministic=True)
    )
    return np.concatenate(list(dataset.as_numpy_iterator()))


def read_split(paths, data_config):
    """The validated examples of `paths` (see `readers.read_examples`)."""
    if isinstance(paths, Examples):
        return paths
    return read_examples(paths, data_config.text_column, data_config.label_column,
                         data_config.file_format, data_config.skip_bad_rows)


def load_split(paths, data_config, tokenizer, names):
    """Reads (unless given `Examples`), validates and tokenizes one split."""
    examples = read_split(paths, data_config)
    labels = encode_labels(examples, names, data_config.skip_bad_rows)
    return Split(tokenize(tokenizer, examples.texts), labels, examples.sources,
                 dict(examples.skipped))


def learn_vocabulary(paths, data_config, max_length, reuse=None):
    """Learns the label set and tokenizer from the training files (or `Examples`).

    With `reuse` (a `Tokenizer`, e.g. of a pre-trained run) its vocabulary
    and settings are kept and only `max_length` is set (0: derived from the
    training texts).
    """
    examples = read_split(paths, data_config)
    if reuse is not None:
        tokenizer = Tokenizer(reuse.vocabulary, **{**reuse.settings, "max_length": max_length or LONGEST})
        if not max_length:
            tokenizer.settings["max_length"] = tokenizer.fitting_length(examples.texts)
        return label_names(examples.labels), tokenizer
    return label_names(examples.labels), learn_tokenizer(examples.texts, data_config, max_length)


def learn_tokenizer(texts, data_config, max_length):
    """A tokenizer learned from `texts` with the data config's settings."""
    return Tokenizer.learn(
        texts, kind=data_config.tokenizer,
        vocabulary_size=data_config.vocabulary_size, min_count=data_config.min_count,
        max_length=max_length, lower_case=data_config.lower_case,
        normalization_form=data_config.normalization_form)


def train_dataset(split, global_batch_size, seed, epoch=0, skip_batches=0,
                  input_context=None):
    """One epoch of shuffled `(ids, labels)` batches, `(batch, max_length)`.

    The shuffle order depends only on `(seed, epoch)`, so a resumed run skips
    `skip_batches` and sees exactly the batches it would have seen.
    """
    batch_size, dataset = _per_pipeline(split.ids, split.labels, global_batch_size, input_context)
    return (
        dataset
        # Whole-corpus buffer: the arrays are in memory already.
        .shuffle(len(split), seed=seed * 1000 + epoch, reshuffle_each_iteration=False)
        # Dropping the remainder makes every shape static, as TPUs need.
        .batch(batch_size, drop_remainder=True)
        .skip(skip_batches)
        .prefetch(tf.data.AUTOTUNE)
    )


def eval_dataset(split, global_batch_size, input_context=None):
    """`(ids, labels, weights)` batches covering every example exactly once.

    The split is padded to a whole number of global batches with all-padding
    examples of weight 0, as ALBERT does on TPUs, so no example is dropped
    and the shapes stay static.
    """
    padding = -len(split) % global_batch_size
    ids = np.concatenate([split.ids, np.zeros((padding, split.ids.shape[1]), "int32")])
    labels = np.concatenate([split.labels, np.zeros(padding, "int32")])
    weights = np.concatenate([np.ones(len(split), "float32"), np.zeros(padding, "float32")])
    batch_size, dataset = _per_pipeline(ids, (labels, weights), global_batch_size, input_context)
    dataset = dataset.map(lambda x, y: (x, y[0], y[1]))
    return dataset.batch(batch_size, drop_remainder=True).prefetch(tf.data.AUTOTUNE)


def distribute(strategy, make_dataset, *args, **kwargs):
    """`make_dataset(*args, input_context=..., **kwargs)` on every input pipeline."""
    return strategy.distribute_datasets_from_function(
        lambda context: make_dataset(*args, input_context=context, **kwargs))


def _per_pipeline(ids, labels, global_batch_size, input_context):
    dataset = tf.data.Dataset.from_tensor_slices((ids, labels))
    if input_context is None:
        return global_batch_size, dataset
    if global_batch_size % input_context.num_replicas_in_sync:
        raise ValueError(
            f"batch size {global_batch_size} does not divide evenly among "
            f"{input_context.num_replicas_in_sync} replicas")
    if input_context.num_input_pipelines > 1:  # one shard per host
        dataset = dataset.shard(input_context.num_input_pipelines,
                                input_context.input_pipeline_id)
    return input_context.get_per_replica_batch_size(global_batch_size), dataset
