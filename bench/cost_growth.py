"""How cost grows: tokens/s against sequence length, parameters against
vocabulary size (factorized or not), and peak memory of a training run.

    .venv/bin/pip install -e ".[bench]"
    .venv/bin/python bench/cost_growth.py [--out bench/results/cost_growth.json]

Tokens/s are steady-state training steps at the dimensions of
`bench/throughput.py` (V 8000, E 128, H 256, 4 layers, 4 heads, feed-forward
1024, batch 32) at max length 64, 128, 256 and 512. Parameters of
embeddings + encoder at ALBERT-base sizes (E 128, H 768, 12 layers, shared)
for vocabularies of 1k to 250k, against an unfactorized (V x H) embedding.
Model-FLOP utilization is against the highest of the 2048^3 matmul peaks
measured before each length. Peak resident memory is measured in a child
process that trains the max-length-128 configuration. Writes a PNG plot
beside the JSON.
"""

import argparse
import os
import resource
import subprocess
import sys

from common import matmul_peak, steps_per_second, training_flops_per_token, write_results

import numpy as np  # noqa: E402

from pipeline.config import ModelConfig  # noqa: E402
from pipeline.model import build_model  # noqa: E402

DIMENSIONS = dict(
    vocabulary_size=8000, embedding_size=128, hidden_size=256, num_layers=4, num_heads=4, intermediate_size=1024
)
BATCH = 32


def tokens_per_second(max_length, steps):
    model = build_model(ModelConfig(num_classes=2, max_length=max_length, **DIMENSIONS))
    rng = np.random.default_rng(0)
    ids = rng.integers(5, 8000, size=(BATCH, max_length)).astype("int32")
    labels = rng.integers(0, 2, size=(BATCH,)).astype("int32")
    return BATCH * max_length * steps_per_second(model, ids, labels, BATCH, steps)


def embedding_and_encoder_parameters(vocabulary_size, factorized, embedding=128, hidden=768, ffn=3072):
    block = 4 * (hidden * hidden + hidden) + 2 * hidden * ffn + ffn + hidden + 4 * hidden
    table = vocabulary_size * embedding + embedding * hidden + hidden if factorized else vocabulary_size * hidden
    return table + block


def peak_memory_mib():
    """Peak RSS of a child process training 20 steps at max length 128."""
    child = subprocess.run(
        [sys.executable, __file__, "--memory-child"],
        capture_output=True,
        text=True,
        check=True,
        env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2"),
    )
    return float(child.stdout.strip().splitlines()[-1])


def plot(results, path):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure, (left, right) = plt.subplots(1, 2, figsize=(11, 4))
    lengths = sorted(int(k) for k in results["tokens_per_second"])
    left.plot(lengths, [results["tokens_per_second"][str(k)] for k in lengths], marker="o")
    left.set_xscale("log", base=2)
    left.minorticks_off()
    left.set(xlabel="max length", ylabel="training tokens/s", title="Throughput against length", ylim=(0, None))
    left.set_xticks(lengths, [str(k) for k in lengths])
    sizes = sorted(int(k) for k in results["parameters"]["factorized"])
    for kind in ("factorized", "unfactorized"):
        right.plot(sizes, [results["parameters"][kind][str(v)] / 1e6 for v in sizes], marker="o", label=kind)
    right.set(
        xscale="log",
        xlabel="vocabulary size",
        ylabel="parameters (millions)",
        title="Embeddings + shared encoder (ALBERT-base)",
    )
    right.legend()
    figure.tight_layout()
    figure.savefig(path, dpi=100)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=8, help="timed training steps per max length")
    parser.add_argument(
        "--out",
        default=os.path.join("bench", "results", "cost_growth.json"),
        help="JSON of the figures; the PNG plot is written beside it",
    )
    parser.add_argument("--memory-child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.memory_child:
        tokens_per_second(128, 20)
        print(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024)  # KiB on Linux
        return
    # The matmul peak before every length, the highest taken (as in
    # bench/throughput.py): one measurement can land in a slow spell of the
    # host and flatter the utilization.
    peaks, rates = [], {}
    for length in (64, 128, 256, 512):
        peaks.append(matmul_peak())
        rates[str(length)] = tokens_per_second(length, args.steps)
    peak = max(peaks)
    vocabularies = (1000, 8000, 30000, 100000, 250000)
    parameters = {
        kind: {str(v): embedding_and_encoder_parameters(v, kind == "factorized") for v in vocabularies}
        for kind in ("factorized", "unfactorized")
    }
    results = {
        "dimensions": DIMENSIONS,
        "batch_size": BATCH,
        "matmul_peak_gflops": peak,
        "matmul_peaks_gflops": peaks,
        "tokens_per_second": rates,
        "parameters": parameters,
        "peak_rss_mib": peak_memory_mib(),
    }
    print(f"{'max length':>10}{'tokens/s':>10}{'MFU':>7}")
    for length, rate in rates.items():
        flops = training_flops_per_token(
            max_length=int(length), **{k: v for k, v in DIMENSIONS.items() if k != "num_heads"}
        )
        print(f"{length:>10}{rate:>10,.0f}{rate * flops / 1e9 / peak:>7.0%}")
    print(
        "MFU against the highest of the float32 matmul peaks measured before each length: "
        + ", ".join(f"{p:.0f}" for p in peaks)
        + " GFLOP/s"
    )
    print(f"\n{'vocabulary':>10}{'factorized':>14}{'unfactorized':>14}")
    for v in vocabularies:
        print(f"{v:>10,}{parameters['factorized'][str(v)]:>14,}{parameters['unfactorized'][str(v)]:>14,}")
    print(f"\npeak resident memory, training at max length 128, batch 32: {results['peak_rss_mib']:,.0f} MiB")
    write_results(results, args.out)
    plot(results, os.path.splitext(args.out)[0] + ".png")


if __name__ == "__main__":
    main()
