"""The step `--tpu` runs, compiled with XLA on this CPU: FLOPs, padding, host-loop overhead.

    .venv/bin/pip install -e ".[bench]"
    .venv/bin/python bench/tpu_step.py [--replicas 8] [--rounds 3] [--steps 200]

No TPU is needed. The default model on the tweets of bench/accuracy.py (its
90% fit slice) under `pipeline.strategy.tpu_defaults(--replicas)` - static
max length, mixed_bfloat16, plain Keras layers - so the first TPU run has
numbers to compare against:
- FLOPs of one replica's training step and of the global step (analytical,
  `common.training_flops_per_token` times the positions computed);
- the padding share: positions computed that are padding, at the static
  max length a TPU keeps, against the length buckets CPUs train with;
- the host-loop overhead: one replica's step compiled with XLA
  (`train.jit_compile`) through `Trainer.fit`, one step per host round
  trip against `--tpu`'s steps per execution, alternated A/B over
  `--rounds` (the first round, compiling, not counted). A TPU's round trip
  costs other milliseconds than this CPU's; the ratio says how much of a
  step the round trips take where steps are as short as these.
"""

import argparse
import dataclasses
import os
import tempfile

from common import (
    ab_figures,
    alternated_rounds,
    real_token_fraction,
    timed_fit,  # sets up the path and TF's logging
    training_flops_per_token,
    write_results,
)

import keras  # noqa: E402
import tensorflow as tf  # noqa: E402

from accuracy import default_fit_split  # noqa: E402
from layers import fast_path  # noqa: E402
from pipeline.config import override  # noqa: E402
from pipeline.dataset import train_dataset  # noqa: E402
from pipeline.model import build_model  # noqa: E402
from pipeline.strategy import tpu_defaults  # noqa: E402
from pipeline.trainer import Trainer, build_optimizer  # noqa: E402


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--cache", default=os.path.join("bench", "cache"), help="where the corpus is fetched to")
    parser.add_argument("--replicas", type=int, default=8, help="TPU cores the defaults are sized for (v3-8: 8)")
    parser.add_argument("--rounds", type=int, default=3, help="A/B rounds counted; each arm's median is reported")
    parser.add_argument("--steps", type=int, default=200, help="training steps per arm and round (one epoch)")
    parser.add_argument(
        "--out",
        default=os.path.join("bench", "results", "tpu_step.json"),
        help="JSON of the figures and each round's times",
    )
    args = parser.parse_args()
    cpu_config, split = default_fit_split(args.cache)
    config = override(cpu_config, tpu_defaults(args.replicas))
    replica_batch = config.train.batch_size // args.replicas
    model = config.model
    positions = replica_batch * model.max_length
    flops = (
        training_flops_per_token(
            model.vocabulary_size,
            model.embedding_size,
            model.hidden_size,
            model.num_layers,
            model.intermediate_size,
            model.max_length,
        )
        * positions
    )
    real = {
        "static": real_token_fraction(split, config.train.batch_size, 0),
        "length_buckets": real_token_fraction(split, cpu_config.train.batch_size, cpu_config.train.length_bucket),
    }

    keras.mixed_precision.set_global_policy(config.train.precision)
    fast_path.set_enabled(config.train.cpu_fast_path)
    # An epoch of --steps: host loops of --tpu's steps per execution, or the whole epoch where it is shorter.
    arms = {"one": 1, "tpu": min(config.train.steps_per_execution, args.steps)}
    with tempfile.TemporaryDirectory() as directory:
        trainers = {}
        for name, steps_per_execution in arms.items():
            train_config = dataclasses.replace(
                config.train,
                batch_size=replica_batch,
                jit_compile=True,
                steps_per_execution=steps_per_execution,
                checkpoint_every=args.steps * (args.rounds + 1),
            )
            trainers[name] = Trainer(
                build_model(config.model),
                build_optimizer(config.optimizer, 10_000),
                tf.distribute.get_strategy(),
                train_config,
                config.optimizer,
                os.path.join(directory, name),
            )

        def seconds(name, round_):
            def make_dataset(epoch, skip_batches, input_context=None):  # the round's batches
                return train_dataset(
                    split,
                    replica_batch,
                    config.train.seed,
                    epoch=round_,
                    skip_batches=skip_batches,
                    input_context=input_context,
                )

            return timed_fit(trainers[name], make_dataset, args.steps * replica_batch)

        times = alternated_rounds(arms, args.rounds, seconds)
    figures = ab_figures(times, args.steps, "one", "tpu")
    step_ms = figures["median_ms_per_step"]
    round_trip_ms = (step_ms["one"] - step_ms["tpu"]) / (1 - 1 / arms["tpu"])
    results = {
        "replicas": args.replicas,
        "replica_batch": replica_batch,
        "global_batch": config.train.batch_size,
        "max_length": model.max_length,
        "precision": config.train.precision,
        "replica_step_gflop": flops / 1e9,
        "global_step_gflop": flops * args.replicas / 1e9,
        "padding_share": {key: 1 - value for key, value in real.items()},
        "steps_per_execution": arms["tpu"],
        "steps": args.steps,
        "round_trip_ms": round_trip_ms,
        "gflops_per_second_cpu": flops / step_ms["tpu"] / 1e6,
        **figures,
    }
    print(
        f"--tpu on {args.replicas} replicas: batches of {config.train.batch_size} ({replica_batch} per replica) "
        f"of {model.max_length} tokens, {config.train.precision}"
    )
    print(f"FLOPs: {flops / 1e9:.2f} GFLOP per replica step, {flops * args.replicas / 1e9:.1f} per global step")
    print(
        f"padding: {results['padding_share']['static']:.1%} of the positions computed at the static length "
        f"({results['padding_share']['length_buckets']:.1%} with CPU length buckets of "
        f"{cpu_config.train.length_bucket})"
    )
    print(
        f"host loop, the replica step compiled with XLA on this CPU ({args.rounds} rounds of {args.steps} "
        f"steps): {step_ms['one']:.1f} ms/step with one step per round trip, {step_ms['tpu']:.1f} with "
        f"{arms['tpu']} ({figures['ratio']:.3f}x); one round trip {round_trip_ms:.1f} ms; "
        f"{results['gflops_per_second_cpu']:.0f} GFLOP/s"
    )
    write_results(results, args.out)


if __name__ == "__main__":
    main()
