"""Pre-training against corpus size: peak memory, time to the first step, tokens/s, padding.

    .venv/bin/python bench/scale.py [--sizes 100000,1000000,10000000] [--old REV] [--old-sizes 100000,1000000]

Writes generated corpora as 16 shards each under --data (one-line documents
of 8-24 words drawn from 20,000 made-up words by a Zipf law; and, for
packing, documents of 8-200 such lines ended by blank lines), then runs
`python -m pipeline.pretrain --steps N` on each in a fresh process and
reads what that process measured of itself: its peak resident memory, the
seconds from its start to the end of its first host loop, and the real
tokens per second of its later host loops. With --old (a commit, e.g. the
one before the streaming input), the same commands run on that commit's
code where it still fits in memory, side by side.
"""

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import time

from common import write_results  # sets up the path and TF's logging

import numpy as np  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SHARDS = 16
BATCH_SIZE = 64  # pretrain.batch_size's default, which the runs keep
WORDS = 20_000
# Runs in the measured process: times every host loop and, after STEPS
# steps, reports its own peak memory and ends (the old code knows no --steps).
CHILD = """
import json, os, resource, sys, time
from pipeline import pretrain, trainer
loops, steps = [], int(os.environ["STEPS"])
call = trainer.Trainer._train_steps
def timed(self, iterator, count):
    call(self, iterator, count)
    loops.append((time.time(), int(count)))
    if sum(count for _, count in loops) >= steps:
        peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
        print("MEASURED", json.dumps({"loops": loops, "peak_rss_mb": peak}), flush=True)
        os._exit(0)
trainer.Trainer._train_steps = timed
pretrain.main(sys.argv[1:])
"""
START = re.compile(r"of up to (\d+) tokens, ([\d.]+)% of them padding")


def write_corpus(directory, documents, lines_per_document=None, seed=0):
    """`documents` generated documents in `SHARDS` shards under `directory`:
    one line each, or (with `lines_per_document`, a range) that many lines
    each, documents ended by blank lines. Returns the files' glob."""
    if os.path.exists(os.path.join(directory, "done")):
        return os.path.join(directory, "*.txt")
    os.makedirs(directory, exist_ok=True)
    rng = np.random.default_rng(seed)
    vocabulary = np.array([_word(index) for index in range(WORDS)], dtype=object)
    weights = 1.0 / np.arange(1, WORDS + 1)
    weights /= weights.sum()
    per_shard = -(-documents // SHARDS)
    for shard in range(SHARDS):
        count = min(per_shard, documents - shard * per_shard)
        lines = rng.integers(*lines_per_document, size=count) if lines_per_document else np.ones(count, int)
        lengths = rng.integers(8, 25, size=int(lines.sum()))
        words = vocabulary[rng.choice(WORDS, size=int(lengths.sum()), p=weights)]
        ends = np.cumsum(lengths)
        texts = [" ".join(words[end - length : end]) for end, length in zip(ends, lengths)]
        with open(os.path.join(directory, f"part-{shard:02d}.txt"), "w") as f:
            line = 0
            for count_of_lines in lines:
                f.write("\n".join(texts[line : line + count_of_lines]) + ("\n\n" if lines_per_document else "\n"))
                line += count_of_lines
    open(os.path.join(directory, "done"), "w").close()
    return os.path.join(directory, "*.txt")


def _word(index):
    syllables = ["ka", "lo", "mi", "ne", "su", "ta", "ri", "po", "be", "do", "gu", "fa"]
    word = ""
    while True:
        word += syllables[index % len(syllables)]
        index //= len(syllables)
        if index == 0:
            return word


def measure(code_root, files, steps, options):
    """What one `pipeline.pretrain` process measured of itself, with its start line's figures."""
    with tempfile.TemporaryDirectory() as run:
        started = time.time()
        result = subprocess.run(
            [sys.executable, "-c", CHILD, "--text", files, "--model-dir", run, *options],
            cwd=code_root,
            env=dict(os.environ, PYTHONPATH=code_root, TF_CPP_MIN_LOG_LEVEL="2", STEPS=str(steps)),
            capture_output=True,
            text=True,
        )
    if "MEASURED " not in result.stdout:
        return {"error": (result.stderr.strip().splitlines() or ["failed"])[-1]}
    printed, measured = result.stdout.split("MEASURED ", 1)
    measured = json.loads(measured)
    (first, _), *later = measured["loops"]
    figures = {
        "peak_rss_mb": round(measured["peak_rss_mb"]),
        "seconds_to_first_step": round(first - started, 1),
        "seconds_per_step": round((later[-1][0] - first) / sum(count for _, count in later), 4),
    }
    start = START.search(printed)
    if start:
        figures.update(max_length=int(start[1]), padding_share=float(start[2]) / 100)
    return figures


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", default="100000,1000000,10000000", help="documents of each one-line corpus")
    parser.add_argument("--documents", type=int, default=5_000, help="documents of the corpus of documents")
    parser.add_argument("--old", help="a commit whose (in-memory) pre-training runs beside, where it fits")
    parser.add_argument("--old-sizes", default="100000,1000000", help="the one-line corpora the old code runs on")
    parser.add_argument("--steps", type=int, default=96, help="masked-LM steps of each run (host loops of 16)")
    parser.add_argument("--data", default=os.path.join(ROOT, "bench", "cache", "scale"))
    parser.add_argument("--out", default=os.path.join(ROOT, "bench", "results", "scale.json"))
    args = parser.parse_args()
    old_root = None
    if args.old:
        old_root = os.path.join(tempfile.mkdtemp(), "old")
        subprocess.run(["git", "worktree", "add", "--detach", old_root, args.old], cwd=ROOT, check=True)
    try:
        run_arms(args, old_root)
    finally:
        if old_root:
            subprocess.run(["git", "worktree", "remove", "--force", old_root], cwd=ROOT, check=True)


def run_arms(args, old_root):
    """Writes the corpora, runs every arm on them, and writes the results."""
    corpora = [
        (int(size), "line", write_corpus(os.path.join(args.data, f"lines-{size}"), int(size)))
        for size in args.sizes.split(",")
    ]
    packed = write_corpus(os.path.join(args.data, f"documents-{args.documents}"), args.documents, (8, 201))
    corpora.append((args.documents, "blank_line", packed))
    runs = []
    for documents, kind, files in corpora:
        length = ["--max-length", "128"] if kind == "blank_line" else []
        arms = [("streaming", ROOT, ["--steps", "1000000", "--documents", kind, *length])]
        if kind == "blank_line":  # what packing saves: each line a sequence, as before
            arms.append(("streaming, a line each", ROOT, ["--steps", "1000000", *length]))
        if old_root and (kind == "blank_line" or str(documents) in args.old_sizes.split(",")):
            arms.append(("in memory (before)", old_root, ["--epochs", "1", *length]))
        for arm, code_root, options in arms:
            figures = measure(code_root, files, args.steps, options)
            # The old code pads as the new one does each line a sequence (no line is cut here).
            same = runs[-1] if arm.startswith("in memory") else figures
            if "seconds_per_step" in figures and "padding_share" in same:
                real = same["max_length"] * (1 - same["padding_share"]) * BATCH_SIZE
                figures["tokens_per_second"] = round(real / figures["seconds_per_step"])
            runs.append({"documents": documents, "documents_of": kind, "arm": arm, **figures})
            print(json.dumps(runs[-1]), flush=True)
    write_results({"steps": args.steps, "runs": runs}, args.out)


if __name__ == "__main__":
    main()
