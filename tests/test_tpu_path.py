"""What `--tpu` builds, compiled with XLA on the CPU: no TPU is needed to find
an op XLA cannot compile, a shape that is not static, or a step that trains
differently once compiled."""

import dataclasses
import functools
import json

import keras
import numpy as np
import pytest
import tensorflow as tf

from conftest import TINY_MODEL, WORD_TOKENS
from layers import SharedEncoder, fast_path
from pipeline.config import Config, override
from pipeline.dataset import Split, learn_vocabulary, load_split, train_dataset, usable_length_bucket
from pipeline.masking import masked_lm_dataset
from pipeline.metrics import regression_report
from pipeline.model import build_model
from pipeline.pretrain import pretrain
from pipeline.readers import read_examples
from pipeline.strategy import configure_runtime, run_config, tpu_defaults
from pipeline.text_stream import Sequences, TextSource, sequences_of
from pipeline.tokenizer import CLS_ID, SEP_ID
from pipeline.train import train_and_evaluate
from pipeline.trainer import Trainer, build_optimizer

TINY = {
    "model": {**TINY_MODEL, "dropout_rate": 0.1},
    "data": WORD_TOKENS,
    "optimizer": {"learning_rate": 3e-3},
    "train": {"epochs": 1, "pretrain_epochs": 0, "validation_split": 0.0, "refit": False},
}
# The compiled step's losses against the same step op by op, both in
# mixed_bfloat16: XLA fuses and rounds bfloat16 differently, nothing more.
LOSS_RTOL = 1e-2


def _tpu_config(replicas, **train):
    """What `--tpu` runs on `replicas` cores, at the tests' size: 20 steps an
    epoch in host loops of 4."""
    config = override(Config.from_dict(TINY), tpu_defaults(replicas))
    return override(
        config,
        {
            "train": {"batch_size": 32, "steps_per_execution": 4, "checkpoint_every": 8, **train},
            "pretrain": {"batch_size": 32},
        },
    )


@pytest.mark.slow
def test_tpu_steps_compile_with_xla_and_train_as_the_uncompiled_steps(tmp_path, monkeypatch, corpus, two_replicas):
    # On 2 replicas: one replica runs the same step without the all-reduce.
    monkeypatch.setattr("pipeline.pretrain.EVALUATION_DOCUMENTS", 256)  # a stream has no end to stop at
    # Masked-LM on a stream, as a corpus larger than its sample is read: 20 steps. Shuffled in 256 sequences:
    # the default buffer of 10,000 refills from 15 passes of this corpus after the last step, and the
    # iterator's teardown waits for it.
    texts = tmp_path / "texts.txt"
    texts.write_text("\n".join(read_examples(corpus[0]).texts) + "\n", encoding="utf-8")
    stream = {"data": {"sample_size": 200}, "pretrain": {"steps": 20, "shuffle_buffer": 256}}
    results = {}
    for jit_compile in (False, True):
        config = _tpu_config(2, jit_compile=jit_compile)
        run = train_and_evaluate(
            config, str(tmp_path / f"train_{jit_compile}"), *corpus, strategy=two_replicas, export=False
        )
        assert not fast_path.enabled()  # the layers are plain Keras, as on a TPU
        assert keras.mixed_precision.global_policy().name == "mixed_bfloat16"
        directory = str(tmp_path / f"pretrain_{jit_compile}")
        masked_lm = pretrain(override(config, stream), directory, str(texts), strategy=two_replicas)
        results[jit_compile] = (run["train_loss_by_epoch"][1], run["loss"], masked_lm["loss_by_epoch"][1])
    np.testing.assert_allclose(results[True], results[False], rtol=LOSS_RTOL)
    assert results[True][1] < np.log(2)  # and it learned: below chance on the two demo classes


