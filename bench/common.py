"""Shared pieces of the benchmarks: matmul peak, FLOP counts, timed training steps."""

import contextlib
import io
import json
import os
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

from pipeline.config import OptimizerConfig, TrainConfig  # noqa: E402
from pipeline.dataset import train_dataset  # noqa: E402
from pipeline.trainer import Trainer, build_optimizer  # noqa: E402


def write_results(results, path):
    """Writes a benchmark's figures as JSON, creating the folder."""
    os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
    with open(path, "w") as f:
        json.dump(results, f, indent=2)


def matmul_peak(dtype="float32", size=2048, repeats=10, warmup=5):
    """GFLOP/s of a `size`^3 tf.matmul on this machine (median of `repeats`,
    after `warmup` untimed products: the first few of a process run slow)."""
    a = tf.random.normal((size, size), dtype=dtype)
    b = tf.random.normal((size, size), dtype=dtype)
    step = tf.function(lambda: tf.reduce_sum(tf.matmul(a, b)))
    for _ in range(warmup):
        step().numpy()
    return 2 * size**3 / median_seconds(lambda: step().numpy(), repeats) / 1e9


def median_seconds(run, repeats):
    """The median of `repeats` timings of `run()`, in seconds."""
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        run()
        times.append(time.perf_counter() - start)
    return float(np.median(times))


def training_flops_per_token(vocabulary_size, embedding_size, hidden_size, num_layers, intermediate_size, max_length):
    """Analytical training FLOPs per token: 3x forward (forward + two backward matmuls),
    those of `step_matmuls`' products.

    Forward per token: the E x H projection, then per layer Q, K, V, output
    (4 H^2), the feed-forward (2 H F) and the attention scores and mix
    (2 x 2 L H, whatever the heads). The embedding lookup and the head are left out.
    """
    products = step_matmuls(
        vocabulary_size, embedding_size, hidden_size, num_layers, 1, intermediate_size, max_length, batch_size=1
    )
    return sum(count * _flops(*shape) for count, shape in products) // max_length


def _flops(batch, m, k, n):
    """FLOPs of a `(batch, m, k)` by `(batch, k, n)` product."""
    return 2 * batch * m * k * n


def step_matmuls(
    vocabulary_size, embedding_size, hidden_size, num_layers, num_heads, intermediate_size, max_length, batch_size
):
    """The matrix products of one training step, `[(count, (batch, m, k, n)), ...]`:
    forward, input gradient and kernel gradient of the E x H projection and
    of every layer's query, key, value, output and feed-forward kernels, and
    of the attention's scores and mix (batch over sequences and heads)."""
    del vocabulary_size  # a lookup, not a product
    tokens, head_size, heads = batch_size * max_length, hidden_size // num_heads, batch_size * num_heads
    products = []
    for count, inputs, outputs in (
        (1, embedding_size, hidden_size),
        (4 * num_layers, hidden_size, hidden_size),
        (num_layers, hidden_size, intermediate_size),
        (num_layers, intermediate_size, hidden_size),
    ):
        products += [
            (count, (1, tokens, inputs, outputs)),  # x @ W
            (count, (1, tokens, outputs, inputs)),  # dY @ W^T
            (count, (1, inputs, tokens, outputs)),
        ]  # x^T @ dY
    # Scores Q K^T and its gradient dMix V^T: (L, d) by (d, L); the mix P V
    # and the gradients dS K, dS^T Q, P^T dMix: (L, L) by (L, d).
    products += [
        (2 * num_layers, (heads, max_length, head_size, max_length)),
        (4 * num_layers, (heads, max_length, max_length, head_size)),
    ]
    return products


def matmul_ceiling(products, dtype="float32", chain=4, repeats=7):
    """GFLOP/s of `products` (`step_matmuls`' list) done alone, one after
    another: each product's median time over `repeats` runs of `chain`
    products on distinct operands (no product finds its operands left in
    the cache by the one before), ordered by control dependencies so that
    none overlap, times its count. The most a step of them can reach: a
    step's utilization over this rate's is the share of its time its
    matmuls take."""
    total_seconds = total_flops = 0.0
    for count, (batch, m, k, n) in products:
        shape = (batch,) if batch > 1 else ()
        lefts = [tf.random.normal(shape + (m, k), dtype=dtype) for _ in range(chain)]
        rights = [tf.random.normal(shape + (k, n), dtype=dtype) for _ in range(chain)]

        @tf.function
        def run(lefts, rights):
            corners = []
            for left, right in zip(lefts, rights):
                with tf.control_dependencies(corners[-1:]):
                    corners.append(tf.matmul(left, right)[..., :1, :1])
            return corners

        run(lefts, rights)
        seconds = median_seconds(lambda: [corner.numpy() for corner in run(lefts, rights)], repeats)
        total_seconds += count * seconds / chain
        total_flops += count * _flops(batch, m, k, n)
    return total_flops / total_seconds / 1e9


