"""Pre-train then fine-tune, against training from scratch and TF-IDF + LR.

    .venv/bin/pip install -e ".[bench]"
    .venv/bin/python bench/pretraining.py [--cache bench/cache] [--pretrain-epochs 3] [--finetune-epochs 3] \
        [--config '{"train": {"seed": 2}}']

On the tweet corpus of `bench/accuracy.py` (same cache, same 80/20 split):
1. TF-IDF + logistic regression, as in `bench/accuracy.py`;
2. this project's default model trained from scratch for the config's epochs;
3. masked-language-model pre-training on the training texts (labels unused)
   with the same model config, then `--init-from` fine-tuning
   (`--pretrain-epochs`, `--finetune-epochs`; the seconds of each arm are
   printed: 3 + 3 epochs took 3.1x-3.7x the time of 3 from scratch here).
(2) and (3) are trained and scored as in `bench/accuracy.py`: best epoch on a
validation slice of the training split, test texts through the export.
Prints accuracy, macro-F1 and seconds of each, and writes them as JSON after
every arm (a long run keeps what it finished); at the end, each Transformer
arm against TF-IDF and pre-training against from scratch, with 95% paired
bootstrap intervals (`compare` of `bench/accuracy.py`). `--config` overrides the
config of (2) and of both stages of (3), as in `bench/accuracy.py`.
"""

import argparse
import json
import os
import shutil
import time

from accuracy import compare, fetch_corpus, print_table, read, tfidf_logistic_regression, this_project
from common import write_results


def pretrain_then_finetune(train_path, test_path, directory, pretrain_epochs, finetune_epochs, overrides=None):
    from pipeline.config import Config, override
    from pipeline.pretrain import pretrain

    start = time.perf_counter()
    pretrain_dir = os.path.join(directory, "pretrain")
    config = override(override(Config(), overrides or {}), {"train": {"epochs": pretrain_epochs}})
    masked = pretrain(config, pretrain_dir, train_path)
    pretrain_seconds = time.perf_counter() - start
    result = this_project(train_path, test_path, os.path.join(directory, "finetune"), finetune_epochs,
                          overrides, init_from=pretrain_dir)
    return {**result, "pretrain_epochs": pretrain_epochs, "finetune_epochs": finetune_epochs,
            "pretrain_seconds": pretrain_seconds, "masked_accuracy": masked["masked_accuracy"],
            "most_frequent_token_accuracy": masked["most_frequent_token_accuracy"]}


def add_comparisons(results, predictions, test_labels):
    """Adds `vs_<arm>` differences with bootstrap intervals to the finished arms."""
    pairs = [("from_scratch", "tfidf_logistic_regression"), ("pretrain_then_finetune", "tfidf_logistic_regression"),
             ("pretrain_then_finetune", "from_scratch")]
    for name, baseline in pairs:
        if name in results and baseline in results:
            results[name][f"vs_{baseline}"] = compare(test_labels, predictions[name], predictions[baseline])


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--cache", default=os.path.join("bench", "cache"),
                        help="where the corpus is fetched to and the runs are kept")
    parser.add_argument("--scratch-epochs", type=int, help="epochs from scratch (default: the config's)")
    parser.add_argument("--pretrain-epochs", type=int, default=3, help="masked-LM epochs (default 3)")
    parser.add_argument("--finetune-epochs", type=int, default=3,
                        help="classification epochs after pre-training (default 3)")
    parser.add_argument("--config", type=json.loads, metavar="JSON",
                        help="JSON overriding this project's config in both arms, e.g. "
                        "'{\"train\": {\"seed\": 2}}'")
    parser.add_argument("--out", default=os.path.join("bench", "results", "pretraining.json"),
                        help="JSON of every arm's scores and times")
    args = parser.parse_args()
    train_path, test_path = fetch_corpus(args.cache)
    runs = os.path.join(args.cache, "pretraining_runs")
    shutil.rmtree(runs, ignore_errors=True)  # never resume a run of other code
    results, predictions = {}, {}
    for name, run in [
        ("tfidf_logistic_regression", lambda: tfidf_logistic_regression(train_path, test_path)),
        ("from_scratch", lambda: this_project(train_path, test_path, os.path.join(runs, "scratch"),
                                              args.scratch_epochs, args.config)),
        ("pretrain_then_finetune", lambda: pretrain_then_finetune(
            train_path, test_path, runs, args.pretrain_epochs, args.finetune_epochs, args.config)),
    ]:
        start = time.perf_counter()
        results[name] = run()
        results[name]["seconds"] = time.perf_counter() - start
        predictions[name] = results[name].pop("predictions")
        print(name, results[name], flush=True)
        write_results(results, args.out)
    with open(os.path.join(args.cache, "pretraining_predictions.json"), "w") as f:  # for comparisons after the fact
        json.dump(predictions, f)
    add_comparisons(results, predictions, read(test_path)[1])
    write_results(results, args.out)
    print_table(results)


if __name__ == "__main__":
    main()