@pytest.mark.slow
@pytest.mark.parametrize("task", ["pairs", "multi_label", "regression"])
def test_a_pair_a_multi_label_and_a_regression_step_compile_with_xla_and_train_as_the_uncompiled_steps(tmp_path, task):
    # Their segment embedding, heads and losses under --tpu's settings, on random texts whose labels follow
    # their first word (of pairs, the second text's), one step an epoch. On one replica the whole step,
    # the optimizer's update too, is one XLA program, as a TPU compiles it (the test above covers 2
    # replicas). In float32 and without dropout (whose masks the compiled step draws otherwise: first-step
    # losses 0.1-0.2% apart), the first step's loss, before any update, is the uncompiled step's to the
    # rounding; the next ones stay close.
    config = override(_tpu_config(1), {"model": {"dropout_rate": 0.0}, "train": {"precision": "float32"}})
    strategy = tf.distribute.get_strategy()
    head = {
        "pairs": {"num_classes": 3, "segments": 2},
        "multi_label": {"num_classes": 3, "head_activation": "sigmoid", "label_log_odds": [-2.0, 0.0, 1.0]},
        "regression": {"num_classes": 1, "head_activation": "linear", "target_mean": 50.0, "target_scale": 10.0},
    }[task]
    model_config = dataclasses.replace(config.model, vocabulary_size=30, **head)
    ids = np.random.default_rng(0).integers(SEP_ID + 2, 30, size=(32, 16)).astype("int32")
    ids[:, [0, 7, 15]] = [CLS_ID, SEP_ID, SEP_ID]  # [CLS] a [SEP] b [SEP]
    first = ids[:, 8 if task == "pairs" else 1] % 3
    labels = {
        "pairs": first.astype("int32"),
        "multi_label": np.eye(3, dtype="float32")[first],
        "regression": (40.0 + 10 * first).astype("float32"),
    }[task]
    split = Split(ids, labels, [f"f:{i}" for i in range(32)], {})
    losses = {}
    # The regression's Huber loss (delta in standard deviations), checked against the report's.
    huber_delta = 0.5 if task == "regression" else 0.0
    for jit_compile in (False, True):
        train_config = dataclasses.replace(config.train, jit_compile=jit_compile, huber_delta=huber_delta)
        configure_runtime(config)  # the same seeds: the same initial weights
        with strategy.scope():
            model = build_model(model_config)
            trainer = Trainer(
                model,
                build_optimizer(config.optimizer, 8),
                strategy,
                train_config,
                config.optimizer,
                str(tmp_path / str(jit_compile)),
                task="classification" if task == "pairs" else task,
                target_scale=model_config.target_scale,
            )
        make_dataset = functools.partial(train_dataset, split, 32, 0)
        if task == "regression":
            start = regression_report(labels, np.asarray(model(ids)), model_config.target_scale, huber_delta)
        losses[jit_compile] = list(trainer.fit(make_dataset, len(split), 4).values())
        outputs, _ = trainer.predict(split)
        assert outputs.shape == (32, model_config.num_classes)
    np.testing.assert_allclose(losses[True][0], losses[False][0], rtol=1e-5)
    if task == "regression":  # the first step's loss, before any update
        np.testing.assert_allclose(losses[False][0], start["loss"], rtol=1e-5)
    np.testing.assert_allclose(losses[True], losses[False], rtol=LOSS_RTOL)
    assert losses[True][-1] < losses[True][0]


def test_tpu_batches_have_static_shapes(corpus, two_replicas):
    strategy = two_replicas
    config = _tpu_config(2)
    examples = read_examples(corpus[0])
    names, tokenizer = learn_vocabulary(examples, config.data, config.model.max_length)
    split = load_split(examples, config.data, tokenizer, names)
    length_bucket = usable_length_bucket(config, strategy)
    assert length_bucket == 0
    classification = train_dataset(split, config.train.batch_size, seed=1, length_bucket=length_bucket)
    masked, streamed = (
        masked_lm_dataset(
            sequences,
            len(tokenizer.vocabulary),
            tokenizer.max_length,
            config.pretrain.batch_size,
            config.pretrain,
            seed=1,
            length_bucket=length_bucket,
        )
        for sequences in (
            sequences_of(examples.texts, tokenizer),
            Sequences(TextSource(corpus[0], config.data), tokenizer, cached=False, shuffle_buffer=100),
        )
    )
    for dataset in (classification, masked, streamed):
        for spec in tf.nest.flatten(dataset.element_spec):
            assert spec.shape.is_fully_defined(), dataset.element_spec
            assert spec.shape[0] == 32


