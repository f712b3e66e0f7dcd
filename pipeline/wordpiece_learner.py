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
final ordering. The vocabulary is the library's (tests compare the two with
the installed library, so a change of its algorithm fails them); on the 27k
tweets of `bench/accuracy.py`, learning 4,000 entries takes about 12 s
instead of about 2 minutes (`bench/vocabulary.py`).
"""

import collections
import inspect

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
    words = lib.filter_input_words(words, lib.get_allowed_chars(words, params.max_unique_chars),
                                   params.max_input_tokens)
    # The library's `learn_binary_search`, as a loop.
    while True:
        thresh = (upper + lower) // 2
        vocabulary = learn_with_thresh(words, thresh, params)
        size = len(vocabulary)
        if (size <= vocab_size and vocab_size - size <= max(params.slack_ratio * vocab_size, 0)) \
                or lower >= upper or thresh <= 1:
            return vocabulary
        if size > vocab_size:
            lower = thresh + 1
        else:
            upper = thresh - 1


def learn_with_thresh(word_counts, thresh, params):
    """`wordpiece_tokenizer_learner_lib.learn_with_thresh`: the vocabulary of
    one threshold, from the word ends of each pass (see the module's text)."""
    if thresh < 1:  # the library then also keeps substrings whose count is spent
        return lib.learn_with_thresh(word_counts, thresh, params)
    characters = lib.extract_char_tokens(word_counts)
    tokens = lib.ensure_all_tokens_exist(characters, {}, params.include_joiner_token, params.joiner)
    prefix = params.joiner if params.include_joiner_token else ""
    for iteration in range(params.num_iterations):
        ends = collections.defaultdict(int)
        for word, count in word_counts:
            if iteration == 0:
                starts = range(len(word))
            else:
                bounds = lib.get_split_indices(word, tokens, params.include_joiner_token, params.joiner)
                if not bounds:
                    continue
                starts = [0] + bounds[:-1]
            for start in starts:
                ends[prefix + word[start:] if start else word] += count
        tokens = {token: count for token, count in ends.items() if count >= thresh}
        tokens = lib.ensure_all_tokens_exist(characters, tokens, params.include_joiner_token, params.joiner)
    return lib.generate_final_vocabulary(params.reserved_tokens, characters, tokens)
