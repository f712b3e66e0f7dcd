import numpy as np
import pytest
import tensorflow as tf

from pipeline.dataset import tokenize
from pipeline.tokenizer import CLS_ID, PAD_ID, RESERVED_TOKENS, UNK_ID, Tokenizer, mostly_chinese

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


REVIEWS = [
    "这个手机很好用，电池也不错",
    "手机的屏幕很好",
    "电池不错，就是有点贵",
    "iPhone手机很好用!",
    "这本书很好看",
] * 3


@pytest.fixture(scope="module")
def chinese():
    return Tokenizer.learn(
        REVIEWS, kind="wordpiece", vocabulary_size=100, min_count=2, max_length=0, chinese_words=True
    )


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


def test_chinese_runs_are_cut_into_the_words_jieba_found_in_training(chinese):
    assert chinese.settings["chinese_words"] and {"手机", "电池", "不错", "屏幕"} <= set(chinese.vocabulary)
    # Longest words first, a character where no word fits, [UNK] for a character never seen;
    # other scripts and emoji as without Chinese words.
    assert _tokens(chinese, "我的手机很好用") == ["[CLS]", "[UNK]", "的", "手机", "很", "好", "用"]
    assert _tokens(chinese, "iPhone手机电池不错😀") == ["[CLS]", "iphone", "手机", "电池", "不错", "[UNK]"]
    # A run far longer than a word is cut all the way (a tokenizer's word limit would make it one [UNK]).
    assert _tokens(chinese, "手机" * 100)[1:] == ["手机"] * 15 and chinese.max_length == 16
    # Without Chinese words, the same texts are one token per character.
    characters = Tokenizer.learn(REVIEWS, kind="wordpiece", vocabulary_size=100, min_count=2)
    assert _tokens(characters, "手机电池") == ["[CLS]", "手", "机", "电", "池"]
    assert not any(len(t) > 1 and "\u4e00" <= t[0] <= "\u9fff" for t in characters.vocabulary)


def test_chinese_words_are_chosen_for_mostly_chinese_texts():
    assert mostly_chinese(REVIEWS)
    assert not mostly_chinese(["The cat sat on the mat.", "北京很大"])  # 3 of 12 letters
    assert not mostly_chinese(["これは日本語の文章です"])  # kana outnumber the kanji: 5 of 11 letters
    assert not mostly_chinese(["", "123 !?"])


def test_ids_are_static_int32_truncated_and_padded(word):
    ids = word(tf.constant(["the cat " * 20, "", b"\xff\xfe invalid bytes"])).numpy()
    assert ids.dtype == np.int32 and ids.shape == (3, 10)
    assert (ids[:, 0] == CLS_ID).all() and (ids[0] != PAD_ID).all()
    assert ids[1].tolist() == [CLS_ID] + [PAD_ID] * 9
    assert ids[2, 1] == UNK_ID


@pytest.mark.parametrize("kind", ["word", "wordpiece", "chinese"])
def test_vocabulary_reloads_to_identical_ids(tmp_path, kind, word, wordpiece, chinese):
    tokenizer = {"word": word, "wordpiece": wordpiece, "chinese": chinese}[kind]
    tokenizer.save(tmp_path)
    reloaded = Tokenizer.load(tmp_path)
    texts = tf.constant(CORPUS + REVIEWS + ["unseen 文字 😀", ""])
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
