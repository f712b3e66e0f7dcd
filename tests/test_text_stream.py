import collections
import itertools

import numpy as np
import pytest
import tensorflow as tf

from pipeline.config import DataConfig
from pipeline.demo_corpus import generate
from pipeline.readers import DataError
from pipeline.text_stream import READ_BATCH, Sequences, TextSource, in_memory, raising_data_errors, sequences_of
from pipeline.tokenizer import Tokenizer

WORDS = {"tokenizer": "word", "min_count": 1}


def _tokens(dataset, count=None):
    # Each sequence's token ids without [CLS], as a tuple.
    rows = dataset if count is None else dataset.take(count)
    return [tuple(row.flat_values.numpy()[1:].tolist()) for row in rows]


def _tokenizer(texts, max_length=24):
    return Tokenizer.learn(texts, kind="word", vocabulary_size=1000, min_count=1, max_length=max_length)


def _write(path, lines):
    with tf.io.gfile.GFile(path, "w") as f:
        f.write("\n".join(lines) + "\n")
    return path


def test_texts_that_fit_are_the_sequences_the_tokenizer_gives_and_longer_ones_lose_nothing():
    texts = [text for text, _ in generate(2500, seed=4)]  # three reading batches
    assert len(texts) > 2 * READ_BATCH
    tokenizer = _tokenizer(texts)
    sequences = sequences_of(texts, tokenizer)
    packed, expected = next(iter(sequences().batch(2500))), tokenizer.word_ids(tf.constant(texts))
    for part in (lambda ids: ids.flat_values, lambda ids: ids.row_lengths(), lambda ids: ids.values.row_lengths()):
        np.testing.assert_array_equal(part(packed).numpy(), part(expected).numpy())
    assert sequences.count == 2500 and sequences.shuffle_buffer == 2500
    long_text = " ".join(texts[:6])  # about 60 tokens: three sequences of 23 and the rest
    pieces = _tokens(sequences_of([long_text], tokenizer)())
    assert [len(piece) for piece in pieces[:-1]] == [23, 23] and 0 < len(pieces[-1]) <= 23
    expected = tokenizer._table.lookup(tokenizer.words(tf.constant([long_text]))).flat_values.numpy()
    assert sum(pieces, ()) == tuple(expected)


def test_blank_lines_end_documents_whose_lines_share_sequences(tmp_path):
    path = _write(str(tmp_path / "docs.txt"), ["a b c", "d e", "", "f g h i j k", "l", "", "", "m"])
    source = TextSource(path, DataConfig(**WORDS), join_lines=True)
    tokenizer = _tokenizer(["a b c d e f g h i j k l m"], max_length=6)
    word = {token: index for index, token in enumerate(tokenizer.vocabulary)}
    ids = [tuple(word[token] for token in sequence.split()) for sequence in ["a b c d e", "f g h i j", "k l", "m"]]
    assert _tokens(Sequences(source, tokenizer)()) == ids
    assert Sequences(source, tokenizer).lengths().tolist() == [6, 6, 3, 2]
    # Read by Python (which counts skipped rows) instead of TensorFlow's reader: the same sequences.
    counted = TextSource(path, DataConfig(**WORDS, skip_bad_rows=True), join_lines=True)
    assert _tokens(Sequences(counted, tokenizer)()) == ids
    # Each line a document: no line shares a sequence.
    lines = TextSource(path, DataConfig(**WORDS))
    assert len(_tokens(Sequences(lines, tokenizer)())) == 6


def test_a_stream_reads_every_document_once_a_pass_in_a_new_order_each_pass_without_end():
    files = [_write(f"ram://stream/part-{index}.txt", [f"w{index} x{n}" for n in range(15)]) for index in range(6)]
    source = TextSource("ram://stream/part-*.txt", DataConfig(**WORDS))
    assert source.files == files
    tokenizer = _tokenizer([f"w{i} x{n}" for i in range(6) for n in range(15)])
    passes = _tokens(Sequences(source, tokenizer, cached=False)(seed=5), 90 * 4)
    for one in range(4):
        assert sorted(passes[90 * one : 90 * (one + 1)]) == sorted(passes[:90])  # every document, once
    assert len({tuple(passes[90 * one : 90 * (one + 1)]) for one in range(4)}) == 4  # each pass in its own order
    assert passes == _tokens(Sequences(source, tokenizer, cached=False)(seed=5), 90 * 4)  # by the seed alone


