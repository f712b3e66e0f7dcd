"""The runtime of a run: its distribution strategy, precision policy and seeds."""

import contextlib
import json
import os

import keras
import tensorflow as tf

from layers import fast_path
from pipeline.config import Config, override
from pipeline.layout import WORKERS_DIR

# Under MODEL_DIR: the folders the non-chief workers of a cluster write to.


class TPUUnavailableError(RuntimeError):
    """`--tpu` was given but no TPU could be reached."""


def resolve_strategy(tpu=None):
    """The strategy for this machine.

    Args:
        tpu: None for no TPU; "local" for a TPU VM's own chips; otherwise the
            TPU's name or `grpc://` address, as `TPUClusterResolver` takes it.

    Returns:
        `TPUStrategy` with `tpu`; else `MultiWorkerMirroredStrategy` when
        `TF_CONFIG` names a cluster, `MirroredStrategy` on several GPUs, and
        the default strategy otherwise.
    """
    if tpu is not None:
        return _tpu_strategy(tpu)
    if json.loads(os.environ.get("TF_CONFIG", "{}")).get("cluster"):
        return tf.distribute.MultiWorkerMirroredStrategy()
    if len(tf.config.list_logical_devices("GPU")) > 1:
        return tf.distribute.MirroredStrategy()
    return tf.distribute.get_strategy()


# Per replica where it scales with the TPU cores: the CPU defaults (64 a
# step, a host round trip every 16 steps) would leave a TPU's cores idle
# between round trips.
TPU_BATCH_PER_REPLICA = 32
TPU_PRETRAIN_BATCH_PER_REPLICA = 64
TPU_STEPS_PER_EXECUTION = 200
TPU_CHECKPOINT_EVERY = 1000


def tpu_defaults(replicas):
    """The config fields `--tpu` sets before `--config` and the flags, for
    `replicas` TPU cores: batch sizes per replica, host loops and checkpoints
    sized for a TPU, static shapes (no length buckets), bfloat16, and the
    layers as plain Keras (no CPU fast path)."""
    return {
        "train": {
            "batch_size": TPU_BATCH_PER_REPLICA * replicas,
            "steps_per_execution": TPU_STEPS_PER_EXECUTION,
            "checkpoint_every": TPU_CHECKPOINT_EVERY,
            "length_bucket": 0,
            "precision": "mixed_bfloat16",
            "cpu_fast_path": False,
        },
        "pretrain": {"batch_size": TPU_PRETRAIN_BATCH_PER_REPLICA * replicas},
    }


def describe_tpu_defaults(replicas):
    """One line saying what `tpu_defaults(replicas)` sets."""
    fields = [
        f"{section}.{field} {value}"
        for section, values in tpu_defaults(replicas).items()
        for field, value in values.items()
    ]
    return f"TPU defaults for {replicas} replica(s) (--config and flags override them): " + ", ".join(fields)


def run_config(config_path, overrides, strategy, tpu=None):
    """A command's config: the defaults, with `--tpu` `tpu_defaults` over
    them (printed), then the `--config` file, then the command line's
    `overrides` (nested as the config)."""
    base = Config()
    if tpu is not None:
        replicas = strategy.num_replicas_in_sync
        base = override(base, tpu_defaults(replicas), "--tpu")
        print(describe_tpu_defaults(replicas))
    config = Config.load(config_path, base=base) if config_path else base
    return override(config, overrides, "command line")


def check_batch_sizes(strategy, batch_sizes):
    """Refuses, before any work, a global batch size the replicas cannot share.

    `batch_sizes` maps config fields (`"train.batch_size"`) to their values;
    each step of a field's batches is split evenly among the replicas.
    """
    replicas = strategy.num_replicas_in_sync
    for field, size in batch_sizes.items():
        if size % replicas:
            raise ValueError(
                f"{field} {size} does not divide evenly among the {replicas} replicas of "
                f"{type(strategy).__name__}: make it a multiple of {replicas}"
            )


def output_dir(model_dir, strategy):
    """Where this process writes a run's files.

    `model_dir` on the chief, and everywhere outside a multi-worker cluster.
    The other workers of a `MultiWorkerMirroredStrategy` still save what the
    chief saves (saving distributed variables can take part in collectives),
    but into a folder of their own, `MODEL_DIR/workers/<task>_<index>`, which
    `finish_run` removes; they read what they resume from (checkpoints,
    vocabulary) in `model_dir`, as the chief does.
    """
    if strategy.extended.should_checkpoint:
        return model_dir
    resolver = strategy.cluster_resolver
    return os.path.join(model_dir, WORKERS_DIR, f"{resolver.task_type}_{resolver.task_id}")


def finish_run(model_dir, strategy):
    """Waits for every worker of a cluster, then removes this worker's folder.

    Without the wait, a chief that finishes first takes the cluster's
    coordination service down under workers still exporting.
    """
    if isinstance(strategy, tf.distribute.MultiWorkerMirroredStrategy):
        _barrier(strategy)
    own = output_dir(model_dir, strategy)
    if own != model_dir:
        if tf.io.gfile.exists(own):
            tf.io.gfile.rmtree(own)
        if "://" not in own:  # in a bucket an empty folder does not exist
            with contextlib.suppress(OSError):
                os.rmdir(os.path.dirname(own))  # the last worker out removes workers/


@tf.function(autograph=False)
def _barrier(strategy):
    # An all-reduce returns on no worker before every worker has joined it.
    return strategy.reduce("SUM", strategy.run(tf.ones, args=([],)), axis=None)


def _tpu_strategy(tpu):
    try:
        resolver = tf.distribute.cluster_resolver.TPUClusterResolver(tpu=tpu)
        if tpu != "local":
            tf.config.experimental_connect_to_cluster(resolver)
        tf.tpu.experimental.initialize_tpu_system(resolver)
        return tf.distribute.TPUStrategy(resolver)
    except Exception as error:  # TF raises many types here; all mean "no TPU"
        first_line = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
        raise TPUUnavailableError(
            f"--tpu {tpu}: no TPU could be reached ({first_line}). On a TPU VM use "
            "--tpu local with the TPU build of TensorFlow installed (see README, "
            "'Training on a TPU'); for a remote TPU pass its name or grpc:// address."
        ) from None


def configure_runtime(config, tpu=None):
    """Sets the precision policy, seeds, determinism and the layers' CPU
    fast path (never under a TPU); returns the policy name."""
    precision = config.train.precision
    if precision == "auto":
        precision = "mixed_bfloat16" if tpu is not None else "float32"
    keras.mixed_precision.set_global_policy(precision)
    keras.utils.set_random_seed(config.train.seed)
    fast_path.set_enabled(config.train.cpu_fast_path and tpu is None)
    if tpu is None and not tf.config.list_physical_devices("GPU"):
        tf.config.experimental.enable_op_determinism()  # same seed, same metrics
    return precision
