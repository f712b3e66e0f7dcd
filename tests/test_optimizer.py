"""The classifier's AdamW: its decoupled weight decay, read from the schedule."""

import dataclasses

import numpy as np
import pytest
import tensorflow as tf

from conftest import TINY_MODEL
from pipeline.config import ModelConfig, OptimizerConfig
from pipeline.model import build_model
from pipeline.trainer import build_optimizer


@pytest.mark.parametrize("replicas", [1, 2])
def test_weight_decay_shrinks_matrices_by_the_scheduled_rate_and_leaves_biases_and_norms(replicas, two_replicas):
    # With zero gradients Adam moves nothing: what changes is the decay alone. A warm-up of 2 of 4 steps
    # gives rates 0 and 0.005: after both, each matrix is 1 - 0.1 * 0.005 of what it was (to float32
    # rounding, 200 times finer than the decay).
    strategy = two_replicas if replicas == 2 else tf.distribute.get_strategy()
    config = OptimizerConfig(learning_rate=0.01, warmup_fraction=0.5, weight_decay=0.1)
    with strategy.scope():
        model = build_model(dataclasses.replace(ModelConfig(**TINY_MODEL), vocabulary_size=30, num_classes=2))
        optimizer = build_optimizer(config, total_steps=4)
        optimizer.build(model.trainable_variables)
    before = [np.asarray(v) for v in model.trainable_variables]

    @tf.function
    def step():
        def apply():
            optimizer.apply_gradients([(tf.zeros_like(v), v) for v in model.trainable_variables])

        strategy.run(apply)

    step()
    step()
    decayed = []
    for variable, old in zip(model.trainable_variables, before):
        excluded = "bias" in variable.path or "norm" in variable.path
        np.testing.assert_allclose(np.asarray(variable), old * (1.0 if excluded else 1 - 0.1 * 0.005), rtol=1e-6)
        decayed.append(not excluded)
    assert any(decayed) and not all(decayed)
