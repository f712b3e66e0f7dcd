"""Classify text with an exported SavedModel.

    python -m pipeline.predict --model EXPORT_DIR|MODEL_DIR [FILES ...] [--format jsonl|tsv]

Reads one text per line from the files (or standard input) and writes one
result per line: a JSON object with `text`, `label` and `probabilities` by
class name, or tab-separated `label`, probabilities and text; of a
multi-label model, `labels` (a list; in TSV joined by ";") in place of
`label`; of a regression, `text` and `score`, or tab-separated score and text.
"""

import argparse
import itertools
import json
import os
import sys

import numpy as np
import tensorflow as tf
import tensorflow_text  # noqa: F401  registers the tokenizer ops the SavedModel uses

from pipeline.export import latest_export
from pipeline.files import open_text
from pipeline.layout import CONFIG_FILE, EXPORT_DIR


class Classifier:
    """An exported SavedModel, tokenizer included: called with strings, it
    returns their class probabilities, columns in `label_names` order (a
    regression's: their scores, `(texts,)`)."""

    def __init__(self, path):
        self.path = latest_export(path)
        self._model = tf.saved_model.load(self.path)
        self._serve = self._model.signatures["serving_default"]
        self.label_names = [name.decode() for name in self._model.label_names.numpy()]
        self.regression = "score" in self._serve.structured_outputs
        self.multi_label = "over_threshold" in self._serve.structured_outputs

    def __call__(self, texts):
        outputs = self._serve(text=tf.constant(list(texts), tf.string))
        return outputs["score" if self.regression else "probabilities"].numpy()

    def classify(self, texts):
        """One dict per text: `text`, `label` (the most probable class) and
        `probabilities` by class name; of a multi-label model, `labels` (those
        over their thresholds) in place of `label`; of a regression, `text`
        and `score`."""
        texts = list(texts)
        if self.regression:
            scores = self(texts) if texts else []
            return [{"text": text, "score": round(float(score), 6)} for text, score in zip(texts, scores)]
        if self.multi_label:
            outputs = self._serve(text=tf.constant(texts, tf.string)) if texts else None
            rows = zip(outputs["probabilities"].numpy(), outputs["over_threshold"].numpy()) if texts else []
            return [
                {
                    "text": text,
                    "labels": [name for name, over in zip(self.label_names, mask) if over],
                    "probabilities": {name: round(float(p), 6) for name, p in zip(self.label_names, row)},
                }
                for text, (row, mask) in zip(texts, rows)
            ]
        probabilities = self(texts) if texts else np.zeros([0, len(self.label_names)], np.float32)
        return [
            {
                "text": text,
                "label": self.label_names[int(np.argmax(row))],
                "probabilities": {name: round(float(p), 6) for name, p in zip(self.label_names, row)},
            }
            for text, row in zip(texts, probabilities)
        ]


def load_classifier(path):
    """The `Classifier` of an export: a SavedModel, an export folder of
    numbered versions (the highest is loaded), or a training run's directory."""
    if tf.io.gfile.exists(os.path.join(path, CONFIG_FILE)):
        path = os.path.join(path, EXPORT_DIR)
    return Classifier(path)


def _lines(paths):
    streams = [open_text(p, errors="replace") for p in paths] if paths else [sys.stdin]
    for stream in streams:
        for line in stream:
            yield line.rstrip("\n")


def main(argv=None):
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0],
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog=__doc__.split("\n\n", 1)[1],
    )
    parser.add_argument(
        "--model", required=True, help="SavedModel, export root of numbered versions, or a training run's directory"
    )
    parser.add_argument("files", nargs="*", help="text files, one text per line (default: stdin)")
    parser.add_argument("--format", choices=["jsonl", "tsv"], default="jsonl")
    parser.add_argument("--batch-size", type=int, default=256)
    args = parser.parse_args(argv)
    try:
        classifier = load_classifier(args.model)
    except ValueError as error:
        sys.exit(f"error: {error}")
    names = classifier.label_names
    if args.format == "tsv":
        first = "labels" if classifier.multi_label else "label"
        print("\t".join((["score"] if classifier.regression else [first] + names) + ["text"]))
    lines = _lines(args.files)
    while batch := list(itertools.islice(lines, args.batch_size)):
        for result in classifier.classify(batch):
            if args.format == "jsonl":
                print(json.dumps(result, ensure_ascii=False))
            else:
                text = result["text"].replace("\t", " ")
                if classifier.regression:
                    print(f"{result['score']:.6f}\t{text}")
                    continue
                probabilities = [f"{result['probabilities'][n]:.6f}" for n in names]
                label = ";".join(result["labels"]) if classifier.multi_label else result["label"]
                print("\t".join([label] + probabilities + [text]))


if __name__ == "__main__":
    main()
