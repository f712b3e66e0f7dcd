"""Pre-training on the training texts, against training from scratch and TF-IDF + LR.

    .venv/bin/pip install -e ".[bench]"
    .venv/bin/python bench/pretraining.py [--cache bench/cache] [--pretrain-epochs N] [--finetune-epochs N] \
        [--config '{"train": {"seed": 2}}']

On the tweet corpus of `bench/accuracy.py` (same cache, same 80/20 split):
1. TF-IDF + logistic regression, as in `bench/accuracy.py`;
2. this project's default model trained from scratch (`train.pretrain_epochs`
   0) for the config's epochs;
3. the default model with masked-language-model pre-training on the training
   texts first (labels unused), `pipeline.train --pretrain-epochs N` in one
   run (`--pretrain-epochs`, default: the config's; `--finetune-epochs`,
   default: the config's epochs).
(2) and (3) are trained and scored as in `bench/accuracy.py`: best epoch on a
validation slice of the training split, test texts through the export.
Prints accuracy, macro-F1 and seconds of each (and the masked-token accuracy
of the pre-training), and writes them as JSON after every arm (a long run
keeps what it finished); at the end, each Transformer arm against TF-IDF and
pre-training against from scratch, with 95% paired bootstrap intervals
(`compare` of `bench/accuracy.py`). `--config` overrides the config of (2)
and (3), as in `bench/accuracy.py`.
"""

import argparse
import json
import os
import shutil
import time

from accuracy import compare, fetch_corpus, print_table, read, tfidf_logistic_regression, this_project
from common import write_results


def pretrain_then_finetune(train_path, test_path, directory, pretrain_epochs, finetune_epochs, overrides=None):
    """`this_project` with `train.pretrain_epochs` (the config's when None)."""
    from pipeline.config import Config, override
    from pipeline.layout import PRETRAIN_DIR, PRETRAIN_METRICS_FILE

    overrides = override(Config(), overrides or {}).to_dict()
    if pretrain_epochs is not None:
        overrides["train"]["pretrain_epochs"] = pretrain_epochs
    if not overrides["train"]["pretrain_epochs"]:
        raise ValueError("--pretrain-epochs must be 1 or more")
    result = this_project(train_path, test_path, directory, finetune_epochs, overrides)
    with open(os.path.join(directory, PRETRAIN_DIR, PRETRAIN_METRICS_FILE)) as f:
        masked = json.load(f)
    return {
        **result,
        "pretrain_epochs": overrides["train"]["pretrain_epochs"],
        "finetune_epochs": result["epochs"],
        "masked_accuracy": masked["masked_accuracy"],
        "most_frequent_token_accuracy": masked["most_frequent_token_accuracy"],
    }


def add_comparisons(results, predictions, test_labels):
    """Adds `vs_<arm>` differences with bootstrap intervals to the finished arms."""
    pairs = [
        ("from_scratch", "tfidf_logistic_regression"),
        ("pretrain_then_finetune", "tfidf_logistic_regression"),
        ("pretrain_then_finetune", "from_scratch"),
    ]
    for name, baseline in pairs:
        if name in results and baseline in results:
            results[name][f"vs_{baseline}"] = compare(test_labels, predictions[name], predictions[baseline])


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--cache", default=os.path.join("bench", "cache"), help="where the corpus is fetched to and the runs are kept"
    )
    parser.add_argument("--scratch-epochs", type=int, help="epochs from scratch (default: the config's)")
    parser.add_argument("--pretrain-epochs", type=int, help="masked-LM epochs (default: the config's)")
    parser.add_argument(
        "--finetune-epochs", type=int, help="classification epochs after pre-training (default: the config's)"
    )
    parser.add_argument(
        "--config",
        type=json.loads,
        metavar="JSON",
        help='JSON overriding this project\'s config in both arms, e.g. \'{"train": {"seed": 2}}\'',
    )
    parser.add_argument(
        "--out",
        default=os.path.join("bench", "results", "pretraining.json"),
        help="JSON of every arm's scores and times",
    )
    args = parser.parse_args()
    train_path, test_path = fetch_corpus(args.cache)
    runs = os.path.join(args.cache, "pretraining_runs")
    shutil.rmtree(runs, ignore_errors=True)  # never resume a run of other code
    results, predictions = {}, {}
    config = args.config or {}
    scratch = {**config, "train": {**config.get("train", {}), "pretrain_epochs": 0}}
    for name, run in [
        ("tfidf_logistic_regression", lambda: tfidf_logistic_regression(train_path, test_path)),
        (
            "from_scratch",
            lambda: this_project(train_path, test_path, os.path.join(runs, "scratch"), args.scratch_epochs, scratch),
        ),
        (
            "pretrain_then_finetune",
            lambda: pretrain_then_finetune(
                train_path,
                test_path,
                os.path.join(runs, "pretrained"),
                args.pretrain_epochs,
                args.finetune_epochs,
                args.config,
            ),
        ),
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
