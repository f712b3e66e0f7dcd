"""Test set-up: quiet TensorFlow, and the CPU split into 2 logical devices.

The split must happen before TensorFlow initializes its devices, so it runs
at import time of this file, before any test module builds a tensor.
"""

import os
import sys

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
os.environ.setdefault("KERAS_BACKEND", "tensorflow")

import tensorflow as tf  # noqa: E402

_cpu = tf.config.list_physical_devices("CPU")[0]
tf.config.set_logical_device_configuration(_cpu, [tf.config.LogicalDeviceConfiguration()] * 2)

# Tests import helpers from this folder (`from layer_test_helper import ...`).
sys.path.insert(0, os.path.dirname(__file__))


import pytest  # noqa: E402

NAMES = ["negative", "neutral", "positive"]
# The tests' model and tokenizer: a run on the demo corpus trains in seconds and still learns it.
TINY_MODEL = {
    "max_length": 16,
    "embedding_size": 16,
    "hidden_size": 32,
    "num_layers": 2,
    "num_heads": 2,
    "intermediate_size": 64,
    "dropout_rate": 0.0,
    # The source design's head: with a weight per position, a model this small learns the demo corpus's
    # word order in the few dozen steps a test trains (mean pooling needs hundreds).
    "pooling": "flatten",
}
WORD_TOKENS = {"tokenizer": "word", "min_count": 1}


def write_csv(path, rows, header):
    """A CSV file of `rows` under `header`; returns its path as a string."""
    import csv

    with open(path, "w", encoding="utf-8", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(header)
        writer.writerows(rows)
    return str(path)


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    """`(train_path, test_path)` of 640 and 200 demo-corpus sentences."""
    from pipeline.demo_corpus import write_demo_corpus

    return write_demo_corpus(tmp_path_factory.mktemp("corpus"), train_size=640, test_size=200)


@pytest.fixture(scope="session")
def two_replicas():
    """A `MirroredStrategy` over the 2 logical CPUs, one per test process:
    every new one numbers its collective all-reduces from the same key, and
    TensorFlow keeps each key's shape for the process, so a second strategy
    training another model fails ("Shape mismatch in the collective
    instance 100")."""
    return tf.distribute.MirroredStrategy(["/cpu:0", "/cpu:1"])


@pytest.fixture(autouse=True)
def _runtime_restored():
    """Each test starts with the process-wide settings a run sets
    (`configure_runtime`): the float32 policy and the CPU fast path on."""
    import keras

    from layers import fast_path

    yield
    keras.mixed_precision.set_global_policy("float32")
    fast_path.set_enabled(True)


@pytest.fixture(scope="session")
def exported(tmp_path_factory):
    """`(model, tokenizer, export_root, export_path)` of a small untrained model."""
    from pipeline.config import ModelConfig
    from pipeline.export import export_saved_model
    from pipeline.model import build_model
    from pipeline.tokenizer import Tokenizer

    tokenizer = Tokenizer.learn(
        ["the cat sat on the mat", "北京 天安门", "a dog"] * 2,
        kind="wordpiece",
        vocabulary_size=200,
        min_count=1,
        max_length=24,
    )
    model = build_model(
        ModelConfig(
            vocabulary_size=len(tokenizer.vocabulary),
            num_classes=3,
            max_length=24,
            hidden_size=32,
            embedding_size=16,
            num_layers=2,
            num_heads=2,
            intermediate_size=64,
        )
    )
    root = str(tmp_path_factory.mktemp("export"))
    return model, tokenizer, root, export_saved_model(model, tokenizer, NAMES, root)
