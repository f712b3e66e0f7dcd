"""Readers: labelled text from CSV, TSV, JSON Lines and TFRecord files.

Every example keeps where it came from (`file:line`, or `file:record N` for
TFRecord), so a bad row is reported by file, line and value. A bad row stops
the read with a `DataError`, or, with `skip_bad_rows`, is counted by reason
and left out; nothing is dropped without being counted.
"""

import collections
import csv
import dataclasses
import glob
import json
import os
import re

import tensorflow as tf

from pipeline.files import open_text

FORMATS = {
    ".csv": "csv",
    ".tsv": "tsv",
    ".jsonl": "jsonl",
    ".json": "jsonl",
    ".tfrecord": "tfrecord",
    ".tfrecords": "tfrecord",
    ".txt": "text",
}
RECORD_BATCH = 4096
_BLANK_LINE = object()  # the `problem` of a plain text file's blank line


class DataError(ValueError):
    """A bad input file or row; the message names the file, line and value."""


@dataclasses.dataclass
class Examples:
    texts: list  # strings; of pairs (a text pair column), tuples of two
    labels: list  # strings (numbers as their decimal text); with a label delimiter, tuples of them
    sources: list  # "file:line" of each example
    skipped: collections.Counter  # reason -> rows skipped

    def __len__(self):
        return len(self.texts)


def expand_paths(paths):
    """Files named by a path, a glob, or a comma-separated list of either."""
    if isinstance(paths, str):
        paths = [p for p in paths.split(",") if p]
    files = []
    for pattern in paths:
        matches = sorted(tf.io.gfile.glob(pattern)) if glob.has_magic(pattern) else [pattern]
        if not matches:
            raise DataError(f"{pattern}: no file matches this pattern")
        files.extend(matches)
    for path in files:
        if not tf.io.gfile.exists(path) or tf.io.gfile.isdir(path):
            raise DataError(f"{path}: no such file")
    return files


def file_format(path, requested="auto"):
    if requested != "auto":
        if requested not in set(FORMATS.values()):
            raise DataError(f"unknown file format {requested!r}; known: {sorted(set(FORMATS.values()))}")
        return requested
    extension = os.path.splitext(path)[1].lower()
    if extension not in FORMATS:
        raise DataError(f"{path}: cannot tell the format from {extension!r}; set the file format")
    return FORMATS[extension]


def read_examples(
    paths, text_column="text", label_column="label", requested_format="auto", skip_bad_rows=False, label_delimiter=None
):
    """Reads every example of `paths` into memory, validated.

    With `label_column=None` labels are not read (pre-training text); plain
    text files (`.txt`, one document per non-empty line) are read only so.
    With a `label_delimiter`, each label is a list (`labels_of`): a string of
    labels joined by it, a JSON list or a TFRecord feature of several values.
    With `text_column` a pair of names, each text is a pair of texts.
    `Examples` (read already, e.g. the training examples `pipeline.train`
    keeps after holding out its validation slice) are returned as they are.

    Returns:
        `Examples`; `skipped` counts the rows left out by reason (always empty
        unless `skip_bad_rows`).
    Raises:
        DataError: on a missing or empty file, or on a bad row unless
            `skip_bad_rows`.
    """
    if isinstance(paths, Examples):
        return paths
    examples = Examples([], [], [], collections.Counter())
    for path in expand_paths(paths):
        skipped = examples.skipped if skip_bad_rows else None
        rows = file_examples(
            path, text_column, label_column, requested_format, skipped, label_delimiter=label_delimiter
        )
        for text, label, source in rows:
            examples.texts.append(text)
            examples.labels.append(label)
            examples.sources.append(source)
    return examples


