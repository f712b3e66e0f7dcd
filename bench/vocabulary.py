"""WordPiece vocabulary learning: tensorflow-text's learner against this project's, in one run.

    .venv/bin/python bench/vocabulary.py [--cache bench/cache] [--sizes 2000,4000,8000,16000]
                                         [--out bench/results/vocabulary.json]

On the training texts of `bench/accuracy.py`'s tweet corpus (the 27,473 its
default run learns from; fetched into the cache as that script does), counts
the words once (`count_words`, as `Tokenizer.learn` does), then for each
vocabulary size times `wordpiece_vocabulary` (what `Tokenizer.learn` calls)
with `wordpiece_tokenizer_learner_lib.learn` and with
`pipeline.wordpiece_learner.learn`, alternated, and checks that they return
the same vocabulary.
"""

import argparse
import os
import time

from common import write_results  # sets up the path and TF's logging

from tensorflow_text.tools.wordpiece_vocab import wordpiece_tokenizer_learner_lib as library  # noqa: E402

from accuracy import fetch_corpus, read, validation_cut  # noqa: E402
from pipeline import wordpiece_learner  # noqa: E402
from pipeline.config import DataConfig  # noqa: E402
from pipeline.tokenizer import count_words, wordpiece_vocabulary  # noqa: E402


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--cache", default=os.path.join("bench", "cache"), help="where the corpus is fetched to")
    parser.add_argument(
        "--sizes",
        type=lambda v: [int(s) for s in v.split(",")],
        default=[2000, 4000, 8000, 16000],
        help="comma-separated vocabulary sizes to learn",
    )
    parser.add_argument(
        "--out",
        default=os.path.join("bench", "results", "vocabulary.json"),
        help="JSON of both learners' times and whether their vocabularies are equal, per size",
    )
    args = parser.parse_args()
    texts = read(fetch_corpus(args.cache)[0])[0]
    texts = texts[: validation_cut(len(texts))]
    data = DataConfig()
    counts = count_words(texts, data.lower_case, data.normalization_form)
    results = {"texts": len(texts), "distinct_words": len(counts), "sizes": {}}
    print(f"{len(texts)} texts, {len(counts)} distinct words, {sum(counts.values())} in all")
    print(f"{'size':>8}{'entries':>9}{'tensorflow-text s':>19}{'this project s':>16}{'speed-up':>10}  same")
    for size in args.sizes:
        timed = {}
        for name, learn in (("tensorflow_text", library.learn), ("this_project", wordpiece_learner.learn)):
            start = time.perf_counter()
            vocabulary = wordpiece_vocabulary(counts, size, data.min_count, learn)
            timed[name] = (time.perf_counter() - start, vocabulary)
        same = timed["tensorflow_text"][1] == timed["this_project"][1]
        seconds = {name: value[0] for name, value in timed.items()}
        results["sizes"][size] = {
            "entries": len(vocabulary),
            "seconds": seconds,
            "same_vocabulary": same,
            "speed_up": seconds["tensorflow_text"] / seconds["this_project"],
        }
        print(
            f"{size:>8}{len(vocabulary):>9}{seconds['tensorflow_text']:>19.1f}{seconds['this_project']:>16.1f}"
            f"{results['sizes'][size]['speed_up']:>9.1f}x  {same}",
            flush=True,
        )
    write_results(results, args.out)


if __name__ == "__main__":
    main()
