"""Regression, multi-label and pairs of texts on public corpora, side by side with TF-IDF and keras-hub's ALBERT.

    .venv/bin/pip install -e ".[bench]"
    .venv/bin/python bench/tasks.py [--corpora sentiment_scores_5000,debian_tags_5000,chatbot_replies_5000]
                                    [--cache bench/cache]

One corpus per task, each fetched once into the cache (benchmarks only)
and split 80/20 with seed 0, each text (or pair) once:

- `sentiment_scores`, a regression: 23,699 English texts (tweets, and
  snippets of movie reviews, Amazon reviews and New York Times editorials),
  each scored by the mean of 20 raters' sentiment from -4 to 4: the ground
  truth of the VADER paper, `additional_resources/hutto_ICWSM_2014.tar.gz`
  of `vaderSentiment` 3.3.2's source archive on PyPI; `sentiment_scores_5000`:
  5,000 of its training split, on the same test split;
- `debian_tags`, multi-label: Debian 12's package descriptions (the short
  and the long one, `Translation-en`) with their debtags (`Packages`),
  every tag given to at least 100 distinct descriptions, from
  deb.debian.org's bookworm index (its sha256 goes to `split.json`: a
  point release changes it); `debian_tags_5000`: 5,000 of its training
  split, on the same test split;
- `chatbot_replies`, pairs of texts: every line of chatterbot-corpus
  1.3.3's conversations (all its 28 languages) with the line that replies
  to it (`reply`), and with a reply from another conversation of the same
  topic file (`other`), split by the first text. Reply selection, as
  question/answer matching is scored: no entailment or paraphrase corpus
  ships on PyPI or in Debian that this project found; `chatbot_replies_5000`:
  5,000 of its training pairs, on the same test split.

The results file keeps the latest figures of every corpus run, each run
replacing its corpora's.

Arms: TF-IDF (word 1-2 grams and character 2-5 grams, as bench/accuracy.py)
with ridge regression, one logistic regression per label, or logistic
regression over a pair's features: both texts', their elementwise product
(the n-grams they share) and their cosine, or the last two alone (on the
reply corpus the overlap is the signal and each text's own n-grams only
add noise), each setting chosen on the last 10%
of the training split (a multi-label model's thresholds too, as this
project chooses them) and refit; this project's default run with the
task's flag (`--task regression`, `--multi-label`, `--text-pair-column
text_pair`), its exported SavedModel scored on the raw test texts; and
keras-hub's `AlbertClassifier` from scratch with the run's dimensions,
token ids, segments and standardized scores, trained for as many epochs as
fit in the run's wall time (a multi-label model on the first 90% of the
training split, its thresholds chosen on the rest). Each difference from
TF-IDF comes with a 95% paired bootstrap interval over the test texts.
"""

import argparse
import collections
import csv
import hashlib
import json
import lzma
import os
import random
import shutil
import tarfile
import time
import urllib.request
import zipfile

from accuracy import compare, keras_hub_albert, read, tfidf_features, validation_cut, validation_split
from common import write_results
from corpora import _download

import numpy as np  # noqa: E402

from pipeline.config import Config, override  # noqa: E402
from pipeline.metrics import best_thresholds, pearson, ranks  # noqa: E402

DEBIAN = "http://deb.debian.org/debian/dists/bookworm/main/"
DEBIAN_FILES = {"Packages.xz": "binary-amd64/Packages.xz", "Translation-en.xz": "i18n/Translation-en.xz"}
# A tag is a label where at least this many distinct descriptions have it.
MIN_TAGGED = 100
RESAMPLES = 1000