def file_examples(
    path, text_column, label_column, requested_format="auto", skipped=None, blank_lines=False, label_delimiter=None
):
    """Yields `(text, label, source)` of every valid row of one file, streamed.

    With `skipped` (a `Counter`), bad rows are counted there by reason and
    left out; without it, the first one raises a `DataError`. With
    `blank_lines`, a plain text file's blank lines are yielded too, as
    `("", "", source)`: they mark where documents end (`pipeline.text_stream`).

    Raises:
        DataError: on a missing or empty file, or on a bad row unless `skipped`.
    """
    kind = file_format(path, requested_format)
    if kind == "text" and isinstance(text_column, tuple):
        raise DataError(f"{path}: plain text has no pairs of texts; use CSV, TSV, JSONL or TFRecord")
    rows = _ROW_READERS[kind](path, text_column, label_column)
    seen = False
    for source, text, label, problem in rows:
        if problem is _BLANK_LINE:
            if blank_lines:
                yield "", "", source
            continue
        seen = True
        if isinstance(label, str):
            label = label.strip()
        lists = label_delimiter is not None and label_column is not None
        if problem is None:
            problem = _check(text, label, text_column, label_column, label_delimiter if lists else None)
        if problem is None and lists:
            label, problem = labels_of(label, label_delimiter, label_column)
        if problem is not None:
            if skipped is None:
                raise DataError(f"{source}: {problem}")
            skipped[problem.split(":")[0]] += 1
            continue
        yield text, "" if label_column is None else label if lists else str(label), source
    if not seen:
        raise DataError(f"{path}: the file holds no examples")


def labels_of(label, delimiter, label_column="label"):
    """`(labels, problem)`: the distinct labels, sorted, of a label list (a
    string of labels joined by `delimiter`, or a list of strings and
    integers), or None and why it is not one."""
    values = label.split(delimiter) if isinstance(label, str) else label
    labels = [value.strip() if isinstance(value, str) else value for value in values]
    if not labels or any(
        isinstance(value, bool) or not isinstance(value, (str, int)) or value == "" for value in labels
    ):
        what = "empty" if not labels else "malformed"
        return None, f"{what} label list: {label_column}={label!r}"
    return tuple(sorted({str(value) for value in labels})), None


def _check(text, label, text_column, label_column, label_delimiter=None):
    # With a `label_delimiter`, a label may be a list too (`labels_of` checks its values).
    if isinstance(text_column, tuple):  # a pair: each text checked, by its column
        for column, value in zip(text_column, text):
            if problem := _check(value, label, column, label_column, label_delimiter):
                return problem
        return None
    if not isinstance(text, str) or not text.strip():
        return f"missing or empty text: {text_column}={text!r}"
    kinds = (str, int, float, list) if label_delimiter is not None else (str, int, float)
    if label_column is not None and (
        isinstance(label, bool) or not isinstance(label, kinds) or str(label).strip() == ""
    ):
        return f"missing or invalid label: {label_column}={label!r}"
    if isinstance(label, list):
        label = label_delimiter.join(str(value) for value in label)
    fields = ((text_column, text),) if label_column is None else ((text_column, text), (label_column, str(label)))
    for name, value in fields:
        # surrogateescape turns undecodable bytes into lone surrogates.
        if any("\udc80" <= ch <= "\udcff" for ch in value):
            raw = value.encode("utf-8", "surrogateescape")
            return f"bytes that are not UTF-8: {name}={raw!r}"
    return None


def _delimited_rows(path, text_column, label_column, delimiter):
    with open_text(path, errors="surrogateescape", newline="") as f:
        reader = csv.DictReader(f, delimiter=delimiter)
        header = reader.fieldnames or []
        for column in (*_names(text_column), label_column):
            if column is not None and column not in header:
                raise DataError(f"{path}:1: no column {column!r} in header {header}")
        for row in reader:
            source = f"{path}:{reader.line_num}"
            if None in row or None in row.values():
                fields = len(row) - (None in row) + len(row.get(None) or [])
                values = [v for k, v in row.items() if k is not None and v is not None]
                yield source, None, None, (f"wrong field count: {fields} fields, header has {len(header)}: {values!r}")
                continue
            yield source, _value(row.get, text_column), row.get(label_column), None


def _csv_rows(path, text_column, label_column):
    return _delimited_rows(path, text_column, label_column, ",")


