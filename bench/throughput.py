"""Training throughput against keras-hub's AlbertClassifier, side by side.

    .venv/bin/pip install -e ".[bench]"
    .venv/bin/python bench/throughput.py [--rounds 3] [--steps 20] [--precisions float32,mixed_bfloat16]
                                         [--out bench/results/throughput.json]

Both models have the same dimensions (V 8000, E 128, H 256, 4 layers, 4 heads,
feed-forward 1024, one shared group, max length 128, batch 32) and train in
the same loop (this project's Trainer: AdamW, clipping, one step per call
amortized over `--steps`; no weight averaging, see bench/weight_averaging.py),
in float32 and in mixed_bfloat16, every model of both precisions once a
round for `--rounds` rounds, so that each round's ratios are side by side.
Prints tokens/s (median of rounds), the ratio, model-FLOP utilization
against the peak of a 2048^3 matmul measured in every round (the highest
round's: a single measurement can land in a slow spell of the host and
flatter the utilization), the ratio of each round, and real (non-padding)
tokens/s on the demo corpus. Beside the peak, also every round, two
figures that say what limits the utilization on this machine: the rate of
the step's own float32 matmuls done alone, at their shapes (the utilization
a step of nothing but matmuls would reach; MFU over it is the share of the
step its matmuls take), and the memory bandwidth of an elementwise pass
(what the passes between the matmuls run at). On a CPU without bfloat16
instructions (AVX-512 BF16 or AMX) mixed_bfloat16 is emulated: on a Zen 3
machine its models had not finished their rounds after 12 minutes, where
float32's took about 4. `--precisions float32` leaves it out.
"""

import argparse
import os

from common import (
    matmul_ceiling,
    matmul_peak,
    memory_bandwidth,
    real_token_fraction,
    step_matmuls,
    steps_per_second,
    training_flops_per_token,
    write_results,
)

import keras  # noqa: E402
import numpy as np  # noqa: E402

from pipeline.config import ModelConfig, TrainConfig  # noqa: E402
from pipeline.dataset import Split  # noqa: E402
from pipeline.demo_corpus import generate  # noqa: E402
from pipeline.model import build_model  # noqa: E402
from pipeline.tokenizer import Tokenizer  # noqa: E402

DIMENSIONS = dict(
    vocabulary_size=8000,
    embedding_size=128,
    hidden_size=256,
    num_layers=4,
    num_heads=4,
    intermediate_size=1024,
    max_length=128,
)
BATCH = 32


def ours(**overrides):
    return build_model(ModelConfig(num_classes=2, num_groups=1, **{**DIMENSIONS, **overrides})), False


def keras_hub_albert():
    import keras_hub

    backbone = keras_hub.models.AlbertBackbone(
        vocabulary_size=DIMENSIONS["vocabulary_size"],
        num_layers=DIMENSIONS["num_layers"],
        num_heads=DIMENSIONS["num_heads"],
        num_groups=1,
        num_inner_repetitions=1,
        embedding_dim=DIMENSIONS["embedding_size"],
        hidden_dim=DIMENSIONS["hidden_size"],
        intermediate_dim=DIMENSIONS["intermediate_size"],
        max_sequence_length=DIMENSIONS["max_length"],
    )
    return keras_hub.models.AlbertClassifier(backbone, num_classes=2, preprocessor=None, activation="softmax"), True


def inputs(for_keras_hub):
    rng = np.random.default_rng(0)
    ids = rng.integers(5, DIMENSIONS["vocabulary_size"], size=(BATCH, DIMENSIONS["max_length"])).astype("int32")
    labels = rng.integers(0, 2, size=(BATCH,)).astype("int32")
    if for_keras_hub:
        return {
            "token_ids": ids,
            "segment_ids": np.zeros_like(ids),
            "padding_mask": np.ones_like(ids, dtype=bool),
        }, labels
    return ids, labels


