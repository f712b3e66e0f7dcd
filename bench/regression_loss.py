"""A regression's loss: squared error (the default) against the Huber loss, side by side on one corpus.

    .venv/bin/pip install -e ".[bench]"
    .venv/bin/python bench/regression_loss.py [--corpus sentiment_scores_5000] [--deltas 1.0,0.5]

The default run (`--task regression`) on a corpus of bench/tasks.py, then,
for each delta, the same run's pre-training fine-tuned with
`--huber-delta` (as `--init-from RUN/pretrain --pretrain-epochs 0`, which
trains what one command would). Every export is scored on the test split;
each Huber arm's differences from the squared error's come with a 95%
paired bootstrap interval over the test texts.
"""

import argparse
import json
import os
import shutil
import time

import common  # noqa: F401 (the repository on the path, TensorFlow quiet)
import numpy as np
import tasks

from common import write_results
from pipeline.config import Config, override
from pipeline.predict import load_classifier
from pipeline.train import train_and_evaluate


def scores(directory, texts):
    """The export's score of every text."""
    classifier = load_classifier(directory)
    return np.concatenate([classifier.outputs(texts[i : i + 256])["score"] for i in range(0, len(texts), 256)])


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cache", default=os.path.join("bench", "cache"), help="where the corpora are fetched to")
    parser.add_argument("--corpus", default="sentiment_scores_5000", help="a regression corpus of bench/tasks.py")
    parser.add_argument("--deltas", default="1.0,0.5", help="the Huber arms' deltas, in standard deviations")
    parser.add_argument("--out", default=os.path.join("bench", "results", "regression_loss.json"))
    args = parser.parse_args()
    task, fetch = tasks.CORPORA[args.corpus]
    if task != "regression":
        parser.error(f"{args.corpus} is a {task} corpus")
    train_path, test_path = fetch(args.cache)
    texts, labels = tasks.read(test_path)
    runs = os.path.join(args.cache, "runs", "regression_loss", args.corpus)
    shutil.rmtree(runs, ignore_errors=True)  # never resume a run of other code
    results, baseline = {"corpus": args.corpus}, None
    for delta in [0.0] + [float(value) for value in args.deltas.split(",")]:
        arm = "squared error" if not delta else f"huber {delta}"
        directory = os.path.join(runs, arm.replace(" ", "_"))
        values = {"data": {"task": "regression"}}
        start = time.perf_counter()
        if not delta:
            train_and_evaluate(override(Config(), values), directory, train_path, test_path)
        else:
            values["train"] = {"huber_delta": delta, "pretrain_epochs": 0}
            pretrained = os.path.join(runs, "squared_error", "pretrain")
            train_and_evaluate(override(Config(), values), directory, train_path, test_path, init_from=pretrained)
        seconds = time.perf_counter() - start
        outputs = scores(directory, texts)
        with open(os.path.join(directory, "best_epoch.json")) as f:
            kept = json.load(f)["epoch"]
        figures = tasks.scored("regression", labels, outputs, baseline)
        versus = figures.pop("vs_tfidf", None)
        results[arm] = {**figures, "kept_epoch": kept, "seconds": seconds}
        if versus:
            results[arm]["vs_squared_error"] = versus
        baseline = outputs if baseline is None else baseline
        print(arm, json.dumps(results[arm]), flush=True)
    write_results(results, args.out)


if __name__ == "__main__":
    main()
