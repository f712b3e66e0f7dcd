"""A few labels and much unlabelled text: the default run with --unlabelled against TF-IDF + LR.

    .venv/bin/pip install -e ".[bench]"
    .venv/bin/python bench/semi_supervised.py [--corpora tweets,chinese_reviews,movie_reviews]
                                              [--draws 500,2000] [--seeds 0,1,2] [--skip-keras-hub]

For each corpus of bench/corpora.py with at least 10k training texts, and
each draw size and seed: a stratified draw of that many labelled training
texts (`random.Random(seed)`), the rest of the training split written as
plain text with its labels dropped (a text a line), and the same test split
for every arm:

- `tfidf_logistic_regression`: TF-IDF + LR (bench/accuracy.py's) on the draw;
- `default`: `pipeline.train --train DRAW --eval TEST`, pre-training on the draw's texts alone;
- `default + unlabelled`: the same with `--unlabelled REST`;
- `keras-hub AlbertClassifier`: on the draw, in the wall time of `default`
  (bench/corpora.py's settings; `--skip-keras-hub` leaves it out).

Each arm's accuracy and macro-F1 by seed, their mean and spread (lowest,
highest), and every difference from TF-IDF on the same draw with its 95%
paired bootstrap interval. TF-IDF + LR on all the labels of the training
split is printed beside them: the stretch goal of issue 65.
"""

import argparse
import csv
import json
import os
import random
import shutil
import statistics
import time

from accuracy import read, this_project, tfidf_logistic_regression
from common import write_results
from corpora import CORPORA, keras_hub_in_time, timed

MIN_TRAINING_TEXTS = 10_000


