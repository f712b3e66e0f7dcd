"""Serving latency and throughput of the exported SavedModel, on this machine.

    .venv/bin/python bench/serving.py [--calls 300] [--members K] [--out bench/results/serving.json]

Exports the default model (vocabulary learned from the demo corpus; weights
do not change the cost) and measures in one process, alternating A/B:
  - p50/p99 latency of one-string calls to `serving_default` (tokenizer in
    the graph) against the bare Keras model on pre-tokenized ids;
  - throughput in batches of 256 strings against 256 pre-tokenized rows;
and prints their ratios. With `--members K`, the SavedModel is an ensemble of K
such models (`pipeline.export --model-dir` with K runs), the bare model one.
"""

import argparse
import os
import tempfile
import time

from common import write_results  # sets up the path and TF's logging

import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402
import tensorflow_text  # noqa: E402,F401

from pipeline.config import Config  # noqa: E402
from pipeline.demo_corpus import generate  # noqa: E402
from pipeline.export import export_saved_model  # noqa: E402
from pipeline.model import build_model  # noqa: E402
from pipeline.tokenizer import Tokenizer  # noqa: E402


def timed(function, argument, calls):
    function(argument)  # warm-up: tracing
    times = []
    for _ in range(calls):
        start = time.perf_counter()
        result = function(argument)
        np.asarray(next(iter(result.values())) if isinstance(result, dict) else result)
        times.append(time.perf_counter() - start)
    return np.asarray(times)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--calls", type=int, default=300, help="timed calls of one string per model")
    parser.add_argument("--members", type=int, default=1, help="export an ensemble of this many models")
    parser.add_argument(
        "--out",
        default=os.path.join("bench", "results", "serving.json"),
        help="JSON of the latencies and batch throughputs",
    )
    args = parser.parse_args()
    config = Config()
    texts = [text for text, _ in generate(2000, seed=0)]
    tokenizer = Tokenizer.learn(texts, max_length=128)  # a common fixed length for serving figures
    config.model.vocabulary_size, config.model.num_classes = len(tokenizer.vocabulary), 2
    config.model.max_length = tokenizer.max_length
    models = [build_model(config.model) for _ in range(args.members)]
    model = models[0]
    with tempfile.TemporaryDirectory() as directory:
        path = export_saved_model(models, tokenizer, ["negative", "positive"], directory)
        serve = tf.saved_model.load(path).signatures["serving_default"]
        bare = tf.function(lambda ids: model(ids, training=False))
        one_text, batch_texts = tf.constant(texts[:1]), tf.constant(texts[:256])
        one_ids, batch_ids = tokenizer(one_text), tokenizer(batch_texts)
        results = {}
        for round_index in range(2):  # A/B alternated; the second round is reported
            results["served_one"] = timed(lambda t: serve(text=t), one_text, args.calls)
            results["bare_one"] = timed(bare, one_ids, args.calls)
            results["served_batch"] = timed(lambda t: serve(text=t), batch_texts, args.calls // 10)
            results["bare_batch"] = timed(bare, batch_ids, args.calls // 10)
    summary = {
        "max_length": config.model.max_length,
        "members": args.members,
        "served_p50_ms": 1e3 * np.percentile(results["served_one"], 50),
        "served_p99_ms": 1e3 * np.percentile(results["served_one"], 99),
        "bare_p50_ms": 1e3 * np.percentile(results["bare_one"], 50),
        "bare_p99_ms": 1e3 * np.percentile(results["bare_one"], 99),
        "served_examples_per_s": 256 / np.median(results["served_batch"]),
        "bare_examples_per_s": 256 / np.median(results["bare_batch"]),
    }
    print(f"{'':<34}{'SavedModel (text)':>18}{'bare model (ids)':>18}{'ratio':>8}")
    for label, key in [
        ("one string, p50 latency (ms)", "p50_ms"),
        ("one string, p99 latency (ms)", "p99_ms"),
        ("batches of 256, examples/s", "examples_per_s"),
    ]:
        served, bare_value = summary[f"served_{key}"], summary[f"bare_{key}"]
        print(f"{label:<34}{served:>18,.2f}{bare_value:>18,.2f}{served / bare_value:>8.2f}")
    write_results(summary, args.out)


if __name__ == "__main__":
    main()
