"""Classify text with an exported SavedModel.

    python -m pipeline.predict --model EXPORT_DIR|MODEL_DIR [FILES ...] [--format jsonl|tsv]

Reads one text per line from the files (or standard input) and writes one
result per line: a JSON object with `text`, `label` and `probabilities` by
class name, or tab-separated `label`, probabilities and text; of a
multi-label model, `labels` (a list; in TSV joined by ";") in place of
`label`; of a regression, `text` and `score`, or tab-separated score and text.
A model of pairs of texts reads two tab-separated texts a line (or --text and
--text-pair) and writes `text_pair` after `text`.
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
    regression's: their scores, `(texts,)`). A model of pairs of texts
    (`pairs`) is called with the second texts too."""

    def __init__(self, path):
        self.path = latest_export(path)
        self._model = tf.saved_model.load(self.path)
        self._serve = self._model.signatures["serving_default"]
        self.label_names = [name.decode() for name in self._model.label_names.numpy()]
        self.regression = "score" in self._serve.structured_outputs
        self.multi_label = "over_threshold" in self._serve.structured_outputs
        self.pairs = "text_pair" in self._serve.structured_input_signature[1]

    def outputs(self, texts, pairs=None):
        """The serving signature's outputs (numpy) of `texts` (and `pairs`)."""
        if self.pairs != (pairs is not None):
            raise ValueError(
                "this model takes pairs of texts: give the second texts too"
                if self.pairs
                else "this model takes one text, not pairs"
            )
        inputs = {"text": tf.constant(list(texts), tf.string)}
        if pairs is not None:
            inputs["text_pair"] = tf.constant(list(pairs), tf.string)
        return {name: value.numpy() for name, value in self._serve(**inputs).items()}

    def __call__(self, texts, pairs=None):
        return self.outputs(texts, pairs)["score" if self.regression else "probabilities"]

    def classify(self, texts, pairs=None):
        """One dict per text: `text` (and `text_pair`), `label` (the most
        probable class) and `probabilities` by class name; of a multi-label
        model, `labels` (those over their thresholds) in place of `label`; of
        a regression, `score` in place of both."""
        texts = list(texts)
        pairs = None if pairs is None else list(pairs)
        if not texts:
            return []
        outputs = self.outputs(texts, pairs)
        results = []
        for index, text in enumerate(texts):
            result = {"text": text} if pairs is None else {"text": text, "text_pair": pairs[index]}
            if self.regression:
                result["score"] = round(float(outputs["score"][index]), 6)
            else:
                row = outputs["probabilities"][index]
                if self.multi_label:
                    over = outputs["over_threshold"][index]
                    result["labels"] = [name for name, on in zip(self.label_names, over) if on]
                else:
                    result["label"] = self.label_names[int(np.argmax(row))]
                result["probabilities"] = {name: round(float(p), 6) for name, p in zip(self.label_names, row)}
            results.append(result)
        return results


def load_classifier(path):
    """The `Classifier` of an export: a SavedModel, an export folder of
    numbered versions (the highest is loaded), or a training run's directory."""
    if tf.io.gfile.exists(os.path.join(path, CONFIG_FILE)):
        path = os.path.join(path, EXPORT_DIR)
    return Classifier(path)


def _rows(paths, pairs):
    # `(text, text_pair or None)` of each line of `paths` (or standard input);
    # a pair's two texts are tab-separated.
    streams = [(p, open_text(p, errors="replace")) for p in paths] if paths else [("<stdin>", sys.stdin)]
    for name, stream in streams:
        for number, line in enumerate(stream, start=1):
            line = line.rstrip("\n")
            if not pairs:
                yield line, None
                continue
            text, tab, text_pair = line.partition("\t")
            if not tab:
                raise ValueError(f"{name}:{number}: this model takes pairs of texts, tab-separated: {line[:200]!r}")
            yield text, text_pair


def main(argv=None):
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0],
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog=__doc__.split("\n\n", 1)[1],
    )
    parser.add_argument(
        "--model", required=True, help="SavedModel, export root of numbered versions, or a training run's directory"
    )
    parser.add_argument(
        "files",
        nargs="*",
        help="text files, one text per line, or of a pair model two texts tab-separated (default: stdin)",
    )
    parser.add_argument("--text", help="one text to classify, in place of files")
    parser.add_argument("--text-pair", help="with --text, its second text (a model of pairs of texts)")
    parser.add_argument("--format", choices=["jsonl", "tsv"], default="jsonl")
    parser.add_argument("--batch-size", type=int, default=256)
    args = parser.parse_args(argv)
    try:
        classifier = load_classifier(args.model)
        if args.text is not None and classifier.pairs != (args.text_pair is not None):
            raise ValueError(f"--text-pair {'is needed' if classifier.pairs else 'is for a model of pairs of texts'}")
        rows = iter([(args.text, args.text_pair)]) if args.text is not None else _rows(args.files, classifier.pairs)
        _write(classifier, rows, args.format, args.batch_size)
    except ValueError as error:
        sys.exit(f"error: {error}")


def _write(classifier, rows, output_format, batch_size):
    names = classifier.label_names
    texts = ["text", "text_pair"] if classifier.pairs else ["text"]
    if output_format == "tsv":
        first = "labels" if classifier.multi_label else "label"
        print("\t".join((["score"] if classifier.regression else [first] + names) + texts))
    while batch := list(itertools.islice(rows, batch_size)):
        pairs = [pair for _, pair in batch] if classifier.pairs else None
        for result in classifier.classify([text for text, _ in batch], pairs):
            if output_format == "jsonl":
                print(json.dumps(result, ensure_ascii=False))
                continue
            columns = [result[name].replace("\t", " ") for name in texts]
            if classifier.regression:
                print("\t".join([f"{result['score']:.6f}"] + columns))
                continue
            probabilities = [f"{result['probabilities'][n]:.6f}" for n in names]
            label = ";".join(result["labels"]) if classifier.multi_label else result["label"]
            print("\t".join([label] + probabilities + columns))


if __name__ == "__main__":
    main()
