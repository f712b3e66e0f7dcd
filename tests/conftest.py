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
tf.config.set_logical_device_configuration(
    _cpu, [tf.config.LogicalDeviceConfiguration()] * 2
)

# Tests import helpers from this folder (`from layer_test_helper import ...`).
sys.path.insert(0, os.path.dirname(__file__))
