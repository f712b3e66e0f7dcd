"""The runtime of a run: its distribution strategy, precision policy and seeds."""

import json
import os

import keras
import tensorflow as tf


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
    """Sets the precision policy, seeds and determinism; returns the policy name."""
    precision = config.train.precision
    if precision == "auto":
        precision = "mixed_bfloat16" if tpu is not None else "float32"
    keras.mixed_precision.set_global_policy(precision)
    keras.utils.set_random_seed(config.train.seed)
    if tpu is None and not tf.config.list_physical_devices("GPU"):
        tf.config.experimental.enable_op_determinism()  # same seed, same metrics
    return precision