def test_gradients_are_summed_over_replicas_once(tmp_path, monkeypatch, two_replicas):
    calls = []
    real_all_reduce = tf.distribute.ReplicaContext.all_reduce

    def counting_all_reduce(self, reduce_op, value, options=None):
        calls.append(len(tf.nest.flatten(value)))
        return real_all_reduce(self, reduce_op, value, options)

    monkeypatch.setattr(tf.distribute.ReplicaContext, "all_reduce", counting_all_reduce)
    strategy = two_replicas
    config = Config.from_dict(TINY)
    model_config = dataclasses.replace(config.model, vocabulary_size=30, num_classes=3)
    train_config = dataclasses.replace(config.train, batch_size=4)
    optimizer_config = dataclasses.replace(config.optimizer, weight_averaging=0.0)
    with strategy.scope():
        model = build_model(model_config)
        trainer = Trainer(
            model, build_optimizer(optimizer_config, 10), strategy, train_config, optimizer_config, str(tmp_path)
        )
    ids = np.random.default_rng(0).integers(1, 30, size=(4, 16)).astype("int32")
    batches = tf.data.Dataset.from_tensors((ids, np.arange(4, dtype="int32") % 3)).repeat()
    trainer._train_steps(iter(strategy.experimental_distribute_dataset(batches)), tf.constant(1))
    # One all-reduce of every gradient, once per replica; the optimizer adds none.
    assert calls == [len(model.trainable_variables)] * 2


def test_plain_layers_compute_what_the_fast_path_does():
    encoder = SharedEncoder(num_layers=2, num_heads=2, intermediate_size=32)
    inputs = tf.random.stateless_normal((2, 6, 16), seed=(1, 2))
    mask = tf.constant([[True] * 6, [True] * 4 + [False] * 2])

    def outputs_and_gradients():
        with tf.GradientTape() as tape:
            outputs = encoder(inputs, mask=mask, training=True)  # no dropout: the same values
            loss = tf.reduce_sum(outputs * tf.sin(tf.range(16, dtype=tf.float32)))
        return outputs, tape.gradient(loss, encoder.trainable_variables)

    fast = outputs_and_gradients()
    with fast_path.scope(False):
        plain = outputs_and_gradients()
    np.testing.assert_allclose(plain[0], fast[0], atol=2e-5)
    for plain_gradient, fast_gradient in zip(plain[1], fast[1]):
        np.testing.assert_allclose(tf.convert_to_tensor(plain_gradient), tf.convert_to_tensor(fast_gradient), atol=2e-4)


def test_tpu_defaults_scale_with_the_replicas_and_yield_to_the_config_file_and_flags(tmp_path, two_replicas):
    strategy = two_replicas
    path = tmp_path / "config.json"
    path.write_text(json.dumps({"train": {"steps_per_execution": 50}}))
    config = run_config(str(path), {"train": {"checkpoint_every": 300}}, strategy, tpu="local")
    assert config.train.batch_size == 2 * tpu_defaults(1)["train"]["batch_size"]
    assert config.pretrain.batch_size == 2 * tpu_defaults(1)["pretrain"]["batch_size"]
    assert (config.train.steps_per_execution, config.train.checkpoint_every) == (50, 300)
    assert (config.train.length_bucket, config.train.precision, config.train.cpu_fast_path) == (
        0,
        "mixed_bfloat16",
        False,
    )
    assert run_config(None, {}, strategy) == Config()  # without --tpu, the defaults
