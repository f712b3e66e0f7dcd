"""Tokenization with tensorflow-text ops, the same in training and serving.

Text is repaired (invalid UTF-8 becomes U+FFFD), Unicode-normalized,
optionally case-folded, and split on whitespace, punctuation and between
Chinese/Japanese/Korean ideographs and symbols such as emoji (tensorflow-
text's BERT pre-tokenizer).
With `chinese_words`, a run of Chinese characters is one pre-token instead,
cut into the longest words of the vocabulary, left to right (the words
jieba found in the training texts; a character is the fallback). The words
are then looked up whole (word vocabulary, as the source design) or split
into WordPiece units. Every sequence starts with [CLS] and is truncated and
zero-padded to `max_length`; a pair of texts is packed as `[CLS] a [SEP] b
[SEP]`, the longer one cut first (`Tokenizer.pair`).
"""

import collections
import json
import logging
import os
import re
import weakref

import numpy as np
import tensorflow as tf
import tensorflow_text as tf_text
from tensorflow_text.python.ops.bert_tokenizer import BasicTokenizer

from pipeline import wordpiece_learner
from pipeline.config import DataConfig
from pipeline.files import atomic_write, create, open_text
from pipeline.layout import TOKENIZER_FILE, VOCABULARY_FILE

_DEFAULTS = DataConfig()  # the data section's defaults are the tokenizer's

RESERVED_TOKENS = ("[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]")
PAD_ID, UNK_ID, CLS_ID, SEP_ID, MASK_ID = range(len(RESERVED_TOKENS))
KINDS = ("wordpiece", "word")
LONGEST = 512  # the cap of a max_length derived from the data

# Chinese characters of the Basic Multilingual Plane (CJK Unified Ideographs,
# Extension A, Compatibility), as character-class ranges for re and RE2; the
# rarer planes stay one token per character, as in BERT.
HAN_RANGES = ((0x3400, 0x4DBF), (0x4E00, 0x9FFF), (0xF900, 0xFAFF))
_HAN_CLASS = "".join(f"\\x{{{low:04X}}}-\\x{{{high:04X}}}" for low, high in HAN_RANGES)
_HAN_RUN = f"[{_HAN_CLASS}]+"
_HAN_PYTHON = re.compile("[" + "".join(f"{chr(low)}-{chr(high)}" for low, high in HAN_RANGES) + "]+")
# tensorflow-text's BERT pre-tokenizer (bert_tokenizer._DELIM_REGEX) with a
# run of those characters kept as one delimiter instead of each alone.
_PUNCTUATION = r"[!-/]|[:-@]|[\[-`]|[{-~]|[\p{P}]"
_RARE_HAN = "|".join(
    r"[\x{%X}-\x{%X}]" % bounds
    for bounds in ((0x20000, 0x2A6DF), (0x2A700, 0x2B73F), (0x2B740, 0x2B81F), (0x2B820, 0x2CEAF), (0x2F800, 0x2FA1F))
)
_KEEP_RUNS = f"{_PUNCTUATION}|{_HAN_RUN}|{_RARE_HAN}"

# Each tokenizer's `__call__` traced once per settings (`max_length` may be
# set after construction) rather than once per split, without AutoGraph
# (the tokenizer needs none, and converting it was most of a trace's time).
# Kept outside the module, out of its exported state.
_TRACED = weakref.WeakKeyDictionary()


def one_word(token_id, rows):
    """`token_id` as a one-piece word in each of `rows` rows: `(rows, (1), (1))` int32."""
    ones = tf.ones([rows], tf.int64)
    return tf.RaggedTensor.from_row_lengths(
        tf.RaggedTensor.from_row_lengths(tf.fill([rows], tf.constant(token_id, tf.int32)), ones), ones
    )


def first_words(word_ids, pieces):
    """The leading whole words of each row of `(batch, (words), (pieces))` ids
    that fit in `pieces` pieces."""
    lengths = word_ids.row_lengths(axis=2)  # pieces per word, (batch, (words))
    ends = tf.cumsum(lengths.to_tensor(), axis=1)
    fits = tf.RaggedTensor.from_tensor(ends <= pieces, lengths=lengths.row_lengths())
    return tf.ragged.boolean_mask(word_ids, fits)


