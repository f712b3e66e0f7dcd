"""Pre-training text streamed from files into packed sequences.

    files -> this input pipeline's files (or, when there are fewer files than
    pipelines, its share of each file's documents) -> read in turns: plain
    text by TensorFlow's reader, other formats by `readers.file_examples`,
    every row checked with file:line
    -> tokenized in batches by the tokenizer's tensorflow-text ops
    -> the lines of each document packed into sequences (`packing.pack`);
    a pair of texts (`data.text_pair_column`) into one, `[CLS] a [SEP] b`

Nothing here holds a large corpus or writes it into a tf.data graph, so
memory and the time to the first step do not grow with the corpus. Texts in
memory already (labelled texts, or a corpus no larger than the vocabulary's
sample of `data.sample_size` texts, read whole for it) are sliced from
memory, and their sequences cached after packing: every epoch only shuffles
them."""

import collections
import re
import weakref

import numpy as np
import tensorflow as tf

from pipeline.dataset import singles
from pipeline.packing import pack
from pipeline.readers import DataError, Examples, expand_paths, file_examples, file_format

# Rows per element the readers hand tf.data: tf.data's cost per element would
# dominate a row at a time, and the tokenizer's ops are vectorized.
READ_BATCH = 1024
# Files read at once by each input pipeline, so that a step mixes documents of several.
CYCLE_LENGTH = 4
# Sequences that stand for a stream's in its padding share.
LENGTHS_SAMPLE = 10_000
_PACKING = weakref.WeakKeyDictionary()  # tokenizer -> its traced `_packing` functions
# A reader's error reaches Python inside tf.data's own (InvalidArgumentError).
_DATA_ERROR = re.compile(r"DataError: (.*)")


