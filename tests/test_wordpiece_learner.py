import random

import pytest
from tensorflow_text.tools.wordpiece_vocab import wordpiece_tokenizer_learner_lib as library

from pipeline import wordpiece_learner

RESERVED = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]


def _word_counts(seed=0, size=1500):
    """Words built from shared stems and affixes, Zipf-like counts: the
    library's later passes then split words at pieces of earlier ones.
    Latin, accented and CJK characters, with a few rare ones."""
    rng = random.Random(seed)
    stems = ["play", "happ", "work", "read", "north", "café", "北京", "天安", "大学", "x", "zq"]
    prefixes = ["", "", "", "un", "re", "over", "中"]
    suffixes = ["", "", "s", "ed", "ing", "ily", "y", "er", "门", "人"]
    counts = {}
    for rank in range(1, size + 1):
        stem = "".join(rng.choice(stems) for _ in range(rng.randint(1, 3)))
        word = rng.choice(prefixes) + stem + rng.choice(suffixes)
        if rng.random() < 0.05:
            word += rng.choice("ñøß字")
        counts[word] = counts.get(word, 0) + max(1, 2000 // rank)
    counts[""] = 7  # an empty word has no pieces; the library skips it
    return counts


def test_golden_vocabulary_of_one_threshold():
    counts = [("unhappy", 6), ("happy", 4), ("happily", 3), ("play", 3), ("playing", 2), ("unplayed", 2)]
    params = library.Params(None, None, 4, -1, 50, 1000, 100, 0.05, True, "##", ["[PAD]"])
    characters = ["a", "d", "e", "g", "h", "i", "l", "n", "p", "u", "y"]
    # Whole words seen at least 4 times, then "##y": y ends three words (13).
    assert wordpiece_learner.learn_with_thresh(counts, 4, params) == (
        ["[PAD]"] + characters + ["##y", "unhappy", "happy"] + ["##" + c for c in characters if c != "y"]
    )
    assert wordpiece_learner.learn_with_thresh(counts, 4, params) == library.learn_with_thresh(counts, 4, params)


@pytest.mark.parametrize("include_joiner_token", [True, False])
def test_every_threshold_gives_the_library_vocabulary(include_joiner_token):
    counts = list(_word_counts().items())
    params = library.Params(None, None, 4, -1, 50, 1000, 500, 0.05, include_joiner_token, "##", RESERVED)
    sizes = set()
    for thresh in (0, 1, 2, 3, 5, 8, 13, 40, 200, 5000):
        vocabulary = wordpiece_learner.learn_with_thresh(counts, thresh, params)
        assert vocabulary == library.learn_with_thresh(counts, thresh, params), thresh
        sizes.add(len(vocabulary))
    assert len(sizes) >= 8  # the thresholds above really give different vocabularies


@pytest.mark.parametrize(
    "vocab_size, options",
    [
        (200, {}),
        (600, {"lower_thresh": 1}),
        (600, {"lower_thresh": 2, "max_unique_chars": 30}),  # rare characters dropped from the alphabet
        (2000, {"lower_thresh": 1, "num_iterations": 2, "max_token_length": 8}),
        (400, {"lower_thresh": 1, "include_joiner_token": False}),
    ],
)
def test_learn_gives_the_library_vocabulary(vocab_size, options):
    counts = _word_counts(seed=vocab_size)
    learned = wordpiece_learner.learn(counts, vocab_size, RESERVED, **options)
    assert learned == library.learn(counts, vocab_size, RESERVED, **options)
    assert learned[: len(RESERVED)] == RESERVED and len(learned) > len(RESERVED) + 30


def _library_pass(word_counts, tokens):
    # A later pass of the library's loop, as counts of word ends.
    ends = {}
    for word, count in word_counts:
        bounds = library.get_split_indices(word, tokens, True, "##")
        for start in [0] + bounds[:-1] if bounds else []:
            end = "##" + word[start:] if start else word
            ends[end] = ends.get(end, 0) + count
    return ends


def test_later_passes_split_words_as_the_library_does():
    counts = _word_counts()
    params = library.Params(None, None, 4, -1, 50, 1000, 500, 0.05, True, "##", RESERVED)
    tokens = set(library.learn_with_thresh(list(counts.items()), 13, params)) - {"z", "##z", "##字", "##ø"}
    # Whitespace, the first candidate unknown token, words that cannot be
    # spelled without z, and words that start or end with the joiner.
    counts.update({"play ed": 3, "\x01": 2, "zz": 5, "playz": 4, "##play": 2, "##x": 1, "x##": 1, "#x": 1})
    tokens |= {"##play", "#", "###", "x", "##x"}
    word_counts = list(counts.items())
    words = wordpiece_learner._Words(word_counts, params)
    ends = wordpiece_learner._later_pass(words, tokens, params, thresh=1)
    expected = _library_pass(word_counts, tokens)
    assert list(ends.items()) == list(expected.items())  # the same counts, met in the same order
    assert "zz" not in ends and "##z" not in ends and "play" in ends and "##play" in ends
    assert any(not end.isascii() and end.startswith("##") for end in ends)
    frequent = wordpiece_learner._later_pass(words, tokens, params, thresh=40)
    assert list(frequent.items()) == [(end, count) for end, count in expected.items() if count >= 40]
    assert 10 < len(frequent) < len(ends) / 2