def count_words(
    texts, lower_case=_DEFAULTS.lower_case, normalization_form=_DEFAULTS.normalization_form, chinese_words=None
):
    """`{word: count}` of `texts` (a list of strings), split as `Tokenizer.words`
    splits them; `chinese_words`: the Chinese words to cut runs into, if any."""
    vocabulary = list(RESERVED_TOKENS) + list(chinese_words or [])
    probe = Tokenizer(vocabulary, "word", LONGEST, lower_case, normalization_form, chinese_words is not None)
    counts = collections.Counter()
    for batch in tf.data.Dataset.from_tensor_slices(texts).batch(4096):
        counts.update(probe.words(batch).flat_values.numpy())
    return {word.decode("utf-8"): count for word, count in counts.items()}


def mostly_chinese(texts):
    """Whether Chinese characters are at least half of the letters of `texts`."""
    letters = han = 0
    for text in texts:
        letters += sum(character.isalpha() for character in text)
        han += sum(map(len, _HAN_PYTHON.findall(text)))
    return han >= 0.5 * max(letters, 1)


def learn_chinese_words(texts, min_count):
    """The words of two or more Chinese characters that jieba finds in the runs
    of `texts` (normalized strings) at least `min_count` times, most frequent first."""
    import jieba  # only needed to learn a vocabulary; serving cuts runs with the vocabulary alone

    jieba.setLogLevel(logging.WARNING)
    counts = collections.Counter(
        word for text in texts for run in _HAN_PYTHON.findall(text) for word in jieba.lcut(run) if len(word) > 1
    )
    return sorted((w for w, c in counts.items() if c >= max(1, min_count)), key=lambda w: (-counts[w], w))


def _is_chinese_word(token):
    return len(token) > 1 and _HAN_PYTHON.fullmatch(token) is not None


def wordpiece_vocabulary(counts, vocabulary_size, min_count, learn=wordpiece_learner.learn):
    """The WordPiece vocabulary of word `counts`, reserved tokens first.

    `learn`: the learner (tensorflow-text's `wordpiece_tokenizer_learner_lib.learn`
    takes the same arguments and returns the same vocabulary, more slowly).
    """
    learned = learn(
        counts, vocabulary_size, list(RESERVED_TOKENS), lower_thresh=max(1, min_count), max_unique_chars=vocabulary_size
    )
    return list(RESERVED_TOKENS) + [t for t in learned if t not in RESERVED_TOKENS]