class TextSource:
    """The pre-training texts of a run: `Examples` (in memory), files
    (streamed), or both (labelled texts and unlabelled files).

    `texts` is `Examples` or files (a path, glob or list of them); `files`
    more files besides them. A text is a string, or a pair of them where
    the data has a text pair column. `join_lines` packs the lines of a
    document together, a blank line ending each document (plain text files
    only); otherwise each line or row is a document. `skipped` counts the
    rows left out by reason with `skip_bad_rows` (a stream counts them as it
    reads them).
    """

    def __init__(self, texts, data_config=None, join_lines=False, files=None):
        self.examples = texts if isinstance(texts, Examples) else None
        paths = ([] if self.examples is not None else expand_paths(texts)) + (expand_paths(files) if files else [])
        self.files = paths or None
        self._bytes = {path: tf.io.gfile.stat(path).length for path in paths}  # read once: a bucket's are remote
        for path in paths:  # a stream might reach it only after hours
            if self._bytes[path] == 0:
                raise DataError(f"{path}: the file holds no examples")
        self.data_config, self.join_lines = data_config, join_lines
        self.skipped = collections.Counter(self.examples.skipped if self.examples else ())
        self._bytes_per_text = None  # of the files' texts, from the sample

    def sample(self, size, seed, keep=True):
        """`(texts, complete)`: the texts in memory (a draw of `size` where
        more), then the first texts of the files, in an order drawn with
        `seed`, up to `size` in all (a pair of texts counts as one); and
        whether that is every text, in which case they come in the corpus's
        order and, with `keep`, are kept in memory."""
        texts = []
        if self.examples is not None:
            texts = list(self.examples.texts)
            if len(texts) > size:
                chosen = np.sort(np.random.default_rng(seed).permutation(len(texts))[:size])
                return [texts[index] for index in chosen], False
            if self.files is None:
                return texts, True
        by_file, count = {}, len(texts)
        for index in np.random.default_rng(seed).permutation(len(self.files)):
            by_file[index] = []
            for text, _, _ in self._rows(self.files[index], collections.Counter()):
                if not text:  # a blank line between documents
                    continue
                if count == size:
                    return texts + self._measured([text for texts in by_file.values() for text in texts]), False
                by_file[index].append(text)
                count += 1
        texts += self._measured([text for index in sorted(by_file) for text in by_file[index]])
        if keep and not self.join_lines:  # read whole: kept, so that no pass reads the files again
            self.examples, self.files = in_memory(texts), None
        return texts, True

    def _measured(self, texts):
        # `texts` of the files, their mean size noted to estimate how many the files hold.
        self._bytes_per_text = sum(len(text.encode()) + 1 for text in singles(texts)) / max(1, len(texts))
        return texts

    def documents(self, input_context=None, seed=None):
        """`(texts, starts, seconds)` batches of this input pipeline's lines,
        `starts` true where a line starts a document, `seconds` a pair's
        second text ("" for a text alone). With `seed`, a pass after pass
        without end, each reading the files in a new order; otherwise one
        pass, in the corpus's order. Texts in memory beside files come in as
        many batches as the files' (estimated from the sample), drawn at
        random among them (without `seed`, by a fixed one)."""
        pipelines, pipeline = (
            (input_context.num_input_pipelines, input_context.input_pipeline_id) if input_context else (1, 0)
        )
        memory = None
        if self.examples is not None:
            # Texts in memory (labelled texts, or a corpus read whole for the sample), each a document.
            firsts, seconds = _columns(self.examples.texts)
            memory = tf.data.Dataset.from_tensor_slices((firsts, seconds)).shard(pipelines, pipeline)
        if not self.files:
            one_pass = _as_documents(memory.batch(READ_BATCH))
        elif memory is None:
            one_pass = self._file_pass(pipelines, pipeline, seed)[0]
        else:
            files, file_batches = self._file_pass(pipelines, pipeline, seed)
            if seed is not None:  # else the stream's shuffle buffer would keep them together
                memory = memory.shuffle(len(self.examples.texts), seed=seed, reshuffle_each_iteration=True)
            # As many batches of texts in memory as the files give, drawn at random among theirs.
            size = max(1, -(-len(self.examples.texts) // pipelines // file_batches))
            one_pass = tf.data.Dataset.sample_from_datasets(
                [_as_documents(memory.batch(size)), files],
                seed=0 if seed is None else seed,
                stop_on_empty_dataset=False,
            )
        return one_pass.repeat() if seed is not None else one_pass

    def _file_pass(self, pipelines, pipeline, seed):
        # One pass over this pipeline's files (with `seed`, in an order drawn
        # anew each pass), and about how many batches it gives.
        by_file = len(self.files) >= pipelines  # else every pipeline reads a share of each file
        files = self.files[pipeline::pipelines] if by_file else self.files
        share = (1, 0) if by_file else (pipelines, pipeline)
        native = not self.read_in_python(files)
        signature = (tf.TensorSpec([None], tf.string), tf.TensorSpec([None], tf.bool), tf.TensorSpec([None], tf.string))

        def read(path):
            if native:  # TensorFlow's reader alone: no Python in the input pipeline
                return _text_lines(path, *share, self.join_lines)
            return tf.data.Dataset.from_generator(
                self._batches, args=(path, *share), output_signature=signature
            ).prefetch(1)

        texts = [self._bytes[path] / share[0] / (self._bytes_per_text or 100) for path in files]
        batches = round(sum(max(1, count / READ_BATCH) for count in texts))
        dataset = tf.data.Dataset.from_tensor_slices(files)
        if seed is None:
            return dataset.interleave(read, cycle_length=1), batches
        dataset = dataset.shuffle(len(files), seed=seed, reshuffle_each_iteration=True)
        return dataset.interleave(
            read, cycle_length=min(CYCLE_LENGTH, len(files)), num_parallel_calls=tf.data.AUTOTUNE, deterministic=True
        ), batches

    def has_pairs(self):
        """Whether some texts are pairs: in memory, or rows of files with a
        text pair column (plain text has none)."""
        if self.examples is not None and any(isinstance(text, tuple) for text in self.examples.texts):
            return True
        return bool(self.data_config and self.data_config.text_pair_column) and any(
            file_format(path, self.data_config.file_format) != "text" for path in self.files or ()
        )

    def read_in_python(self, files=None):
        """The files (of `files`, by default all) that Python reads rather
        than TensorFlow's reader: rows of other formats than plain text, or
        every file where bad rows are skipped."""
        files = self.files if files is None else files
        return [
            path
            for path in files or ()
            if self.data_config.skip_bad_rows or file_format(path, self.data_config.file_format) != "text"
        ]

    def sequences(self, tokenizer, input_context=None, seed=None):
        """`documents` tokenized and packed: one `(words, pieces)` int32
        sequence of at most `tokenizer.max_length` tokens per element."""
        # In order: the random draws after it depend on the order of what it gives.
        return (
            self.documents(input_context, seed)
            .map(
                _packing(tokenizer, self.join_lines, self.has_pairs()),
                num_parallel_calls=tf.data.AUTOTUNE,
                deterministic=True,
            )
            .unbatch()
        )

    def _rows(self, path, skipped):
        # `(text, label, source)` of a file's rows; a text is a pair of texts
        # where the data has a text pair column (plain text has none).
        plain = file_format(path, self.data_config.file_format) == "text"
        columns = self.data_config.text_column if plain else self.data_config.text_columns
        return file_examples(
            path,
            columns,
            None,
            self.data_config.file_format,
            skipped if self.data_config.skip_bad_rows else None,
            blank_lines=self.join_lines,
        )

    def _batches(self, path, pipelines, pipeline):
        # One file's lines in batches; a blank line ends a document. With
        # several pipelines reading one file, each takes every pipelines-th document.
        texts, starts, document, start = [], [], -1, True
        for text, _, _ in self._rows(path.decode(), self.skipped):
            if not text:
                start = True
                continue
            if start or not self.join_lines:
                document += 1
            if document % pipelines == pipeline:
                texts.append(text)
                starts.append(start or not self.join_lines)
            start = False
            if len(texts) == READ_BATCH:
                yield _batch(texts, starts)
                texts, starts = [], []
        if texts:
            yield _batch(texts, starts)


def _columns(texts):
    # `(firsts, seconds)` of texts and pairs of texts, "" the second of a text alone.
    pairs = [text if isinstance(text, tuple) else (text, "") for text in texts]
    return [a for a, _ in pairs], [b for _, b in pairs]


def _batch(texts, starts):
    # A `documents` batch of rows read by Python.
    firsts, seconds = _columns(texts)
    return np.array(firsts, dtype=object), np.array(starts), np.array(seconds, dtype=object)


def _as_documents(batches):
    # `documents` batches of `(firsts, seconds)` that are each a document.
    return batches.map(lambda firsts, seconds: (firsts, tf.ones_like(firsts, tf.bool), seconds))


def _text_lines(path, pipelines, pipeline, join_lines):
    """`(texts, starts, seconds)` batches of one plain text file, as `TextSource._batches`
    gives them, read and checked by TensorFlow's ops: a line that is not
    UTF-8 stops the stream naming the file and line."""

    def check(state, lines):
        first_line, after_blank, documents = state  # line number, whether the line before was blank, documents begun
        blank = tf.strings.length(tf.strings.strip(lines)) == 0
        before = tf.concat([[after_blank], blank[:-1]], axis=0)
        starts = ~blank & (before | (not join_lines))
        document = documents + tf.cumsum(tf.cast(starts, tf.int64)) - 1
        keep = ~blank & (document % pipelines == pipeline)
        # Undecodable bytes are dropped by errors="ignore": such a line comes back shorter.
        decoded = tf.strings.unicode_encode(tf.strings.unicode_decode(lines, "UTF-8", errors="ignore"), "UTF-8")
        bad = tf.strings.length(decoded) != tf.strings.length(lines)
        first_bad = tf.argmax(tf.cast(bad, tf.int32))
        where = tf.strings.as_string(first_line + tf.cast(first_bad, tf.int64))
        # The message must decode: the bad bytes show as U+FFFD.
        shown = tf.strings.unicode_transcode(lines[first_bad], "UTF-8", "UTF-8", errors="replace")
        message = tf.strings.join(
            ["DataError: ", path, ":", where, ": bytes that are not UTF-8 (shown as \ufffd): text=", shown]
        )
        with tf.control_dependencies([tf.debugging.Assert(~tf.reduce_any(bad), [message])]):
            texts = tf.boolean_mask(lines, keep)
        state = (first_line + tf.size(lines, tf.int64), blank[-1], documents + tf.reduce_sum(tf.cast(starts, tf.int64)))
        return state, (texts, tf.boolean_mask(starts, keep), tf.fill(tf.shape(texts), ""))

    initial = (tf.constant(1, tf.int64), tf.constant(True), tf.constant(0, tf.int64))
    return tf.data.TextLineDataset(path).batch(READ_BATCH).scan(initial, check)


def _packing(tokenizer, join_lines, pairs):
    # Tokenizing and packing as a tf.function traced once per tokenizer and
    # settings, not at every dataset made of them (about a second each).
    # Without `pairs` the second texts are not read: a tf.cond choosing by
    # batch made a stream of texts alone pack at half the speed.
    by_settings = _PACKING.setdefault(tokenizer, {})
    key = (tuple(sorted(tokenizer.settings.items())), join_lines, pairs)
    if key not in by_settings:
        owner, max_length = weakref.ref(tokenizer), tokenizer.max_length  # the cache must not keep its key alive
        strings, flags = tf.TensorSpec([None], tf.string), tf.TensorSpec([None], tf.bool)

        def packing(texts, starts, seconds):
            second = owner().word_pieces(seconds) if pairs else None
            return pack(owner().word_pieces(texts), starts, max_length, join_lines, second)

        by_settings[key] = tf.function(packing, autograph=False, input_signature=[strings, flags, strings])
    return by_settings[key]


def raising_data_errors(function, *args, **kwargs):
    """`function(*args, **kwargs)`, a reader's `DataError` raised inside
    tf.data raised again as itself, naming the file, line and value."""
    try:
        return function(*args, **kwargs)
    except tf.errors.InvalidArgumentError as error:
        match = _DATA_ERROR.search(error.message)
        if match is None:
            raise
        # An assertion in the graph prints its message in brackets.
        message = match[1][:-1] if "assertion failed: [" in error.message else match[1]
        raise DataError(message) from None


class Sequences:
    """The packed sequences of a `TextSource`, as `masking.masked_lm_dataset` takes them.

    With `cached` (a corpus read whole for its sample), one pass of them,
    cached after packing and shuffled whole every epoch; otherwise a stream
    without end, each pass over the files in another order, shuffled in a
    buffer of `shuffle_buffer` sequences.
    """

    def __init__(self, source, tokenizer, cached=True, shuffle_buffer=0):
        self.source, self.tokenizer, self.cached = source, tokenizer, cached
        self._shuffle_buffer, self._passes = shuffle_buffer, {}

    def __call__(self, input_context=None, seed=None):
        """This input pipeline's sequences; `seed` orders the files of a stream."""
        if not self.cached:
            return self.source.sequences(self.tokenizer, input_context, seed)
        key = (input_context.num_input_pipelines, input_context.input_pipeline_id) if input_context else (1, 0)
        if key not in self._passes:
            self._passes[key] = self.source.sequences(self.tokenizer, input_context).cache()
        return self._passes[key]

    @property
    def shuffle_buffer(self):
        # A cached corpus is shuffled whole: its count is more than any pipeline's share.
        return self.count if self.cached else self._shuffle_buffer

    @property
    def count(self):
        """Sequences in one pass, counted once: from `lengths` where cached,
        else by reading the whole stream (holding one batch of lengths at a time)."""
        if "count" not in self._passes:
            if self.cached:
                self._passes["count"] = len(self.lengths())
            else:
                self._passes["count"] = sum(len(batch) for batch in _lengths(self.source.sequences(self.tokenizer)))
        return self._passes["count"]

    def lengths(self):
        """Tokens of every sequence of one pass, [CLS] included: of the whole
        corpus where cached (filling the cache), else of the stream's first `LENGTHS_SAMPLE`."""
        if "lengths" not in self._passes:
            sequences = self() if self.cached else self.source.sequences(self.tokenizer).take(LENGTHS_SAMPLE)
            self._passes["lengths"] = np.concatenate([np.zeros(0, np.int64), *_lengths(sequences)])
        return self._passes["lengths"]


def _lengths(sequences):
    # Each batch of sequences' token counts, as NumPy arrays.
    return sequences.batch(4096).map(lambda batch: batch.merge_dims(1, 2).row_lengths()).as_numpy_iterator()


def in_memory(texts):
    """`Examples` of unlabelled texts (or pairs of texts), for a `TextSource`."""
    return Examples(list(texts), [""] * len(texts), [f"text {index}" for index in range(len(texts))], {})


def sequences_of(texts, tokenizer):
    """The cached `Sequences` of texts (or pairs of texts) in memory, each a document."""
    return Sequences(TextSource(in_memory(texts)), tokenizer)
