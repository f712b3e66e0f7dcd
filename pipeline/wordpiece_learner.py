"""tensorflow-text's WordPiece vocabulary learner, counting in linear time.

`wordpiece_tokenizer_learner_lib.learn` binary-searches a count threshold.
At each probe, for `num_iterations` passes, it counts every substring of
every word that starts at a piece boundary (every position on the first
pass; on later ones, where the previous pass's vocabulary splits the word),
then walks the substrings from the longest down and subtracts each one's
count from all its prefixes, whatever the threshold. What that leaves of a
substring's count is exactly the weight of the words in which it starts at
a boundary and runs to the word's end: the longer substrings that begin with
it account for the rest. A pass's tokens are those whose count reaches the
threshold.

`learn` counts those word ends directly, one entry per boundary instead of
one per substring and no subtraction, and keeps everything else of the
library: its arguments and defaults, input filters, alphabet, search and
final ordering. Two more savings keep the result: the first pass, which
does not depend on the threshold, is counted once for all probes; and the
later passes, which split each word greedily into the longest tokens of the
pass before (as `FastWordpieceTokenizer` splits words), split and count in
tensorflow-text and TensorFlow ops instead of the library's Python loops.
The vocabulary is the library's (tests compare the two with the installed
library, so a change of its algorithm fails them); on the 27k tweets of
`bench/accuracy.py`, learning 4,000 entries takes about 3 s instead of about
100 (`bench/vocabulary.py`).
"""

import collections
import inspect

import tensorflow as tf
import tensorflow_text as tf_text
from tensorflow_text.tools.wordpiece_vocab import wordpiece_tokenizer_learner_lib as lib


def learn(word_counts, vocab_size, reserved_tokens, **options):
    """The vocabulary `wordpiece_tokenizer_learner_lib.learn` returns for the
    same arguments, a list of strings; `options` and their defaults are the
    library's (`lower_thresh`, `max_unique_chars`, ...)."""
    arguments = inspect.signature(lib.learn).bind(word_counts, vocab_size, reserved_tokens, **options)
    arguments.apply_defaults()
    arguments = arguments.arguments
    if isinstance(word_counts, dict):
        word_counts = word_counts.items()
    params = lib.Params(*(arguments[field] for field in lib.Params._fields))
    upper, lower = lib.get_search_threshs(word_counts, params.upper_thresh, params.lower_thresh)
    words = lib.get_input_words(word_counts, reserved_tokens, params.max_token_length)
    words = lib.filter_input_words(
        words, lib.get_allowed_chars(words, params.max_unique_chars), params.max_input_tokens
    )
    prepared = _Words(words, params)
    # The library's `learn_binary_search`, as a loop.
    while True:
        thresh = (upper + lower) // 2
        vocabulary = learn_with_thresh(words, thresh, params, prepared)
        size = len(vocabulary)
        if (
            (size <= vocab_size and vocab_size - size <= max(params.slack_ratio * vocab_size, 0))
            or lower >= upper
            or thresh <= 1
        ):
            return vocabulary
        if size > vocab_size:
            lower = thresh + 1
        else:
            upper = thresh - 1


def learn_with_thresh(word_counts, thresh, params, prepared=None):
    """`wordpiece_tokenizer_learner_lib.learn_with_thresh`: the vocabulary of
    one threshold, from the word ends of each pass (see the module's text).
    `prepared`: `_Words(word_counts, params)`, shared by all thresholds."""
    if thresh < 1:  # the library then also keeps substrings whose count is spent
        return lib.learn_with_thresh(word_counts, thresh, params)
    words = prepared or _Words(word_counts, params)
    tokens = lib.ensure_all_tokens_exist(words.characters, {}, params.include_joiner_token, params.joiner)
    for iteration in range(params.num_iterations):
        if iteration == 0:
            tokens = {token: count for token, count in words.first_pass.items() if count >= thresh}
        else:
            tokens = _later_pass(words, tokens, params, thresh)
        tokens = lib.ensure_all_tokens_exist(words.characters, tokens, params.include_joiner_token, params.joiner)
    return lib.generate_final_vocabulary(params.reserved_tokens, words.characters, tokens)


class _Words:
    """What every threshold's passes share: the alphabet, the counts of the
    first pass (every position of every word is a boundary there) and the
    words as tensors for the later ones."""

    def __init__(self, word_counts, params):
        self.word_counts = word_counts
        self.characters = lib.extract_char_tokens(word_counts)
        prefix = params.joiner if params.include_joiner_token else ""
        self.first_pass = collections.defaultdict(int)
        for word, count in word_counts:
            self.first_pass[word] += count
            for start in range(1, len(word)):
                self.first_pass[prefix + word[start:]] += count
        self.words = tf.constant([word for word, _ in word_counts], tf.string)
        self.counts = tf.constant([count for _, count in word_counts], tf.int64)
        self.longest = max((len(word.encode()) for word, _ in word_counts), default=0)
        # FastWordpieceTokenizer needs an unknown token, which it returns for a
        # word it cannot spell: a character no word holds is never a piece.
        self.unknown = next(c for c in map(chr, range(1, 0x110000)) if c not in self.characters)


def _later_pass(words, tokens, params, thresh):
    """`{word end: count}` of one later pass, the ends counted at least
    `thresh` times, in the order the library's loop first meets them: each
    word is split where its greedy longest-first split by `tokens`
    (`lib.get_split_indices`) puts piece boundaries, and words `tokens`
    cannot spell count for nothing. That split is how
    `FastWordpieceTokenizer` splits a word, so it runs in C++."""
    joiner = params.joiner
    if not params.include_joiner_token or not joiner:  # unmarked pieces: the library's loop
        ends = collections.defaultdict(int)
        for word, count in words.word_counts:
            bounds = lib.get_split_indices(word, tokens, params.include_joiner_token, joiner)
            for start in [0] + bounds[:-1] if bounds else []:
                ends[word[start:]] += count
        return {end: count for end, count in ends.items() if count >= thresh}
    vocabulary = list(tokens) + [words.unknown]
    splitter = tf_text.FastWordpieceTokenizer(
        vocabulary,
        suffix_indicator=joiner,
        max_bytes_per_word=words.longest + 1,
        token_out_type=tf.int64,
        unknown_token=words.unknown,
        no_pretokenization=True,
        support_detokenization=False,
    )
    ids, starts, _ = splitter.tokenize_with_offsets(words.words)
    spelled = tf.reduce_all(ids != len(vocabulary) - 1, axis=1)
    piece_word = ids.value_rowids()
    kept = tf.gather(spelled, piece_word)
    piece_word, start = tf.boolean_mask(piece_word, kept), tf.boolean_mask(starts.flat_values, kept)  # bytes
    start = tf.cast(start, tf.int32)
    word = tf.gather(words.words, piece_word)
    end = tf.strings.substr(word, start, tf.strings.length(word) - start)
    end = tf.where(start > 0, tf.strings.join([joiner, end]), end)
    ends, index = tf.unique(end)  # in order of first appearance
    counts = tf.math.unsorted_segment_sum(tf.gather(words.counts, piece_word), index, tf.size(ends))
    kept = counts >= thresh
    ends, counts = tf.boolean_mask(ends, kept).numpy().tolist(), tf.boolean_mask(counts, kept).numpy().tolist()
    return {end.decode(): count for end, count in zip(ends, counts)}