@pytest.mark.parametrize("files", [3, 1])
@pytest.mark.parametrize("python_reader", [False, True])
def test_input_pipelines_share_the_documents_by_file_or_by_document(tmp_path, files, python_reader):
    # Three files: whole files per pipeline. One file: every other document.
    lines = [
        [f"d{index}" if line % 3 == 0 else "" if line % 3 == 2 else "x" for line in range(60)] for index in range(3)
    ]
    lines = [[f"{text}{n}" if text else "" for n, text in enumerate(group)] for group in lines]
    paths = [_write(str(tmp_path / f"{index}.txt"), group) for index, group in enumerate(lines)]
    everything = [text for group in lines for text in group if text]
    tokenizer = _tokenizer(everything)
    source = TextSource(paths[:files], DataConfig(**WORDS, skip_bad_rows=python_reader), join_lines=True)
    shares = []
    for pipeline in range(2):
        context = tf.distribute.InputContext(num_input_pipelines=2, input_pipeline_id=pipeline, num_replicas_in_sync=2)
        shares.append(collections.Counter(_tokens(Sequences(source, tokenizer)(context))))
    whole = collections.Counter(_tokens(Sequences(source, tokenizer)()))
    assert not shares[0] & shares[1] and shares[0] + shares[1] == whole
    assert all(len(share) > 0 for share in shares) and sum(whole.values()) == 20 * files  # documents kept whole


def test_the_sample_is_the_corpus_in_order_when_it_fits_else_a_seeded_bounded_draw(tmp_path):
    paths = [_write(str(tmp_path / f"{index}.txt"), [f"f{index} t{n}" for n in range(50)]) for index in range(4)]
    source = TextSource(paths, DataConfig(**WORDS))
    texts, complete = source.sample(200, seed=1)
    assert complete and texts == [f"f{index} t{n}" for index in range(4) for n in range(50)]
    texts, complete = source.sample(120, seed=1)
    assert not complete and len(texts) == 120 and texts == source.sample(120, seed=1)[0]
    assert texts != source.sample(120, seed=2)[0] and set(texts) < {f"f{i} t{n}" for i in range(4) for n in range(50)}
    kept, complete = TextSource(in_memory([f"t{n}" for n in range(50)])).sample(20, seed=1)
    assert not complete and len(set(kept)) == 20


def test_a_bad_row_met_while_streaming_names_its_file_and_line_or_is_counted(tmp_path):
    path = tmp_path / "docs.csv"
    path.write_text("text,label\nfine,a\n,b\nalso fine,c\n", encoding="utf-8")
    tokenizer = _tokenizer(["fine also"])
    stream = Sequences(TextSource(str(path), DataConfig(**WORDS)), tokenizer, cached=False)
    with pytest.raises(DataError, match=rf"^{path}:3: missing or empty text: text=''$"):
        raising_data_errors(list, itertools.islice(stream(seed=0), 10))
    source = TextSource(str(path), DataConfig(**WORDS, skip_bad_rows=True))
    assert len(_tokens(Sequences(source, tokenizer)())) == 2
    assert source.skipped == {"missing or empty text": 1}