def _tsv_rows(path, text_column, label_column):
    return _delimited_rows(path, text_column, label_column, "\t")


def _jsonl_rows(path, text_column, label_column):
    with open_text(path, errors="surrogateescape") as f:
        for number, line in enumerate(f, start=1):
            source = f"{path}:{number}"
            if not line.strip():
                continue
            try:
                record = json.loads(line)
            except json.JSONDecodeError as error:
                yield source, None, None, f"not valid JSON ({error.msg}): {line.strip()[:200]!r}"
                continue
            if not isinstance(record, dict):
                yield source, None, None, f"not a JSON object: {line.strip()[:200]!r}"
                continue
            yield source, _value(record.get, text_column), record.get(label_column), None


def _tfrecord_rows(path, text_column, label_column):
    # Records come in batches: fetched one at a time from tf.data they cost
    # about 20x their parsing.
    batches = tf.data.TFRecordDataset(path).batch(RECORD_BATCH).as_numpy_iterator()
    index = 0
    while True:
        try:
            batch = next(batches)
        except StopIteration:
            return
        except tf.errors.DataLossError as error:
            raise DataError(_damaged(path, error)) from None
        for record in batch:
            source = f"{path}:record {index}"
            index += 1
            try:
                example = tf.train.Example.FromString(record)
            except Exception:  # protobuf raises its own DecodeError type
                yield source, None, None, f"not a tf.train.Example: {record[:100]!r}"
                continue
            features = example.features.feature
            text = _value(lambda name: _feature_value(features, name), text_column)
            yield source, text, _feature_value(features, label_column), None


def _names(text_column):
    # The text columns: one, or a pair's two.
    return text_column if isinstance(text_column, tuple) else (text_column,)


def _value(get, text_column):
    # The text of a row, or its pair of texts, by `get(column)`.
    return tuple(get(name) for name in text_column) if isinstance(text_column, tuple) else get(text_column)


def _damaged(path, error):
    # A damaged record ends what can be read of the file: not a row to skip,
    # as the records after it cannot even be counted.
    readable = 0
    try:
        for _ in tf.data.TFRecordDataset(path):
            readable += 1
    except tf.errors.DataLossError:
        pass
    where = re.search(r"(\w+) record at (\d+)", error.message)
    return (
        f"{path}:record {readable}: damaged TFRecord file, unreadable from this record on"
        f" ({f'{where[1]} record at byte {where[2]}' if where else error.message})"
    )


def _feature_value(features, name):
    # One value as itself; several (a multi-label example's labels) as a list.
    if name not in features:
        return None
    feature = features[name]
    for kind in ("int64_list", "bytes_list"):
        values = getattr(feature, kind).value if feature.HasField(kind) else []
        if len(values) > 1:
            return [int(v) if kind == "int64_list" else v.decode("utf-8", "surrogateescape") for v in values]
    if feature.HasField("int64_list") and len(feature.int64_list.value) == 1:
        return int(feature.int64_list.value[0])
    if feature.HasField("float_list") and len(feature.float_list.value) == 1:
        return float(feature.float_list.value[0])
    if feature.HasField("bytes_list") and len(feature.bytes_list.value) == 1:
        return feature.bytes_list.value[0].decode("utf-8", "surrogateescape")
    return None


def _text_rows(path, text_column, label_column):
    if label_column is not None:
        raise DataError(f"{path}: plain text has no labels; use CSV, TSV, JSONL or TFRecord")
    with open_text(path, errors="surrogateescape") as f:
        for number, line in enumerate(f, start=1):
            # A blank line is no example; file_examples passes it on where it ends a document.
            yield f"{path}:{number}", line.rstrip("\n"), None, None if line.strip() else _BLANK_LINE


_ROW_READERS = {
    "text": _text_rows,
    "csv": _csv_rows,
    "tsv": _tsv_rows,
    "jsonl": _jsonl_rows,
    "tfrecord": _tfrecord_rows,
}
