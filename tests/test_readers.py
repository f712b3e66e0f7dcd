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
            values = label if isinstance(label, list) else [label]
            if isinstance(values[0], int):
                feature["label"] = tf.train.Feature(int64_list=tf.train.Int64List(value=values))
            elif isinstance(values[0], float):
                feature["label"] = tf.train.Feature(float_list=tf.train.FloatList(value=values))
            else:
                feature["label"] = tf.train.Feature(bytes_list=tf.train.BytesList(value=values))
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


def test_label_lists_of_every_format_and_numbers_for_a_regression(tmp_path):
    rows = [("a match and a song", ["sport", "music"]), ("soup", ["food"]), ("more soup", ["food", "food"])]
    lists = [("sport", "music"), ("food",), ("food",)]  # distinct and sorted: music < sport
    expected = [tuple(sorted(labels)) for labels in lists]
    paths = [
        _write(tmp_path / "a.csv", "text,label\na match and a song,sport; music\nsoup,food\nmore soup,food;food\n"),
        _write(tmp_path / "a.jsonl", "".join(json.dumps({"text": t, "label": labels}) + "\n" for t, labels in rows)),
        _tfrecord(tmp_path / "a.tfrecord", [(t.encode(), [x.encode() for x in labels]) for t, labels in rows]),
    ]
    for path in paths:
        assert read_examples(path, label_delimiter=";").labels == expected, path
    assert read_examples(paths[0], label_delimiter="|").labels == [("sport; music",), ("food",), ("food;food",)]
    # Without a delimiter, a list is no label.
    with pytest.raises(DataError, match=r"a.jsonl:1: missing or invalid label: label=\['sport', 'music'\]"):
        read_examples(paths[1])
    bad = {
        "b.csv": ("text,label\nok,a\nno,a;;b\n", r"b.csv:3: malformed label list: label='a;;b'"),
        "b.jsonl": ('{"text": "ok", "label": ["a"]}\n{"text": "no", "label": []}\n', r"b.jsonl:2: empty label list"),
        "c.jsonl": ('{"text": "no", "label": ["a", 1.5]}\n', r"c.jsonl:1: malformed label list: label=\['a', 1.5\]"),
    }
    for name, (content, message) in bad.items():
        path = _write(tmp_path / name, content)
        with pytest.raises(DataError, match=message):
            read_examples(path, label_delimiter=";")
        assert sum(read_examples(path, skip_bad_rows=True, label_delimiter=";").skipped.values()) == 1
    # Numbers (a regression's labels) in JSON Lines and TFRecord, as their decimal text.
    scores = _write(tmp_path / "s.jsonl", '{"text": "a", "label": 2.5}\n{"text": "b", "label": -1}\n')
    assert read_examples(scores).labels == ["2.5", "-1"]
    assert read_examples(_tfrecord(tmp_path / "s.tfrecord", [(b"a", 0.5)])).labels == ["0.5"]


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