def _write(path, header, rows):
    with open(path, "w", encoding="utf-8", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(header)
        writer.writerows(rows)


def _split(directory, header, rows, key, facts):
    """`(train.csv, test.csv)` of `rows`, shuffled with seed 0 and cut 80/20
    by `key(row)` (every row of one key on one side); `facts` and the counts
    go to `split.json`."""
    os.makedirs(directory, exist_ok=True)
    keys = sorted({key(row) for row in rows})
    random.Random(0).shuffle(keys)
    test = set(keys[int(0.8 * len(keys)) :])
    rows = sorted(rows)
    random.Random(1).shuffle(rows)
    paths = os.path.join(directory, "train.csv"), os.path.join(directory, "test.csv")
    _write(paths[0], header, [row for row in rows if key(row) not in test])
    _write(paths[1], header, [row for row in rows if key(row) in test])
    with open(os.path.join(directory, "split.json"), "w", encoding="utf-8") as f:
        json.dump({**facts, "kept": len(rows)}, f, indent=1)
    return paths


def sentiment_scores(cache):
    directory = os.path.join(cache, "sentiment_scores")
    if not os.path.exists(os.path.join(directory, "test.csv")):
        scores = collections.defaultdict(set)
        lines = 0
        with tarfile.open(_download(cache, "vaderSentiment", source=True)) as archive:
            member = next(m for m in archive.getmembers() if m.name.endswith("hutto_ICWSM_2014.tar.gz"))
            with tarfile.open(fileobj=archive.extractfile(member)) as inner:
                for m in inner.getmembers():
                    if m.name.endswith("_GroundTruth.txt"):
                        for line in inner.extractfile(m).read().decode("utf-8", "replace").splitlines():
                            _, score, text = line.split("\t", 2)
                            scores[" ".join(text.split())].add(float(score))
                            lines += 1
        # A text rated twice keeps its mean rating.
        rows = [(text, f"{np.mean(sorted(found)):.4f}") for text, found in scores.items() if text]
        facts = {"lines": lines, "distinct_texts": len(rows)}
        _split(directory, ["text", "label"], rows, key=lambda row: row[0], facts=facts)
    return os.path.join(directory, "train.csv"), os.path.join(directory, "test.csv")


def _stanzas(path):
    # The fields of each stanza of a Debian index; a continued field keeps its newlines.
    with lzma.open(path, "rt", encoding="utf-8") as f:
        for block in f.read().split("\n\n"):
            fields, key = {}, None
            for line in block.split("\n"):
                if line.startswith((" ", "\t")) and key:
                    fields[key] += "\n" + line
                elif ":" in line:
                    key, _, value = line.partition(":")
                    fields[key] = value.strip()
            if fields:
                yield fields


def _description(text):
    # The short description and the long one's paragraphs (" ." lines) as one text.
    return " ".join(word for line in text.split("\n") if line.strip() != "." for word in line.split())


def debian_tags(cache):
    directory = os.path.join(cache, "debian_tags")
    if not os.path.exists(os.path.join(directory, "test.csv")):
        digests = {}
        for name, path in DEBIAN_FILES.items():
            local = os.path.join(cache, "debian-bookworm-" + name)
            if not os.path.exists(local):
                urllib.request.urlretrieve(DEBIAN + path, local + ".part")
                os.replace(local + ".part", local)
            with open(local, "rb") as f:
                digests[name] = hashlib.sha256(f.read()).hexdigest()
        descriptions = {
            (s["Package"], s["Description-md5"]): _description(s["Description-en"])
            for s in _stanzas(os.path.join(cache, "debian-bookworm-Translation-en.xz"))
        }
        tags = collections.defaultdict(set)
        packages = 0
        for s in _stanzas(os.path.join(cache, "debian-bookworm-Packages.xz")):
            text = descriptions.get((s["Package"], s.get("Description-md5")))
            if "Tag" in s and text:
                tags[text].add(tuple(sorted(t.strip() for t in s["Tag"].replace("\n", " ").split(",") if t.strip())))
                packages += 1
        # A description given two tag sets (packages built from one source) is dropped.
        single = {text: found.pop() for text, found in tags.items() if len(found) == 1}
        counts = collections.Counter(tag for found in single.values() for tag in found)
        # "::TODO" tags mark what is still to tag, not a kind of package.
        kept = {tag for tag, count in counts.items() if count >= MIN_TAGGED and not tag.endswith("::TODO")}
        rows = [(text, ";".join(t for t in found if t in kept)) for text, found in single.items()]
        rows = [row for row in rows if row[1]]
        facts = {
            "sha256": digests,
            "tagged_packages": packages,
            "distinct_descriptions": len(tags),
            "descriptions_with_two_tag_sets": len(tags) - len(single),
            "tags": len(counts),
            "tags_kept": len(kept),
            "descriptions_without_a_kept_tag": len(single) - len(rows),
        }
        _split(directory, ["text", "label"], rows, key=lambda row: row[0], facts=facts)
    return os.path.join(directory, "train.csv"), os.path.join(directory, "test.csv")


def chatbot_replies(cache):
    directory = os.path.join(cache, "chatbot_replies")
    if not os.path.exists(os.path.join(directory, "test.csv")):
        import yaml

        pairs = collections.defaultdict(set)
        rng = random.Random(0)
        with zipfile.ZipFile(_download(cache, "chatterbot_corpus")) as archive:
            for name in sorted(archive.namelist()):
                if not (name.startswith("chatterbot_corpus/data/") and name.endswith(".yml")):
                    continue
                conversations = yaml.safe_load(archive.read(name)).get("conversations") or []
                turns = [
                    (" ".join(str(a).split()), " ".join(str(b).split()))
                    for conversation in conversations
                    for a, b in zip(conversation, conversation[1:])
                ]
                turns = [(a, b) for a, b in turns if a and b]
                replies = sorted({b for _, b in turns})
                for a, b in turns:
                    pairs[a, b].add("reply")
                    others = [r for r in rng.sample(replies, min(len(replies), 4)) if r != b]
                    if others:
                        pairs[a, others[0]].add("other")
        rows = [(a, b, found.pop()) for (a, b), found in pairs.items() if len(found) == 1]
        facts = {"pairs": len(pairs), "pairs_both_reply_and_other": len(pairs) - len(rows)}
        _split(directory, ["text", "text_pair", "label"], rows, key=lambda row: row[0], facts=facts)
    return os.path.join(directory, "train.csv"), os.path.join(directory, "test.csv")


def subset(corpus, size):
    """The corpus's training split cut to `size` rows drawn with seed 0, with the same test split."""

    def make(cache):
        train_path, test_path = corpus(cache)
        path = os.path.join(os.path.dirname(train_path), f"train_{size}.csv")
        if not os.path.exists(path):
            with open(train_path, encoding="utf-8", newline="") as f:
                header, *rows = list(csv.reader(f))
            _write(path, header, random.Random(0).sample(rows, size))
        return path, test_path

    return make


CORPORA = {
    "sentiment_scores": ("regression", sentiment_scores),
    "sentiment_scores_5000": ("regression", subset(sentiment_scores, 5000)),
    "debian_tags": ("multi_label", debian_tags),
    "debian_tags_5000": ("multi_label", subset(debian_tags, 5000)),
    "chatbot_replies": ("pairs", chatbot_replies),
    "chatbot_replies_5000": ("pairs", subset(chatbot_replies, 5000)),
}
OVERRIDES = {
    "regression": {"data": {"task": "regression"}},
    "multi_label": {"data": {"task": "multi_label"}},
    "pairs": {"data": {"text_pair_column": "text_pair"}},
}


def indicators(labels, names):
    """0/1 `(len(labels), len(names))` of `;`-joined label lists."""
    column = {name: i for i, name in enumerate(names)}
    matrix = np.zeros((len(labels), len(names)), bool)
    for row, joined in enumerate(labels):
        for label in joined.split(";"):
            matrix[row, column[label]] = True
    return matrix


# What a pair's features hold: both texts' n-grams and their overlap, or the overlap alone.
PAIR_FEATURES = ("texts and overlap", "overlap")


def _features(texts, pairs):
    from scipy.sparse import csr_matrix, hstack

    union = tfidf_features()
    if not pairs:
        return union.fit(texts).transform
    union.fit([text for pair in texts for text in pair])

    def transform(rows, pair_features=PAIR_FEATURES[0]):
        a, b = (union.transform([row[i] for row in rows]) for i in (0, 1))
        shared = a.multiply(b)
        cosine = csr_matrix(np.asarray(shared.sum(axis=1)) / 2)  # each vectorizer's rows have norm 1
        parts = [a, b, shared, cosine] if pair_features == PAIR_FEATURES[0] else [shared, cosine]
        return hstack(parts).tocsr()

    return transform


def tfidf(task, train_path, test_path):
    """The TF-IDF arm: its test outputs (scores, or label indicators, or labels) and its settings."""
    from sklearn.linear_model import LogisticRegression, Ridge
    from sklearn.multiclass import OneVsRestClassifier

    texts, labels = read(train_path)
    test_texts, _ = read(test_path)
    cut = validation_cut(len(texts))
    if task == "pairs":
        return _pairs_tfidf(texts, labels, test_texts, cut)
    fit_features = _features(texts[:cut], False)
    fit, held_out = fit_features(texts[:cut]), fit_features(texts[cut:])
    if task == "regression":
        targets = np.array(labels, float)
        errors = {
            alpha: np.mean((Ridge(alpha).fit(fit, targets[:cut]).predict(held_out) - targets[cut:]) ** 2)
            for alpha in (0.3, 1.0, 3.0, 10.0)
        }
        best = min(errors, key=errors.get)
        features = _features(texts, False)
        return Ridge(best).fit(features(texts), targets).predict(features(test_texts)), {"alpha": best}
    if task == "multi_label":
        names = sorted({label for joined in labels for label in joined.split(";")})
        truth = indicators(labels, names)

        def model(c):
            return OneVsRestClassifier(LogisticRegression(C=c, max_iter=2000), n_jobs=2)

        scores, chosen = {}, {}
        for c in (1.0, 4.0, 16.0):
            probabilities = model(c).fit(fit, truth[:cut]).predict_proba(held_out)
            chosen[c] = best_thresholds(truth[cut:], probabilities)
            scores[c] = micro_f1(truth[cut:], probabilities >= np.array(chosen[c]))
        best = max(scores, key=scores.get)
        features = _features(texts, False)
        probabilities = model(best).fit(features(texts), truth).predict_proba(features(test_texts))
        return (names, probabilities >= np.array(chosen[best])), {"C": best}


def _pairs_tfidf(texts, labels, test_texts, cut):
    from sklearn.linear_model import LogisticRegression

    scores = {}
    fit_features = _features(texts[:cut], True)
    for pair_features in PAIR_FEATURES:
        fit, held_out = fit_features(texts[:cut], pair_features), fit_features(texts[cut:], pair_features)
        for c in (0.5, 1.0, 2.0, 4.0, 8.0):
            model = LogisticRegression(C=c, max_iter=2000).fit(fit, labels[:cut])
            scores[pair_features, c] = np.mean(model.predict(held_out) == labels[cut:])
    pair_features, best = max(scores, key=scores.get)
    features = _features(texts, True)
    model = LogisticRegression(C=best, max_iter=2000).fit(features(texts, pair_features), labels)
    predictions = model.predict(features(test_texts, pair_features))
    return [str(p) for p in predictions], {"C": best, "features": pair_features}


def this_project(task, train_path, test_path, directory):
    """The default run with the task's flag; its export's test outputs and its run's figures."""
    from pipeline.predict import load_classifier
    from pipeline.train import train_and_evaluate

    train_and_evaluate(override(Config(), OVERRIDES[task]), directory, train_path, test_path)
    with open(os.path.join(directory, "config.json")) as f:
        config = json.load(f)
    facts = {"epochs": config["train"]["epochs"], "max_length": config["model"]["max_length"]}
    classifier = load_classifier(directory)
    texts, _ = read(test_path)
    outputs = collections.defaultdict(list)
    for start in range(0, len(texts), 256):
        batch = texts[start : start + 256]
        pairs = [pair[1] for pair in batch] if task == "pairs" else None
        for name, value in classifier.outputs([pair[0] for pair in batch] if pairs else batch, pairs).items():
            outputs[name].append(value)
    outputs = {name: np.concatenate(values) for name, values in outputs.items()}
    if task == "regression":
        return outputs["score"], facts
    if task == "multi_label":
        return (classifier.label_names, outputs["over_threshold"]), facts
    return [classifier.label_names[i] for i in np.argmax(outputs["probabilities"], axis=-1)], facts


def keras_hub(task, train_path, test_path, run_directory, seconds, cache):
    """keras-hub's classifier with the run's config, for as many epochs as fit in `seconds`."""
    config = Config.load(os.path.join(run_directory, "config.json"))

    def trained(train_paths, test_paths):
        return keras_hub_albert(
            train_paths, test_paths, config, epochs=1, batch_size=32, learning_rate=5e-4, budget_seconds=seconds
        )

    if task != "multi_label":
        result = trained(train_path, test_path)
        outputs = result.pop("outputs") if task == "regression" else result.pop("predictions")
        return outputs, {key: result[key] for key in ("epochs", "batch_size", "learning_rate")}
    texts, labels = read(train_path)
    cut = validation_cut(len(texts))
    fit_path, held_out_path = validation_split(train_path, cache)
    result = trained(fit_path, [held_out_path, test_path])
    names, probabilities = result["names"], result["outputs"]
    thresholds = best_thresholds(indicators(labels[cut:], names), probabilities[: len(texts) - cut])
    settings = {key: result[key] for key in ("epochs", "batch_size", "learning_rate")}
    return (names, probabilities[len(texts) - cut :] >= np.array(thresholds)), settings


def micro_f1(truth, predicted):
    hits = (truth & predicted).sum()
    return 2 * hits / max(truth.sum() + predicted.sum(), 1)


def macro_f1(truth, predicted):
    hits = (truth & predicted).sum(axis=0)
    return np.mean(2 * hits / np.maximum(truth.sum(axis=0) + predicted.sum(axis=0), 1))


METRICS = {
    "regression": {
        "rmse": lambda truth, scores: float(np.sqrt(np.mean((scores - truth) ** 2))),
        "pearson": pearson,
        "spearman": lambda truth, scores: pearson(ranks(truth), ranks(scores)),
    },
    "multi_label": {"micro_f1": micro_f1, "macro_f1": macro_f1},
}


def bootstrap(metrics, truth, first, second, resamples=RESAMPLES, seed=0):
    """Each of `metrics` of `first` minus `second` (outputs for the same test
    texts), with a 95% paired bootstrap interval over the test texts."""
    rows = np.random.default_rng(seed).integers(0, len(truth), (resamples, len(truth)))
    results = {}
    for name, metric in metrics.items():
        values = [metric(truth[r], first[r]) - metric(truth[r], second[r]) for r in rows]
        difference = metric(truth, first) - metric(truth, second)
        results[name] = {"difference": float(difference), "interval95": np.percentile(values, [2.5, 97.5]).tolist()}
    return results


def scored(task, test_labels, outputs, baseline=None):
    """An arm's figures on the test split (`outputs` as the arms return them),
    and its differences from TF-IDF's `baseline` outputs."""
    if task == "pairs":
        from sklearn.metrics import f1_score

        scores = {
            "accuracy": float(np.mean(np.array(outputs) == np.array(test_labels))),
            "macro_f1": float(f1_score(test_labels, outputs, average="macro")),
        }
        if baseline is not None:
            scores["vs_tfidf"] = compare(test_labels, outputs, baseline)
        return scores
    if task == "multi_label":
        names = sorted({label for joined in test_labels for label in joined.split(";")} | set(outputs[0]))
        truth = indicators(test_labels, names)

        def aligned(value):
            arm_names, predicted = value
            matrix = np.zeros(truth.shape, bool)
            for column, name in enumerate(arm_names):
                matrix[:, names.index(name)] = predicted[:, column]
            return matrix

        outputs = aligned(outputs)
        baseline = None if baseline is None else aligned(baseline)
    else:
        truth = np.array(test_labels, float)
        outputs = np.asarray(outputs, float)
        baseline = None if baseline is None else np.asarray(baseline, float)
    scores = {name: float(metric(truth, outputs)) for name, metric in METRICS[task].items()}
    if baseline is not None:
        scores["vs_tfidf"] = bootstrap(METRICS[task], truth, outputs, baseline)
    return scores


def timed(run):
    start = time.perf_counter()
    outputs, facts = run()
    return outputs, {**facts, "seconds": time.perf_counter() - start}


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--cache", default=os.path.join("bench", "cache"), help="where the corpora are fetched to")
    parser.add_argument("--corpora", default=",".join(CORPORA), help=f"comma-separated, of {', '.join(CORPORA)}")
    parser.add_argument("--skip-keras-hub", action="store_true", help="leave out keras-hub's classifier")
    parser.add_argument(
        "--out", default=os.path.join("bench", "results", "tasks.json"), help="JSON of every corpus's scores"
    )
    args = parser.parse_args()
    results = {}
    for name in args.corpora.split(","):
        task, corpus = CORPORA[name]
        train_path, test_path = corpus(args.cache)
        texts, labels = read(train_path)
        test_texts, test_labels = read(test_path)
        print(f"== {name} ({task}): {len(texts)} training, {len(test_texts)} test texts", flush=True)
        figures = {"task": task, "training_texts": len(texts), "test_texts": len(test_texts)}
        if task == "multi_label":
            figures["labels"] = len({label for joined in labels for label in joined.split(";")})
        split = os.path.join(os.path.dirname(test_path), "split.json")
        if os.path.exists(split):
            with open(split, encoding="utf-8") as f:
                figures["split"] = json.load(f)

        baseline, facts = timed(lambda: tfidf(task, train_path, test_path))
        figures["tfidf"] = {**scored(task, test_labels, baseline), **facts}
        print(json.dumps(figures["tfidf"]), flush=True)
        runs = os.path.join(args.cache, "runs", "tasks", name)
        shutil.rmtree(runs, ignore_errors=True)  # never resume a run of other code
        run = os.path.join(runs, "default")
        outputs, facts = timed(lambda: this_project(task, train_path, test_path, run))
        figures["default"] = {**scored(task, test_labels, outputs, baseline), **facts}
        print(json.dumps(figures["default"]), flush=True)
        if not args.skip_keras_hub:
            seconds = figures["default"]["seconds"]
            outputs, facts = timed(lambda: keras_hub(task, train_path, test_path, run, seconds, runs))
            figures["keras-hub AlbertClassifier"] = {**scored(task, test_labels, outputs, baseline), **facts}
            print(json.dumps(figures["keras-hub AlbertClassifier"]), flush=True)
        results[name] = figures
        write_results({**_written(args.out), **results}, args.out)  # each corpus as it ends, beside earlier ones
    print(f"\n{'corpus':<20}{'arm':<28}{'score':<26}{'seconds':>8}   minus TF-IDF, 95% interval")
    for name, figures in results.items():
        for arm, value in figures.items():
            if not isinstance(value, dict) or "seconds" not in value:
                continue
            metric = {"regression": "pearson", "multi_label": "micro_f1", "pairs": "accuracy"}[figures["task"]]
            versus = value.get("vs_tfidf", {}).get(metric)
            versus = (
                ""
                if versus is None
                else "   {:+.4f} [{:+.4f}, {:+.4f}]".format(versus["difference"], *versus["interval95"])
            )
            print(f"{name:<20}{arm:<28}{metric + f' {value[metric]:.4f}':<26}{value['seconds']:>8.0f}{versus}")


def _written(path):
    # The corpora of an earlier run's results, which a run of other corpora keeps.
    if not os.path.exists(path):
        return {}
    with open(path, encoding="utf-8") as f:
        return json.load(f)


if __name__ == "__main__":
    main()