def memory_bandwidth(megabytes=256, repeats=7):
    """GB/s of an elementwise pass (`x * 2`, float32) read and written,
    median of `repeats`: what the activations' passes between the matmuls run at."""
    x = tf.random.normal((megabytes * 2**18,))
    double = tf.function(lambda x: (x * 2)[:1])
    double(x).numpy()
    return 2 * megabytes * 2**20 / median_seconds(lambda: double(x).numpy(), repeats) / 1e9


def timed_steps(trainer, iterator, steps, warmup_steps):
    """Seconds `trainer` takes for `steps` training steps from `iterator`,
    after `warmup_steps` untimed ones (tracing, first compiled steps)."""
    trainer._train_steps(iterator, tf.constant(warmup_steps))
    float(trainer.loss.result())
    start = time.perf_counter()
    trainer._train_steps(iterator, tf.constant(steps))
    float(trainer.loss.result())  # waits for the steps
    return time.perf_counter() - start


def timed_fit(trainer, make_dataset, num_examples):
    """Seconds `trainer.fit` takes for one fresh epoch of `num_examples`
    from `make_dataset` (as `fit` takes it), its progress bar silenced: the
    host's round trips counted, as a run pays them."""
    trainer.step.assign(0)  # a fresh epoch, not a resume
    trainer._restored = True
    start = time.perf_counter()
    with contextlib.redirect_stdout(io.StringIO()):
        trainer.fit(make_dataset, num_examples, epochs=1)
    return time.perf_counter() - start


def steps_per_second(model, features, labels, batch_size, steps, warmup_steps=3, weight_averaging=0.0):
    """Steady-state training steps/s of `model` in the project's training loop
    (without the moving average of the weights unless `weight_averaging`
    says: the model's own rate, as keras-hub's is measured)."""
    config = TrainConfig(batch_size=batch_size)
    optimizer_config = OptimizerConfig(weight_averaging=weight_averaging)
    with tempfile.TemporaryDirectory() as directory:
        trainer = Trainer(
            model,
            build_optimizer(optimizer_config, 10_000),
            tf.distribute.get_strategy(),
            config,
            optimizer_config,
            directory,
        )
        iterator = iter(tf.data.Dataset.from_tensors((features, labels)).repeat())
        return steps / timed_steps(trainer, iterator, steps, warmup_steps)


def alternated_rounds(arms, rounds, seconds, flip=True):
    """Each arm's times over `rounds` rounds, `{arm: [seconds(arm, round), ...]}`:
    a round 0 first, not counted (tracing, the first steps of most shapes),
    then rounds 1..`rounds`, every arm once a round, in `arms`' order or,
    with `flip`, in its reverse every other round (round 0 included)."""
    arms = list(arms)
    times = {arm: [] for arm in arms}
    for round_ in range(rounds + 1):
        for arm in arms if round_ % 2 or not flip else arms[::-1]:
            elapsed = seconds(arm, round_)
            if round_:
                times[arm].append(elapsed)
    return times


def ab_figures(times, steps, baseline, arm):
    """The figures of an A/B step-time benchmark: `times` holds each arm's
    seconds per round (`steps` steps each); `arm` against `baseline`."""
    medians = {name: float(np.median(values)) for name, values in times.items()}
    return {
        "median_ms_per_step": {name: 1000 * median / steps for name, median in medians.items()},
        "ratio": medians[arm] / medians[baseline],
        "round_ratios": [a / b for a, b in zip(times[arm], times[baseline])],
        "round_seconds": times,
    }


def real_token_fraction(split, batch_size, length_bucket):
    """Real tokens among the positions computed in one epoch of `split`'s
    training batches cut with `length_bucket`."""
    computed = sum(
        int(tf.size(ids)) for ids, _ in train_dataset(split, batch_size, seed=0, length_bucket=length_bucket)
    )
    return float((split.ids != 0).sum()) / computed
