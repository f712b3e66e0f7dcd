from math import erf, exp, pi, sqrt

import numpy as np
import pytest
import tensorflow as tf

from graph_helper import xla_compiled_ops
from layers.dropout import dropout
from layers.fused_gradients import dense, dense_gelu, gelu, gelu_compiled, project, residual_norm


def _value_and_gradient(function, x):
    x = tf.constant(x)
    with tf.GradientTape() as tape:
        tape.watch(x)
        y = function(x)
        loss = tf.reduce_sum(tf.cos(2.0 * y))
    return y.numpy(), tape.gradient(loss, x).numpy()


def _gelu_derivative(x):
    return np.array([0.5 * (1 + erf(v / sqrt(2))) + v * exp(-0.5 * v * v) / sqrt(2 * pi) for v in x])


def test_gelu_equals_exact_gelu_and_its_gradient():
    x = np.linspace(-6.0, 6.0, 241, dtype="float32")
    ours = _value_and_gradient(gelu, x)
    reference = _value_and_gradient(lambda v: tf.nn.gelu(v, approximate=False), x)
    np.testing.assert_allclose(ours[0], reference[0], rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(ours[1], reference[1], rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("x, derivative", [(0.0, 0.5), (1.0, 1.0833155), (-1.0, -0.0833155)])
def test_gelu_derivative_golden_values(x, derivative):
    # d/dx x * Phi(x) = Phi(x) + x * phi(x), computed independently.
    x = tf.constant(x)
    with tf.GradientTape() as tape:
        tape.watch(x)
        y = gelu(x)
    assert float(tape.gradient(y, x)) == pytest.approx(derivative, abs=1e-6)


def test_gelu_gradient_runs_compiled_in_graphs_of_unknown_shape_and_bfloat16():
    x = tf.constant(np.linspace(-4.0, 4.0, 24).reshape(2, 3, 4), tf.bfloat16)

    @tf.function(input_signature=[tf.TensorSpec([None, None, 4], tf.bfloat16)])
    def gradient(v):
        with tf.GradientTape() as tape:
            tape.watch(v)
            y = gelu(v)
        return tape.gradient(y, v)

    got = tf.cast(gradient(x), tf.float32).numpy().ravel()
    # At the bfloat16 inputs, to bfloat16's rounding (8 bits of mantissa).
    expected = _gelu_derivative(tf.cast(x, tf.float32).numpy().ravel())
    np.testing.assert_allclose(got, expected, rtol=1e-2, atol=1e-2)
    assert xla_compiled_ops(gradient.get_concrete_function().graph.as_graph_def())


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_compiled_gelu_equals_gelu_in_values_and_gradients(dtype):
    # The training graphs' variant: forward and gradient in one XLA pass each,
    # computed in float32 and rounded once to `dtype`.
    x = tf.constant(np.linspace(-6.0, 6.0, 241).reshape(1, 241), dtype)
    upstream = tf.constant(np.cos(np.arange(241.0)).reshape(1, 241), dtype)
    results = []
    for function in (gelu, gelu_compiled):
        with tf.GradientTape() as tape:
            tape.watch(x)
            y = function(x)
        results.append([tf.cast(v, tf.float32).numpy() for v in (y, tape.gradient(y, x, upstream))])
    tolerance = {"float32": 1e-6, "bfloat16": 1e-2}[dtype]  # bfloat16: 8 bits of mantissa
    for compiled, reference in zip(results[1], results[0]):
        np.testing.assert_allclose(compiled, reference, rtol=tolerance, atol=tolerance)
    exact = [v * 0.5 * (1 + erf(v / sqrt(2))) for v in tf.cast(x, tf.float64).numpy().ravel()]
    np.testing.assert_allclose(results[1][0].ravel(), exact, rtol=tolerance, atol=tolerance)
    compiled = tf.function(gelu_compiled).get_concrete_function(tf.TensorSpec([None, 241], dtype))
    assert xla_compiled_ops(compiled.graph.as_graph_def())


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_compiled_gelu_adds_its_bias_in_the_same_pass(dtype):
    # `gelu_compiled(x, bias)` is `gelu(x + bias)`, with the bias's gradient
    # summed over rows, and the sum rounded to `dtype` once fewer.
    rng = np.random.default_rng(0)
    x = tf.constant(rng.normal(size=(3, 2, 16)) * 2, dtype)
    upstream = tf.constant(rng.normal(size=(3, 2, 16)), dtype)
    bias = tf.Variable(rng.normal(size=(16,)), dtype=tf.float32)
    results = []
    for function in (lambda: gelu(x + tf.cast(bias, dtype)), lambda: gelu_compiled(x, bias)):
        with tf.GradientTape() as tape:
            tape.watch(x)
            y = function()
        gradients = tape.gradient(y, [x, bias], upstream)
        assert y.dtype == x.dtype and gradients[1].dtype == tf.float32
        results.append([tf.cast(v, tf.float32).numpy() for v in [y, *gradients]])
    tolerance = {"float32": 1e-5, "bfloat16": 3e-2}[dtype]
    for compiled, reference in zip(*results):
        np.testing.assert_allclose(compiled, reference, rtol=tolerance, atol=tolerance)
    np.testing.assert_allclose(results[1][2], results[1][1].sum(axis=(0, 1)), rtol=tolerance, atol=tolerance)
    compiled = tf.function(gelu_compiled).get_concrete_function(tf.TensorSpec([None, 16], dtype), bias)
    assert xla_compiled_ops(compiled.graph.as_graph_def())


def test_gelu_forward_graph_holds_no_xla_call():
    # What an export traces: TensorFlow Serving runs XLA calls only with an
    # experimental flag.
    forward = tf.function(gelu).get_concrete_function(tf.TensorSpec([None, 8], tf.float32))
    assert xla_compiled_ops(forward.graph.as_graph_def()) == []


@pytest.mark.parametrize("policy", ["float32", "mixed_bfloat16"])
def test_dense_equals_keras_dense_in_values_and_gradients(policy):
    # The feed-forward's training projection: Dense's values and gradients
    # (input, kernel, bias), its input gradient through a compiled transpose.
    import keras

    layer = keras.layers.Dense(16, bias_initializer="glorot_uniform", dtype=policy)
    rng = np.random.default_rng(0)
    x = tf.constant(rng.normal(size=(2, 5, 8)), layer.compute_dtype)
    upstream = tf.constant(rng.normal(size=(2, 5, 16)), layer.compute_dtype)
    layer.build(x.shape)
    results = []
    for function in (layer, lambda v: dense(v, layer.kernel, layer.bias)):
        with tf.GradientTape() as tape:
            tape.watch(x)
            y = function(x)
        gradients = tape.gradient(y, [x, layer.kernel.value, layer.bias.value], upstream)
        assert y.dtype == x.dtype and gradients[1].dtype == tf.float32
        results.append([tf.cast(v, tf.float32).numpy() for v in [y, *gradients]])
    tolerance = {"float32": 1e-5, "mixed_bfloat16": 2e-2}[policy]
    for ours, keras_value in zip(*results):
        np.testing.assert_allclose(ours, keras_value, rtol=tolerance, atol=tolerance)

    @tf.function
    def input_gradient(v):
        with tf.GradientTape() as tape:
            tape.watch(v)
            y = dense(v, layer.kernel, layer.bias)
        return tape.gradient(y, v, upstream)

    graph = input_gradient.get_concrete_function(tf.TensorSpec([2, None, 8], x.dtype)).graph.as_graph_def()
    assert xla_compiled_ops(graph)  # the kernel's transposed copy


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
@pytest.mark.parametrize("units, width", [(8, 16), (16, 8)])
def test_project_equals_matmul_in_values_and_gradients(dtype, units, width):
    # The feed-forward's second projection in training: `x @ kernel` and its
    # gradients, the kernel's computed transposed when the input is the
    # wider (16 -> 8, as 1024 -> 256 in the model) and directly otherwise.
    rng = np.random.default_rng(0)
    x = tf.constant(rng.normal(size=(2, 5, units)), dtype)
    kernel = tf.Variable(rng.normal(size=(units, width)).astype("float32"))
    upstream = tf.constant(rng.normal(size=(2, 5, width)), dtype)
    results = []
    for function in (lambda v: tf.matmul(v, tf.cast(kernel, dtype)), lambda v: project(v, kernel)):
        with tf.GradientTape() as tape:
            tape.watch(x)
            y = function(x)
        gradients = tape.gradient(y, [x, kernel], upstream)
        assert y.dtype == x.dtype and y.shape == (2, 5, width) and gradients[1].shape == (units, width)
        results.append([tf.cast(v, tf.float32).numpy() for v in [y, *gradients]])
    tolerance = {"float32": 1e-5, "bfloat16": 3e-2}[dtype]
    for ours, reference in zip(*results):
        np.testing.assert_allclose(ours, reference, rtol=tolerance, atol=tolerance)


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_dense_gelu_equals_keras_dense_and_gelu_in_values_and_gradients(dtype):
    # The feed-forward's training projection and activation, the bias added
    # in GELU's compiled pass: Dense then GELU's values and gradients (input,
    # kernel, bias).
    import keras

    policy = {"float32": "float32", "bfloat16": "mixed_bfloat16"}[dtype]
    layer = keras.layers.Dense(16, bias_initializer="glorot_uniform", dtype=policy)
    rng = np.random.default_rng(0)
    x = tf.constant(rng.normal(size=(2, 5, 8)), dtype)
    upstream = tf.constant(rng.normal(size=(2, 5, 16)), dtype)
    layer.build(x.shape)
    results = []
    for function in (lambda v: gelu(layer(v)), lambda v: dense_gelu(v, layer.kernel, layer.bias)):
        with tf.GradientTape() as tape:
            tape.watch(x)
            y = function(x)
        gradients = tape.gradient(y, [x, layer.kernel.value, layer.bias.value], upstream)
        assert y.dtype == x.dtype and gradients[1].dtype == gradients[2].dtype == tf.float32
        results.append([tf.cast(v, tf.float32).numpy() for v in [y, *gradients]])
    tolerance = {"float32": 1e-5, "bfloat16": 3e-2}[dtype]
    for ours, reference in zip(*results):
        np.testing.assert_allclose(ours, reference, rtol=tolerance, atol=tolerance)


@pytest.mark.parametrize("policy", ["float32", "mixed_bfloat16"])
@pytest.mark.parametrize("rate", [0.0, 0.3])
@pytest.mark.parametrize("with_bias", [False, True])
def test_residual_norm_equals_the_layers_in_values_and_gradients(policy, rate, with_bias):
    # A post-norm sub-layer's end in training: Keras's layer normalization of
    # the residual plus `dropout` with the same seed of the sub-layer's
    # output plus its bias, and the gradients of both inputs, gamma, beta and
    # the bias.
    import keras

    norm = keras.layers.LayerNormalization(
        epsilon=1e-12, gamma_initializer="glorot_uniform", beta_initializer="glorot_uniform", dtype=policy
    )
    rng = np.random.default_rng(0)
    x, y, upstream = (tf.constant(rng.normal(size=(3, 7, 16)), norm.compute_dtype) for _ in range(3))
    bias = tf.Variable(rng.normal(size=(16,)), dtype=tf.float32)
    norm.build(x.shape)
    seed = tf.constant([3, 9], tf.int32)
    results = []
    for function in (
        lambda: norm(x + dropout(y + tf.cast(bias, y.dtype) if with_bias else y, rate, seed)),
        lambda: residual_norm(x, y, norm.gamma, norm.beta, norm.epsilon, rate, seed, bias if with_bias else None),
    ):
        with tf.GradientTape() as tape:
            tape.watch([x, y])
            outputs = function()
        variables = [norm.gamma.value, norm.beta.value] + ([bias] if with_bias else [])
        gradients = tape.gradient(outputs, [x, y, *variables], upstream)
        assert outputs.dtype == x.dtype and [g.dtype for g in gradients[:2]] == [x.dtype, y.dtype]
        assert all(g.dtype == tf.float32 for g in gradients[2:])
        results.append([tf.cast(v, tf.float32).numpy() for v in [outputs, *gradients]])
    tolerance = {"float32": 1e-5, "mixed_bfloat16": 2e-2}[policy]
    for ours, layers_value in zip(*results):
        np.testing.assert_allclose(ours, layers_value, rtol=tolerance, atol=tolerance)
    dropped = results[1][2] == 0  # the gradient of `y` is zero where it was dropped
    assert dropped.mean() == pytest.approx(rate, abs=0.08)

    @tf.function
    def training_step(a, b):
        with tf.GradientTape() as tape:
            tape.watch([a, b])
            outputs = residual_norm(a, b, norm.gamma, norm.beta, norm.epsilon, rate, seed)
        return tape.gradient(outputs, [a, b], upstream)

    spec = tf.TensorSpec([None, 7, 16], x.dtype)
    assert len(xla_compiled_ops(training_step.get_concrete_function(spec, spec).graph.as_graph_def())) >= 2