def draw(train_path, size, seed, directory):
    """`(labelled csv, unlabelled txt)`: a stratified draw of `size` rows of
    the training split and the other rows' texts, one a line, labels dropped."""
    texts, labels = read(train_path)
    rng = random.Random(seed)
    chosen = set()
    for label in sorted(set(labels)):
        indices = [index for index, value in enumerate(labels) if value == label]
        chosen.update(rng.sample(indices, max(1, round(size * len(indices) / len(labels)))))
    os.makedirs(directory, exist_ok=True)
    labelled, unlabelled = os.path.join(directory, "labelled.csv"), os.path.join(directory, "unlabelled.txt")
    rows = [(texts[index], labels[index]) for index in sorted(chosen)]
    rng.shuffle(rows)
    with open(labelled, "w", encoding="utf-8", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(["text", "label"])
        writer.writerows(rows)
    with open(unlabelled, "w", encoding="utf-8") as f:
        for index, text in enumerate(texts):
            if index not in chosen and text.strip():
                f.write(" ".join(text.split()) + "\n")  # a text a line
    return labelled, unlabelled


def summary(cells):
    """Mean and spread of each arm's scores over the seeds of one draw size."""
    arms = {}
    for cell in cells:
        for arm, value in cell.items():
            if isinstance(value, dict) and "accuracy" in value:
                arms.setdefault(arm, []).append(value)
    result = {}
    for arm, values in arms.items():
        result[arm] = {}
        for metric in ("accuracy", "macro_f1"):
            scores = [value[metric] for value in values]
            result[arm][metric] = {"mean": statistics.fmean(scores), "lowest": min(scores), "highest": max(scores)}
        differences = [
            value["vs_tfidf_logistic_regression"]["accuracy"]["difference"]
            for value in values
            if "vs_tfidf_logistic_regression" in value
        ]
        if differences:
            result[arm]["accuracy_minus_tfidf"] = {
                "mean": statistics.fmean(differences),
                "lowest": min(differences),
                "highest": max(differences),
            }
    return result


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--cache", default=os.path.join("bench", "cache"), help="where the corpora are fetched to")
    parser.add_argument(
        "--corpora", default="tweets,chinese_reviews,movie_reviews", help="comma-separated, of bench/corpora.py's"
    )
    parser.add_argument("--draws", default="500,2000", help="labelled training texts per draw")
    parser.add_argument("--seeds", default="0,1,2", help="one draw per seed")
    parser.add_argument("--config", default="{}", help="JSON config overrides of both of this project's arms")
    parser.add_argument("--skip-keras-hub", action="store_true", help="leave out keras-hub's classifier")
    parser.add_argument("--out", default=os.path.join("bench", "results", "semi_supervised.json"))
    args = parser.parse_args()
    overrides = json.loads(args.config)
    results = {}
    for name in args.corpora.split(","):
        train_path, test_path = CORPORA[name](args.cache)
        texts, labels = read(train_path)
        test_texts, test_labels = read(test_path)
        if len(texts) < MIN_TRAINING_TEXTS:
            print(f"== {name}: {len(texts)} training texts, fewer than {MIN_TRAINING_TEXTS}: left out")
            continue
        everything = tfidf_logistic_regression(train_path, test_path)
        corpus = {
            "training_texts": len(texts),
            "test_texts": len(test_texts),
            "classes": len(set(labels)),
            "tfidf_logistic_regression_on_all_labels": {key: everything[key] for key in ("accuracy", "macro_f1")},
            "draws": {},
        }
        print(
            f"== {name}: {len(texts)} training, {len(test_texts)} test texts; TF-IDF + LR on all labels "
            f"{everything['accuracy']:.4f} / {everything['macro_f1']:.4f}",
            flush=True,
        )
        for size in (int(value) for value in args.draws.split(",")):
            cells = {}
            for seed in (int(value) for value in args.seeds.split(",")):
                runs = os.path.join(args.cache, "runs", "semi_supervised", name, f"{size}_{seed}")
                labelled, unlabelled = draw(train_path, size, seed, os.path.join(runs, "data"))
                start = time.perf_counter()
                baseline = tfidf_logistic_regression(labelled, test_path)
                baseline["seconds"] = time.perf_counter() - start
                cell = {"tfidf_logistic_regression": baseline}

                arms = {
                    "default": overrides,
                    "default + unlabelled": {
                        **overrides,
                        "pretrain": {**overrides.get("pretrain", {}), "unlabelled": unlabelled},
                    },
                }
                for arm, arm_overrides in arms.items():
                    directory = os.path.join(runs, arm.replace(" ", "_").replace("+", "plus"))
                    shutil.rmtree(directory, ignore_errors=True)  # never resume a run of other code
                    cell[arm] = timed(
                        lambda: this_project(labelled, test_path, directory, None, arm_overrides),
                        test_labels,
                        baseline,
                    )
                    print(
                        f"{name} {size} seed {seed} {arm}: {cell[arm]['accuracy']:.4f} in "
                        f"{cell[arm]['seconds']:.0f} s (TF-IDF {baseline['accuracy']:.4f})",
                        flush=True,
                    )
                if not args.skip_keras_hub:
                    cell["keras-hub AlbertClassifier"] = timed(
                        lambda: keras_hub_in_time(
                            labelled, test_path, os.path.join(runs, "default"), cell["default"]["seconds"]
                        ),
                        test_labels,
                        baseline,
                    )
                for value in cell.values():
                    value.pop("predictions", None)
                cells[seed] = cell
            corpus["draws"][size] = {"by_seed": cells, "summary": summary(cells.values())}
        results[name] = corpus
        write_results(results, args.out)  # after each corpus: a long run keeps what it measured
    print(f"\n{'corpus':<18}{'labels':>7}  {'arm':<28}{'accuracy (lowest-highest)':>28}{'minus TF-IDF':>14}")
    for name, corpus in results.items():
        for size, draws in corpus["draws"].items():
            for arm, value in draws["summary"].items():
                accuracy = value["accuracy"]
                versus = value.get("accuracy_minus_tfidf", {}).get("mean")
                print(
                    f"{name:<18}{size:>7}  {arm:<28}{accuracy['mean']:>10.4f} ({accuracy['lowest']:.4f}-"
                    f"{accuracy['highest']:.4f}){'' if versus is None else f'{versus:+14.4f}'}"
                )
        print(
            f"{name:<18}{'all':>7}  {'tfidf_logistic_regression':<28}"
            f"{corpus['tfidf_logistic_regression_on_all_labels']['accuracy']:>10.4f}"
        )


if __name__ == "__main__":
    main()
