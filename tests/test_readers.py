import json

import pytest
import tensorflow as tf

from pipeline.labels import encode_labels, label_names, load_label_names, save_label_names
from pipeline.readers import RECORD_BATCH, DataError, read_examples


def _write(path, content):
    mode = "wb" if isinstance(content, bytes) else "w"
    with open(path, mode) as f:
        f.write(content)
    return str(path)


def _tfrecord(path, rows):
    with tf.io.TFRecordWriter(str(path)) as writer:
        for text, label in rows:
            feature = {"text": tf.train.Feature(bytes_list=tf.train.BytesList(value=[text]))}
            if isinstance(label, int):
                feature["label"] = tf.train.Feature(int64_list=tf.train.Int64List(value=[label]))
            else:
                feature["label"] = tf.train.Feature(bytes_list=tf.train.BytesList(value=[label]))
            writer.write(tf.train.Example(features=tf.train.Features(feature=feature)).SerializeToString())
    return str(path)


def test_every_format_reads_the_same_examples(tmp_path):
    rows = [("good film", "pos"), ('bad, "quoted" film', "neg")]
    paths = [
        _write(tmp_path / "a.csv", 'text,label\ngood film,pos\n"bad, ""quoted"" film",neg\n'),
        _write(tmp_path / "a.tsv", 'text\tlabel\ngood film\tpos\nbad, "quoted" film\tneg\n'),
        _write(
            tmp_path / "a.jsonl", "".join(json.dumps({"text": text, "label": label}) + "\n" for text, label in rows)
        ),
        _tfrecord(tmp_path / "a.tfrecord", [(text.encode(), label.encode()) for text, label in rows]),
    ]
    for path in paths:
        examples = read_examples(path)
        assert examples.texts == [t for t, _ in rows], path
        assert examples.labels == ["pos", "neg"], path
        assert read_examples(examples) is examples  # read already: returned as it is


def test_globs_lists_custom_columns_and_integer_labels(tmp_path):
    _write(tmp_path / "s-0.csv", "review,stars\nok,10\n")
    _write(tmp_path / "s-1.csv", "review,stars\nfine,2\nmeh,1\n")
    _tfrecord(tmp_path / "t.tfrecord", [(b"yes", 3)])
    examples = read_examples(str(tmp_path / "s-*.csv"), "review", "stars")
    assert examples.texts == ["ok", "fine", "meh"]
    assert examples.sources == [f"{tmp_path}/s-0.csv:2", f"{tmp_path}/s-1.csv:2", f"{tmp_path}/s-1.csv:3"]
    assert label_names(examples.labels) == ["1", "2", "10"]  # numeric order
    assert read_examples(str(tmp_path / "t.tfrecord")).labels == ["3"]


BAD_ROWS = [
    ("wrong field count", "text,label\nok,pos\ntoo,many,fields\n", "a.csv:3: wrong field count"),
    ("too few fields", "text,label\nok,pos\nlonely\n", "a.csv:3: wrong field count"),
    ("empty text", "text,label\nok,pos\n  ,neg\n", "a.csv:3: missing or empty text"),
    ("missing label", "text,label\nok,pos\nfine,\n", "a.csv:3: missing or invalid label"),
    ("invalid utf-8", b"text,label\nok,pos\nbad \xff byte,neg\n", "a.csv:3: bytes that are not UTF-8"),
]


@pytest.mark.parametrize("name,content,message", BAD_ROWS, ids=[row[0] for row in BAD_ROWS])
def test_bad_rows_name_file_line_and_value(tmp_path, name, content, message):
    path = _write(tmp_path / "a.csv", content)
    with pytest.raises(DataError, match=message) as error:
        read_examples(path)
    assert str(tmp_path) in str(error.value)
    skipped = read_examples(path, skip_bad_rows=True)
    assert skipped.texts == ["ok"] and sum(skipped.skipped.values()) == 1


def test_bad_jsonl_and_tfrecord_rows(tmp_path):
    jsonl = _write(tmp_path / "a.jsonl", '{"text": "ok", "label": "a"}\n{"text": "ok"\n{"label": "b"}\n')
    with pytest.raises(DataError, match=r"a.jsonl:2: not valid JSON"):
        read_examples(jsonl)
    examples = read_examples(jsonl, skip_bad_rows=True)
    assert len(examples) == 1 and examples.skipped == {
        "not valid JSON (Expecting ',' delimiter)": 1,
        "missing or empty text": 1,
    }
    record = _tfrecord(tmp_path / "a.tfrecord", [(b"ok", b"a"), (b"\xffno", b"a")])
    with pytest.raises(DataError, match=r"a.tfrecord:record 1: bytes that are not UTF-8.*xffno"):
        read_examples(record)


def test_a_damaged_tfrecord_file_names_the_first_unreadable_record(tmp_path):
    count = RECORD_BATCH + 10  # records are read in batches: the damage is in the second
    whole = _tfrecord(tmp_path / "whole.tfrecord", [(f"text {i}".encode(), b"a") for i in range(count)])
    assert read_examples(whole).sources[-1] == f"{whole}:record {count - 1}"
    with open(whole, "rb") as f:
        data = f.read()
    cut = _write(tmp_path / "cut.tfrecord", data[:-10])  # the last record cut short
    flipped = bytearray(data)
    flipped[20] ^= 0xFF  # inside the first record's data: its checksum fails
    flipped = _write(tmp_path / "flipped.tfrecord", bytes(flipped))
    # Not a bad row to skip: what follows the damage cannot even be counted.
    for skip in (False, True):
        with pytest.raises(
            DataError,
            match=rf"cut.tfrecord:record {count - 1}: damaged TFRecord file, "
            r"unreadable from this record on \(truncated record at byte \d+\)",
        ):
            read_examples(cut, skip_bad_rows=skip)
        with pytest.raises(DataError, match=r"flipped.tfrecord:record 0: damaged .*corrupted record at byte \d+\)"):
            read_examples(flipped, skip_bad_rows=skip)


def test_missing_and_empty_files(tmp_path):
    with pytest.raises(DataError, match="nope.csv: no such file"):
        read_examples(str(tmp_path / "nope.csv"))
    with pytest.raises(DataError, match="no file matches"):
        read_examples(str(tmp_path / "none-*.csv"))
    with pytest.raises(DataError, match="empty.csv: the file holds no examples"):
        read_examples(_write(tmp_path / "empty.csv", "text,label\n"))
    with pytest.raises(DataError, match="x.csv:1: no column 'text'"):
        read_examples(_write(tmp_path / "x.csv", "body,label\nhi,a\n"))


def test_unseen_evaluation_label(tmp_path):
    path = _write(tmp_path / "eval.csv", "text,label\nfine,pos\nodd,maybe\n")
    examples = read_examples(path)
    with pytest.raises(DataError, match=r"eval.csv:3: label 'maybe' never seen in training"):
        encode_labels(examples, ["neg", "pos"])
    ids = encode_labels(examples, ["neg", "pos"], skip_bad_rows=True)
    assert ids.tolist() == [1] and examples.texts == ["fine"]
    assert examples.skipped == {"label never seen in training": 1}


def test_label_names_round_trip(tmp_path):
    save_label_names(["négatif", "positif"], tmp_path)
    assert load_label_names(tmp_path) == ["négatif", "positif"]
