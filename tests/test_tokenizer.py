import numpy as np
import pytest
import tensorflow as tf

from pipeline.dataset import tokenize
from pipeline.tokenizer import CLS_ID, PAD_ID, RESERVED_TOKENS, UNK_ID, Tokenizer

CORPUS = [
    "The cat sat on the mat.",
    "The dog sat!",
    "the cats and the dogs",
    "我爱北京天安门",
    "北京很大",
    "café CAFÉ café",
] * 2 + ["rare word"]


def _tokens(tokenizer, text):
    ids = tokenizer(tf.constant([text]))[0]
    return [t.decode() for t, i in zip(tokenizer.tokens(ids).numpy(), ids.numpy()) if i != PAD_ID]


@pytest.fixture(scope="module")
def word():
    return Tokenizer.learn(CORPUS, kind="word", vocabulary_size=100, min_count=2, max_length=10)


@pytest.fixture(scope="module")
def wordpiece():
    return Tokenizer.learn(CORPUS, kind="wordpiece", vocabulary_size=100, min_count=1, max_length=10)


def test_golden_word_tokens(word):
    # Punctuation splits off; "," never occurs in training, "!" twice.
    assert _tokens(word, "The CAT sat, on the mat!") == ["[CLS]", "the", "cat", "sat", "[UNK]", "on", "the", "mat", "!"]
    # Ideographs split into single characters; unseen ones become [UNK].
    assert _tokens(word, "北京天安门很大") == ["[CLS]", "北", "京", "天", "安", "门", "很", "大"]
    assert _tokens(word, "我爱猫") == ["[CLS]", "我", "爱", "[UNK]"]
    # Mixed scripts, emoji (a token of its own) and case folding without accent loss.
    assert _tokens(word, "Café北京😀dog") == ["[CLS]", "café", "北", "京", "[UNK]", "dog"]
    assert _tokens(word, "😀😀 cat") == ["[CLS]", "[UNK]", "[UNK]", "cat"]
    assert _tokens(word, "") == ["[CLS]"]


def test_min_count(word):
    assert "rare" not in word.vocabulary  # seen once, min_count 2
    assert "cats" in word.vocabulary  # seen twice
    assert _tokens(word, "rare cats") == ["[CLS]", "[UNK]", "cats"]
    assert tuple(word.vocabulary[:5]) == RESERVED_TOKENS
    capped = Tokenizer.learn(CORPUS, kind="word", vocabulary_size=8, min_count=1)
    assert len(capped.vocabulary) == 8 and capped.vocabulary[5] == "the"  # most frequent first


def test_golden_wordpiece_tokens(wordpiece):
    tokens = _tokens(wordpiece, "the cats sat")
    assert tokens[0] == "[CLS]" and "".join(t.lstrip("#") for t in tokens[1:]) == "thecatssat"
    assert _tokens(wordpiece, "北京") == ["[CLS]", "北", "京"]
    assert _tokens(wordpiece, "") == ["[CLS]"]


def test_ids_are_static_int32_truncated_and_padded(word):
    ids = word(tf.constant(["the cat " * 20, "", b"\xff\xfe invalid bytes"])).numpy()
    assert ids.dtype == np.int32 and ids.shape == (3, 10)
    assert (ids[:, 0] == CLS_ID).all() and (ids[0] != PAD_ID).all()
    assert ids[1].tolist() == [CLS_ID] + [PAD_ID] * 9
    assert ids[2, 1] == UNK_ID


@pytest.mark.parametrize("kind", ["word", "wordpiece"])
def test_vocabulary_reloads_to_identical_ids(tmp_path, kind, word, wordpiece):
    tokenizer = {"word": word, "wordpiece": wordpiece}[kind]
    tokenizer.save(tmp_path)
    reloaded = Tokenizer.load(tmp_path)
    texts = tf.constant(CORPUS + ["unseen 文字 😀", ""])
    np.testing.assert_array_equal(reloaded(texts), tokenizer(texts))
    assert reloaded.settings == tokenizer.settings


def test_max_length_zero_is_derived_from_the_texts():
    texts = ["word " * n for n in range(1, 41)] * 5  # 1 to 40 words; [CLS] makes 2 to 41 tokens
    tokenizer = Tokenizer.learn(texts, kind="word", min_count=1, max_length=0)
    assert tokenizer.max_length == 48  # the 99th percentile, 41, rounded up to a multiple of 16
    # Splits are tokenized by a traced tokenizer, traced while the length was
    # still 512: it follows the new length.
    ids = tokenize(tokenizer, texts)
    assert ids.shape == (200, 48) and ids[-1, 40] != PAD_ID and ids[-1, 41] == PAD_ID
    np.testing.assert_array_equal(ids, tokenizer(tf.constant(texts)).numpy())
    assert Tokenizer.learn(["a b"] * 10, kind="word", min_count=1, max_length=0).max_length == 16
    assert Tokenizer.learn(["a " * 900] * 3, kind="word", min_count=1, max_length=0).max_length == 512
