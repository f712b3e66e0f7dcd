"""Classify text with an exported SavedModel.

    python -m pipeline.predict --model EXPORT_DIR [FILES ...] [--format jsonl|tsv]

Reads one text per line from the files (or standard input) and writes one
result per line: a JSON object with `text`, `label` and `probabilities` by
class name, or tab-separated `label`, probabilities and text.
"""

import argparse
import itertools
import json
import sys

import tensorflow as tf
import tensorflow_text  # noqa: F401  registers the tokenizer ops the SavedModel uses

from pipeline.export import latest_export
from pipeline.files import open_text


def load_classifier(path):
    """The `serving_default` signature and class names of an export."""
    model = tf.saved_model.load(latest_export(path))
    return model.signatures["serving_default"], [n.decode() for n in model.label_names.numpy()]


def classify(serve, names, texts):
    """One result dict per text."""
    outputs = serve(text=tf.constant(texts, tf.string))
    results = []
    for text, label, probabilities in zip(texts, outputs["label"].numpy(), outputs["probabilities"].numpy()):
        results.append({"text": text, "label": label.decode(),
                        "probabilities": {n: round(float(p), 6) for n, p in zip(names, probabilities)}})
    return results


def _lines(paths):
    streams = [open_text(p, errors="replace") for p in paths] if paths else [sys.stdin]
    for stream in streams:
        for line in stream:
            yield line.rstrip("\n")


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter,
                                     epilog=__doc__.split("\n\n", 1)[1])
    parser.add_argument("--model", required=True, help="SavedModel, or export root of numbered versions")
    parser.add_argument("files", nargs="*", help="text files, one text per line (default: stdin)")
    parser.add_argument("--format", choices=["jsonl", "tsv"], default="jsonl")
    parser.add_argument("--batch-size", type=int, default=256)
    args = parser.parse_args(argv)
    try:
        serve, names = load_classifier(args.model)
    except ValueError as error:
        sys.exit(f"error: {error}")
    if args.format == "tsv":
        print("\t".join(["label"] + names + ["text"]))
    lines = _lines(args.files)
    while batch := list(itertools.islice(lines, args.batch_size)):
        for result in classify(serve, names, batch):
            if args.format == "jsonl":
                print(json.dumps(result, ensure_ascii=False))
            else:
                probabilities = [f"{result['probabilities'][n]:.6f}" for n in names]
                text = result["text"].replace("\t", " ")
                print("\t".join([result["label"]] + probabilities + [text]))


if __name__ == "__main__":
    main()