class Tokenizer(tf.Module):
    """Maps a batch of strings to int32 ids `(batch, max_length)`.

    A `tf.Module`, so the exported SavedModel carries the vocabulary and the
    same ops. Build one from a corpus with `Tokenizer.learn`, or from a
    directory with `Tokenizer.load`.
    """

    def __init__(
        self,
        vocabulary,
        kind=_DEFAULTS.tokenizer,
        max_length=128,
        lower_case=_DEFAULTS.lower_case,
        normalization_form=_DEFAULTS.normalization_form,
        chinese_words=False,
    ):
        super().__init__(name="tokenizer")
        if kind not in KINDS:
            raise ValueError(f"tokenizer must be one of {KINDS}, got {kind!r}")
        if tuple(vocabulary[: len(RESERVED_TOKENS)]) != RESERVED_TOKENS:
            raise ValueError(f"vocabulary must start with {RESERVED_TOKENS}")
        self.vocabulary = list(vocabulary)
        self.settings = {
            "kind": kind,
            "max_length": int(max_length),
            "lower_case": bool(lower_case),
            "normalization_form": normalization_form or "",
            "chinese_words": bool(chinese_words),
        }
        self._words = BasicTokenizer(lower_case=False)
        if chinese_words:
            # Every character of the ranges is a unit, so that any run can be cut.
            units = ["[UNK]"] + [t for t in self.vocabulary if _is_chinese_word(t)]
            units += [chr(c) for low, high in HAN_RANGES for c in range(low, high + 1)]
            self._runs = tf_text.FastWordpieceTokenizer(
                units,
                suffix_indicator="",
                max_bytes_per_word=1 << 30,
                token_out_type=tf.string,
                unknown_token="[UNK]",
                no_pretokenization=True,
                support_detokenization=False,
            )
        self._tokens = tf.constant(self.vocabulary)
        if kind == "wordpiece":
            self._wordpiece = tf_text.FastWordpieceTokenizer(
                self.vocabulary, token_out_type=tf.int32, no_pretokenization=True, unknown_token="[UNK]"
            )
        else:
            self._table = tf.lookup.StaticHashTable(
                tf.lookup.KeyValueTensorInitializer(self._tokens, tf.range(len(self.vocabulary), dtype=tf.int32)),
                default_value=UNK_ID,
            )

    @property
    def max_length(self):
        return self.settings["max_length"]

    def normalized(self, texts):
        """A `[batch]` string tensor repaired, normalized and case-folded as the settings say."""
        texts = tf.strings.unicode_transcode(texts, "UTF-8", "UTF-8", errors="replace", replacement_char=0xFFFD)
        if self.settings["normalization_form"]:
            texts = tf_text.normalize_utf8(texts, self.settings["normalization_form"])
        if self.settings["lower_case"]:
            texts = tf_text.case_fold_utf8(texts)
        return texts

    def words(self, texts):
        """Pre-tokenized words of a `[batch]` string tensor, ragged."""
        texts = self.normalized(texts)
        # Symbols such as emoji stand alone, as ideographs do ("😀dog").
        texts = tf.strings.regex_replace(texts, r"(\p{So})", r" \1 ")
        if not self.settings["chinese_words"]:
            return self._words.tokenize(texts)  # (batch, (words))
        texts = tf.strings.regex_replace(texts, r"\p{Cc}|\p{Cf}", " ")  # as BasicTokenizer does
        words = tf_text.regex_split(texts, rf"\s+|{_KEEP_RUNS}", _KEEP_RUNS)
        # Runs cut into words; any other word comes back as one [UNK] and is kept as it was.
        flat = words.flat_values
        units = self._runs.tokenize(flat)
        lengths = units.row_lengths()
        runs = tf.repeat(tf.strings.regex_full_match(flat, _HAN_RUN), lengths)
        units = units.with_flat_values(tf.where(runs, units.flat_values, tf.repeat(flat, lengths)))
        return words.with_flat_values(units).merge_dims(1, 2)

    def __call__(self, texts):
        ids = self._piece_ids(texts)[:, : self.max_length - 1]  # room for [CLS]
        cls = tf.fill([ids.nrows(), 1], tf.constant(CLS_ID, tf.int32))
        ids = tf.concat([cls, ids], axis=1)
        return ids.to_tensor(default_value=PAD_ID, shape=[None, self.max_length])

    def pair(self, texts, pairs):
        """int32 ids `(batch, max_length)` of pairs of texts: `[CLS] a [SEP] b
        [SEP]`, cut to fit one token at a time from the longer of the two (as
        BERT truncates a pair), zero-padded."""
        a, b = tf_text.RoundRobinTrimmer(self.max_length - 3).trim([self._piece_ids(texts), self._piece_ids(pairs)])
        ids, _ = tf_text.combine_segments([a, b], start_of_sequence_id=CLS_ID, end_of_segment_id=SEP_ID)
        return tf.cast(ids, tf.int32).to_tensor(default_value=PAD_ID, shape=[None, self.max_length])

    def _piece_ids(self, texts):
        # Every piece id of each text, `(batch, (pieces))`.
        words = self.words(texts)
        if self.settings["kind"] == "wordpiece":
            return self._wordpiece.tokenize(words).merge_dims(-2, -1)
        return tf.ragged.map_flat_values(self._table.lookup, words)

    def word_ids(self, texts):
        """Ids grouped by word, `(batch, (words), (pieces))`, [CLS] first.

        Whole words only, as many as fit in `max_length`; merged, they are
        the ids `__call__` returns without padding (up to a cut word).
        """
        ids = first_words(self.word_pieces(texts), self.max_length - 1)  # room for [CLS]
        return tf.concat([one_word(CLS_ID, ids.nrows()), ids], axis=1)

    def word_pieces(self, texts):
        """Ids grouped by word, `(batch, (words), (pieces))`: every word of
        each text, without [CLS] (what `pipeline.packing` cuts into sequences)."""
        words = self.words(texts)
        if self.settings["kind"] == "wordpiece":
            return self._wordpiece.tokenize(words)
        return tf.expand_dims(tf.ragged.map_flat_values(self._table.lookup, words), axis=2)

    def traced(self, pairs=False):
        """`__call__` as a `tf.function` of a `[None]` string tensor (with
        `pairs`, `pair` of two), traced once."""
        by_settings = _TRACED.setdefault(self, {})
        key = (pairs, *sorted(self.settings.items()))
        if key not in by_settings:
            tokenizer = weakref.ref(self)  # the cache must not keep its key alive
            spec = tf.TensorSpec([None], tf.string)
            by_settings[key] = (
                tf.function(lambda a, b: tokenizer().pair(a, b), autograph=False, input_signature=[spec, spec])
                if pairs
                else tf.function(lambda texts: tokenizer()(texts), autograph=False, input_signature=[spec])
            )
        return by_settings[key]

    def tokens(self, ids):
        """The vocabulary entries of `ids`, padding included."""
        return tf.gather(self._tokens, ids)

    @classmethod
    def learn(
        cls,
        texts,
        kind=_DEFAULTS.tokenizer,
        vocabulary_size=_DEFAULTS.vocabulary_size,
        min_count=_DEFAULTS.min_count,
        max_length=128,
        lower_case=_DEFAULTS.lower_case,
        normalization_form=_DEFAULTS.normalization_form,
        chinese_words=False,
    ):
        """Learns a vocabulary from training `texts` (a list of strings).

        Word vocabulary: words seen at least `min_count` times, most frequent
        first, at most `vocabulary_size` entries with the reserved tokens;
        everything else maps to [UNK]. WordPiece: tensorflow-text's learner
        (its algorithm, counted faster: `pipeline.wordpiece_learner`), with
        `min_count` as its lowest frequency threshold. `max_length=0`
        derives the length from the texts (see `fitting_length`).

        `chinese_words`: up to `vocabulary_size` Chinese words that jieba
        finds at least `min_count` times (`learn_chinese_words`) are added
        whole, and runs of Chinese characters are cut into them.
        """
        found = None
        if chinese_words:
            probe = cls(list(RESERVED_TOKENS), "word", LONGEST, lower_case, normalization_form)
            normalized = [
                text.decode("utf-8")
                for batch in tf.data.Dataset.from_tensor_slices(texts).batch(4096)
                for text in probe.normalized(batch).numpy()
            ]
            found = learn_chinese_words(normalized, min_count)[:vocabulary_size]
        counts = count_words(texts, lower_case, normalization_form, found)
        if kind == "word":
            frequent = sorted((w for w, c in counts.items() if c >= min_count), key=lambda w: (-counts[w], w))
            vocabulary = list(RESERVED_TOKENS) + frequent[: vocabulary_size - len(RESERVED_TOKENS)]
        else:
            vocabulary = wordpiece_vocabulary(counts, vocabulary_size, min_count)
        if found:
            # Whole, so that the runs' cuts are the words looked up; a word the
            # cuts never produce (a longer one always wins) is left out.
            known = set(vocabulary)
            vocabulary += [w for w in found if w not in known and counts.get(w, 0) >= min_count]
        tokenizer = cls(vocabulary, kind, max_length or LONGEST, lower_case, normalization_form, chinese_words)
        if not max_length:
            tokenizer.settings["max_length"] = tokenizer.fitting_length(texts)
        return tokenizer

    def fitting_length(self, texts, quantile=99, multiple=16):
        """The `quantile`th percentile of the texts' token counts ([CLS]
        included; of pairs of texts, packed by `pair`; both may come in one
        list), rounded up to a
        multiple of `multiple`, at most the current `max_length`."""
        lengths = [np.zeros(0, np.int64)]
        pairs = [text for text in texts if isinstance(text, tuple)]
        alone = [text for text in texts if not isinstance(text, tuple)]
        for slices, traced in ((tuple(map(list, zip(*pairs))), self.traced(pairs=True)), (alone, self.traced())):
            for batch in tf.data.Dataset.from_tensor_slices(slices).batch(4096) if slices else ():
                ids = traced(*batch) if isinstance(batch, tuple) else traced(batch)
                lengths.append(tf.math.count_nonzero(ids, axis=1).numpy())
        length = float(np.percentile(np.concatenate(lengths), quantile))
        return int(min(self.max_length, max(multiple, -(-length // multiple) * multiple)))

    def save(self, directory):
        # The vocabulary last and atomically: once it is there, the tokenizer is
        # complete (other workers of a cluster may be reading).
        with create(os.path.join(directory, TOKENIZER_FILE)) as f:
            json.dump(self.settings, f, indent=2)
        with atomic_write(os.path.join(directory, VOCABULARY_FILE)) as f:
            f.write("\n".join(self.vocabulary) + "\n")

    @classmethod
    def load(cls, directory):
        with open_text(os.path.join(directory, VOCABULARY_FILE)) as f:
            vocabulary = f.read().split("\n")[:-1]
        with open_text(os.path.join(directory, TOKENIZER_FILE)) as f:
            settings = json.load(f)
        return cls(vocabulary, **settings)