def test_a_line_that_is_not_utf8_stops_the_stream_naming_its_file_and_line_or_is_counted(tmp_path):
    path = tmp_path / "docs.txt"
    path.write_bytes(b"fine\n\nalso fine\nbad \xff byte\n")
    tokenizer = _tokenizer(["fine also bad byte"])
    stream = Sequences(TextSource(str(path), DataConfig(**WORDS)), tokenizer, cached=False)
    with pytest.raises(
        DataError, match=rf"^{path}:4: bytes that are not UTF-8 \(shown as \ufffd\): text=bad \ufffd byte$"
    ):
        raising_data_errors(list, stream(seed=0).take(10))
    source = TextSource(str(path), DataConfig(**WORDS, skip_bad_rows=True))
    assert len(_tokens(Sequences(source, tokenizer, cached=False)(seed=0), 4)) == 4  # two a pass
    assert source.skipped["bytes that are not UTF-8"] >= 1
    (tmp_path / "empty.txt").write_text("")
    with pytest.raises(DataError, match="empty.txt: the file holds no examples"):
        TextSource([str(path), str(tmp_path / "empty.txt")], DataConfig(**WORDS))


def test_texts_in_memory_and_unlabelled_files_are_one_corpus_spread_through_each_pass(tmp_path):
    labelled = in_memory([f"lab{n} y" for n in range(40)])
    paths = [_write(str(tmp_path / f"{index}.txt"), [f"u{index} t{n}" for n in range(200)]) for index in range(8)]
    everything = list(labelled.texts) + [f"u{index} t{n}" for index in range(8) for n in range(200)]
    texts, complete = TextSource(labelled, DataConfig(**WORDS), files=str(tmp_path / "*.txt")).sample(5000, 1)
    assert complete and texts == everything  # read whole, in order: kept in memory, cached
    source = TextSource(labelled, DataConfig(**WORDS), files=paths)
    texts, complete = source.sample(100, seed=1)
    assert not complete and texts[:40] == list(labelled.texts) and len(texts) == 100  # the labelled first
    tokenizer = _tokenizer(everything)
    word = {index: token for index, token in enumerate(tokenizer.vocabulary)}
    passes = [
        " ".join(word[i] for i in ids) for ids in _tokens(Sequences(source, tokenizer, cached=False)(seed=3), 3280)
    ]
    for one in range(2):
        assert sorted(passes[1640 * one : 1640 * (one + 1)]) == sorted(everything)  # each text once a pass
    spots = [index for index, text in enumerate(passes[:1640]) if text.startswith("lab")]
    assert spots[0] < 820 < spots[-1]  # drawn among the files' texts, not all before or after them
    shares = []
    for pipeline in range(2):
        context = tf.distribute.InputContext(num_input_pipelines=2, input_pipeline_id=pipeline, num_replicas_in_sync=2)
        shares.append(collections.Counter(_tokens(Sequences(source, tokenizer, cached=False)(context, seed=3), 820)))
    assert not shares[0] & shares[1] and sum((shares[0] + shares[1]).values()) == 1640


def test_a_pair_is_one_sequence_a_sep_b_from_memory_from_a_file_and_beside_plain_text(tmp_path):
    pairs = [(f"a{n} x", f"b{n} y z") for n in range(30)]
    path = tmp_path / "pairs.csv"
    path.write_text("premise,hypothesis,label\n" + "".join(f"{a},{b},l\n" for a, b in pairs), encoding="utf-8")
    plain = _write(str(tmp_path / "plain.txt"), ["p q r", "s t"])
    data = DataConfig(**WORDS, text_column="premise", text_pair_column="hypothesis")
    tokenizer = _tokenizer([text for pair in pairs for text in pair] + ["p q r s t"])
    word = {index: token for index, token in enumerate(tokenizer.vocabulary)}
    expected = [f"{a} [SEP] {b}" for a, b in pairs]  # the classifier's segments, [CLS] aside and no [SEP] last

    def read(sequences):
        return [" ".join(word[i] for i in ids) for ids in _tokens(sequences)]

    assert read(sequences_of(pairs, tokenizer)()) == expected
    assert read(TextSource(str(path), data).sequences(tokenizer)) == expected  # read by Python, a CSV
    mixed = TextSource(str(path), data, files=plain)
    texts, complete = mixed.sample(1000, seed=0)
    assert complete and sorted(texts, key=str) == sorted([*pairs, "p q r", "s t"], key=str)
    assert sorted(read(Sequences(mixed, tokenizer)())) == sorted([*expected, "p q r", "s t"])