def real_token_fractions(length_bucket):
    """Real tokens per position computed, demo corpus at max length 128: `(padded, length-bucketed)`."""
    texts = [text for text, _ in generate(2048, seed=0)]
    ids = Tokenizer.learn(texts, max_length=DIMENSIONS["max_length"])(texts).numpy()
    split = Split(ids, np.zeros(len(ids), "int32"), [], {})
    return float((ids != 0).sum()) / ids.size, real_token_fraction(split, BATCH, length_bucket)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--rounds",
        type=int,
        default=3,
        help="rounds, each training every model of every precision once; each model's median over them is reported",
    )
    parser.add_argument("--steps", type=int, default=20, help="timed training steps per model and round")
    parser.add_argument(
        "--precisions",
        type=lambda v: v.split(","),
        default=["float32", "mixed_bfloat16"],
        help="comma-separated, float32 first (its peak is the MFU's and its keras-hub rate the ratios')",
    )
    parser.add_argument(
        "--out",
        default=os.path.join("bench", "results", "throughput.json"),
        help="JSON of the medians, each round's rates, matmul peaks, float32 step-matmul rates and "
        "memory bandwidths, and FLOPs per token",
    )
    args = parser.parse_args()
    if args.precisions[0] != "float32" or not set(args.precisions) <= {"float32", "mixed_bfloat16"}:
        parser.error("--precisions: float32, optionally followed by mixed_bfloat16")
    flops = training_flops_per_token(**{k: v for k, v in DIMENSIONS.items() if k != "num_heads"})
    tokens = BATCH * DIMENSIONS["max_length"]
    results = {"dimensions": DIMENSIONS, "batch_size": BATCH, "training_flops_per_token": flops}
    products = step_matmuls(batch_size=BATCH, **DIMENSIONS)
    models, rates, peaks, ceilings, bandwidths = {}, {}, {}, [], []
    for precision in args.precisions:
        # Each layer keeps the policy it was built under, so the models of
        # both precisions can take turns in one loop.
        keras.mixed_precision.set_global_policy(precision)
        results[precision] = {}
        # keras-hub's AlbertBackbone has no dropout by default (its classifier
        # drops the pooled vector); ours drops 0.1 after every sub-layer.
        # ours_no_dropout is the like-for-like comparison.
        models[precision] = {"ours": ours(), "ours_no_dropout": ours(dropout_rate=0.0), "keras_hub": keras_hub_albert()}
        rates[precision] = {name: [] for name in models[precision]}
        peaks[precision] = []
    keras.mixed_precision.set_global_policy("float32")
    # Every model once a round, both precisions in the same round: each
    # round's ratios against keras-hub's float32 rate are side by side, not
    # minutes apart on a host whose speed drifts.
    for _ in range(args.rounds):
        for precision in args.precisions:
            peaks[precision].append(matmul_peak("bfloat16" if precision == "mixed_bfloat16" else "float32"))
            if precision == "float32":
                ceilings.append(matmul_ceiling(products))
                bandwidths.append(memory_bandwidth())
            for name, (model, hub) in models[precision].items():
                features, labels = inputs(hub)
                rates[precision][name].append(tokens * steps_per_second(model, features, labels, BATCH, args.steps))
    for precision in args.precisions:
        results[precision].update({name: float(np.median(r)) for name, r in rates[precision].items()})
        # The peak is the best the machine did: the highest round's median.
        results[precision]["matmul_peak_gflops"] = float(max(peaks[precision]))
        # Each round's rates and peak, in order: how often one model led, not only the medians.
        results.setdefault("rounds", {})[precision] = {
            name: [float(x) for x in r]
            for name, r in {**rates[precision], "matmul_peak_gflops": peaks[precision]}.items()
        }
    float32_peak = results["float32"]["matmul_peak_gflops"]
    # The highest rounds', as for the peak: the best the machine did.
    results["float32"]["step_matmuls_gflops"] = float(max(ceilings))
    results["memory_bandwidth_gb_per_s"] = float(max(bandwidths))
    results["rounds"]["float32"]["step_matmuls_gflops"] = [float(x) for x in ceilings]
    results["rounds"]["memory_bandwidth_gb_per_s"] = [float(x) for x in bandwidths]
    bucket = TrainConfig().length_bucket
    padded, bucketed = real_token_fractions(bucket)
    results["real_token_fraction_demo_corpus"] = {"padded": padded, f"length_bucket_{bucket}": bucketed}
    print(f"{'':<32}{'tokens/s':>10}{'x keras-hub f32':>17}{'MFU (f32 peak)':>16}")
    baseline = results["float32"]["keras_hub"]
    for precision in args.precisions:
        for name in ("ours", "ours_no_dropout", "keras_hub"):
            rate = results[precision][name]
            print(
                f"{name + ' ' + precision:<32}{rate:>10,.0f}{rate / baseline:>16.2f}x"
                f"{rate * flops / 1e9 / float32_peak:>15.0%}"
            )
    baseline_rounds = results["rounds"]["float32"]["keras_hub"]
    for precision in args.precisions:
        rounds = results["rounds"][precision]
        ratios = [a / b for a, b in zip(rounds["ours"], rounds["keras_hub"])]
        print(f"ours / keras-hub, both {precision}, per round: " + ", ".join(f"{r:.2f}x" for r in ratios))
        if precision != "float32":
            ratios = [a / b for a, b in zip(rounds["ours"], baseline_rounds)]
            print(
                f"ours {precision} / keras-hub float32 of the same round: "
                + ", ".join(f"{r:.2f}x" for r in ratios)
                + f" (median {np.median(ratios):.2f}x)"
            )
    bfloat16_peak = results.get("mixed_bfloat16", {}).get("matmul_peak_gflops")
    print(
        f"matmul peak (highest round): float32 {float32_peak:.0f} GFLOP/s"
        + (f", bfloat16 {bfloat16_peak:.0f} GFLOP/s" if bfloat16_peak else "")
        + f"; training FLOPs/token {flops / 1e6:.1f}M"
    )
    for precision in args.precisions:
        print(
            f"matmul peak {precision} per round: "
            + ", ".join(f"{p:.0f}" for p in results["rounds"][precision]["matmul_peak_gflops"])
            + " GFLOP/s"
        )
    step_matmuls_rate = results["float32"]["step_matmuls_gflops"]
    print(
        f"float32 matmuls of a step alone, at their shapes: {step_matmuls_rate:.0f} GFLOP/s, an MFU ceiling "
        f"of {step_matmuls_rate / float32_peak:.0%}; share of the step in matmuls at that rate (MFU / ceiling): "
        + ", ".join(
            f"{name} {results['float32'][name] * flops / 1e9 / step_matmuls_rate:.0%}" for name in ("ours", "keras_hub")
        )
    )
    print(
        f"memory bandwidth of an elementwise float32 pass: {results['memory_bandwidth_gb_per_s']:.1f} GB/s "
        f"({float32_peak / results['memory_bandwidth_gb_per_s']:.0f} FLOP of the matmul peak per byte)"
    )
    rate = results["float32"]["ours"]
    print(
        f"real (non-padding) tokens on the demo corpus at max length 128: {padded:.1%} of positions "
        f"padded to max length (ours f32: {rate * padded:,.0f} real tokens/s), {bucketed:.1%} with "
        f"length buckets of {bucket}, the default (at least {rate * bucketed:,.0f} real tokens/s: "
        f"shorter rows also make attention cheaper)"
    )
    write_results(results, args.out)


if __name__ == "__main__":
    main()
