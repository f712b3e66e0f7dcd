"""GELU and layer normalization with their gradients written out by hand.

TensorFlow differentiates these functions op by op: the gradient of
`tf.nn.gelu` and of Keras's layer normalization is a chain of a dozen
elementwise and reduction kernels, each one a pass over the activations.
On CPUs those passes, not the matmuls, are what a small Transformer block
spends its spare time on. The closed-form derivatives below need a few
passes. Values equal Keras's to float rounding (tests pin that).
Measured fwd+bwd on 2 CPU cores (bench/throughput.py runs the whole model):
layer norm of (32, 128, 256) 5.6 -> 3.8 ms, exact GELU of (4096, 1024)
17.8 -> ~12 ms.

GELU's gradient goes further: it is one XLA-compiled function, which fuses
its seven elementwise passes into one and recomputes `Phi(x)` instead of
holding it (fwd+bwd of (4096, 1024): float32 8.0 -> 4.1 ms, bfloat16 10.8 ->
6.8 ms), and it computes in float32 whatever the inputs' dtype. In
training, `gelu_compiled` compiles the forward pass as well. Measured on the
README's second (Zen 5) machine at (4096, 1024): bfloat16 gradient 6.1 ->
2.3 ms; forward float32 2.9 -> 0.9 ms, bfloat16 4.2 -> 1.5 ms. Inference
graphs - the serving signatures of an export - use `gelu`, whose forward
pass calls no XLA, which TensorFlow Serving runs only behind an
experimental flag (the SavedModel keeps the gradient for whoever
differentiates the loaded model). The matmuls stay on oneDNN, which XLA's
CPU backend is slower than; layer normalization (fwd+bwd of (4096, 256):
bfloat16 1.6 -> 2.3 ms, float32 1.6 -> 1.9 ms), softmax and bias gradients
were slower under XLA than in TensorFlow's kernels.

`dense` is the feed-forward's first projection in training, written so that
its input gradient runs on oneDNN's fast path (see there); `dense_gelu` is
that projection and GELU, its bias added in GELU's compiled pass; `project`
is the second projection, without its bias. All three take their kernel's
gradient in the form oneDNN runs faster for its shape (`_kernel_gradient`).
`residual_norm` is a post-norm sub-layer's end in training - the sub-layer's
last bias, dropout, residual add, layer normalization - compiled into one
pass each way, which on the whole model outweighs XLA's slower reductions
(see there). Adding the biases in compiled passes that run anyway, not in
the matmuls, made bfloat16 training 9% faster on an Intel Xeon with AMX,
where oneDNN's bias add fused into a bfloat16 matmul costs more than a pass
of its own (bench/README.md).
"""

import math

import tensorflow as tf

from layers.dropout import drop_threshold, keep_scale

_SQRT_HALF = 1.0 / math.sqrt(2.0)
_INV_SQRT_2PI = 1.0 / math.sqrt(2.0 * math.pi)


@tf.custom_gradient
def gelu(x):
    """Exact GELU, `x * Phi(x)`; its derivative is `Phi(x) + x * phi(x)`."""
    return x * _normal_cdf(x), lambda upstream: _gelu_gradient(x, upstream)


def gelu_compiled(x, bias=None):
    """`gelu(x + bias)` with its forward pass compiled too, for training graphs only.

    One fused pass instead of five (erf, three multiplies, an add), in
    float32 whatever `x`'s dtype: forward of (4096, 1024) 2.9 -> 0.9 ms in
    float32, 4.2 -> 1.5 ms in bfloat16. `bias` (optional, `(x.shape[-1],)`,
    cast to `x`'s dtype as a layer casts its bias) is added in the same
    pass, in float32; its gradient is `x`'s summed over rows (`BiasAddGrad`,
    as for `tf.nn.bias_add`). Values equal `gelu`'s to float rounding;
    serving graphs keep `gelu`, which calls no XLA.
    """
    if bias is None:
        return _compiled_gelu(x)
    return _compiled_biased_gelu(x, tf.cast(bias, x.dtype))


@tf.custom_gradient
def _compiled_gelu(x):
    return _gelu_forward(x), lambda upstream: _gelu_gradient(x, upstream)


@tf.custom_gradient
def _compiled_biased_gelu(x, bias):
    def grad(upstream):
        d_x = _gelu_gradient(x, upstream, bias)
        return d_x, tf.raw_ops.BiasAddGrad(out_backprop=d_x)

    return _gelu_forward(x, bias), grad


def _normal_cdf(x):
    return 0.5 * (1.0 + tf.math.erf(x * _SQRT_HALF))


@tf.function(jit_compile=True, reduce_retracing=True)  # XLA compiles per shape
def _gelu_forward(x, bias=None):
    x32 = _plus(x, bias)
    return tf.cast(x32 * _normal_cdf(x32), x.dtype)


@tf.function(jit_compile=True, reduce_retracing=True)
def _gelu_gradient(x, upstream, bias=None):
    # In float32: XLA's CPU code for bfloat16 elementwise math is slow, and
    # the casts fuse into the one pass (bfloat16 (4096, 1024): 6.1 -> 2.3 ms).
    x32 = _plus(x, bias)
    pdf = tf.exp(-0.5 * tf.square(x32)) * _INV_SQRT_2PI
    gradient = tf.cast(upstream, tf.float32) * (_normal_cdf(x32) + x32 * pdf)
    return tf.cast(gradient, upstream.dtype)


def _plus(x, bias):
    """`x + bias` in float32 (`bias` None: `x`), inside a compiled pass."""
    x = tf.cast(x, tf.float32)
    return x if bias is None else x + tf.cast(bias, tf.float32)


def dense_gelu(x, kernel, bias):
    """`gelu(dense(x, kernel, bias))`, the bias added in `gelu_compiled`'s pass.

    The feed-forward's first projection and activation in training. oneDNN
    fuses a bias add into a bfloat16 matmul at a high price on CPUs with
    AMX (Intel Xeon, (4096, 256) by (256, 1024): 1.5 ms for the matmul
    alone, 3.0 with the bias), where GELU's compiled forward pass adds it
    for nothing. Values equal `dense` then `gelu`'s to float rounding (the
    sum is rounded to `x`'s dtype once fewer).
    """
    return _projected(x, kernel, lambda outputs: gelu_compiled(outputs, bias))


def dense(x, kernel, bias):
    """`x @ kernel + bias` over the last axis, as 2-D ops, for training graphs.

    Two differences from `keras.layers.Dense`, same values: the bias add is
    `tf.nn.bias_add`, which oneDNN fuses into the matmul; and the input
    gradient multiplies by a transposed copy of the kernel, not by the
    kernel with `transpose_b`. For the feed-forward's (H, 4H) kernel that
    product is (rows, 4H) @ (4H, H), and oneDNN's float32 `transpose_b`
    kernel runs it at about 70% of its speed on a plain operand ((4096,
    1024) @ (1024, 256): 6.8 against 5.3 ms on the README's Zen 5 machine).
    Grappler folds an explicit `tf.transpose` back into the matmul's
    `transpose_b`, so the copy is made by a compiled function, which it
    cannot see into (one (H, 4H) transpose per step and layer). Alternated
    in one process with the Dense layer, bench/throughput.py's config, 8
    rounds: float32 14,294 -> 14,721 tokens/s (medians; faster in all 8);
    mixed_bfloat16, where the two kernels run alike, inside the noise.
    """
    return _projected(x, kernel, lambda outputs: tf.nn.bias_add(outputs, tf.cast(bias, x.dtype)))


def project(x, kernel):
    """`x @ kernel` over the last axis, as 2-D ops, for training graphs.

    The feed-forward's second projection, whose bias `residual_norm` adds;
    differentiated as `dense` is, where its kernel's gradient gains (see
    `_kernel_gradient`).
    """
    return _projected(x, kernel, lambda outputs: outputs)


def _projected(x, kernel, then):
    """`then(x @ kernel)` over the last axis of `x`, as 2-D ops (`_matmul`)."""
    rows = tf.reshape(x, [-1, kernel.shape[0]])
    outputs = then(_matmul(rows, tf.cast(kernel, x.dtype)))
    return tf.reshape(outputs, tf.concat([tf.shape(x)[:-1], [kernel.shape[1]]], axis=0))


@tf.custom_gradient
def _matmul(x, kernel):
    def grad(upstream):
        return tf.matmul(upstream, _transposed(kernel)), _kernel_gradient(x, upstream)

    return tf.matmul(x, kernel), grad


def _kernel_gradient(x, upstream):
    """`x^T @ upstream`, computed as the transpose of `upstream^T @ x` when
    `x` is the wider: oneDNN's float32 product with a transposed first
    operand runs slowly when the result has more rows than columns. For the
    feed-forward's second kernel, (4096, 1024)^T @ (4096, 256), 9.0 against
    6.7 ms (transpose of the (256, 1024) result included) on an Intel Xeon,
    where the (256, 1024) result of the first kernel's gradient takes 6.2
    ms as `x^T @ upstream` and 7.6 the other way; bfloat16 runs both alike.
    """
    if x.shape[-1] > upstream.shape[-1]:
        return _transposed(tf.matmul(upstream, x, transpose_a=True))
    return tf.matmul(x, upstream, transpose_a=True)


@tf.function(jit_compile=True, reduce_retracing=True)
def _transposed(matrix):
    return tf.transpose(matrix)


def layer_norm(x, gamma, beta, epsilon):
    """Normalizes the last axis of `x` in float32, returns `x`'s dtype."""

    @tf.custom_gradient
    def normalize(x, gamma, beta):
        normalized, inverse_std = _normalized(x, epsilon)

        def grad(upstream):
            d_x = _normalized_input_gradient(upstream * gamma, normalized, inverse_std)
            return (d_x, *_scale_and_offset_gradients(upstream, normalized))

        return normalized * gamma + beta, grad

    outputs = normalize(tf.cast(x, "float32"), tf.cast(gamma, "float32"), tf.cast(beta, "float32"))
    return tf.cast(outputs, x.dtype)


def _normalized(x, epsilon):
    """`(x - mean) / std` over the last axis, and `1 / std`."""
    mean, variance = tf.nn.moments(x, axes=[-1], keepdims=True)
    inverse_std = tf.math.rsqrt(variance + epsilon)
    return (x - mean) * inverse_std, inverse_std


def _normalized_input_gradient(d_normalized, normalized, inverse_std):
    """The gradient of `_normalized`'s input, from that of its output."""
    return inverse_std * (
        d_normalized
        - tf.reduce_mean(d_normalized, axis=-1, keepdims=True)
        - normalized * tf.reduce_mean(d_normalized * normalized, axis=-1, keepdims=True)
    )


def _scale_and_offset_gradients(upstream, normalized):
    """The gradients of gamma and beta in `normalized * gamma + beta`.

    Sums over all axes but the last, as `BiasAddGrad`, which runs them
    faster than `reduce_sum` in float32 (the dtype here): (4096, 256) 0.23
    against 0.40 ms on an Intel Xeon, (4096, 1024) 1.1 against 3.3.
    """
    if len(normalized.shape) < 2:
        return upstream * normalized, upstream
    return (tf.raw_ops.BiasAddGrad(out_backprop=upstream * normalized), tf.raw_ops.BiasAddGrad(out_backprop=upstream))


def residual_norm(x, y, gamma, beta, epsilon, rate=0.0, seed=None, bias=None):
    """`layer_norm(x + dropout(y + bias, rate, seed), ...)`, for training graphs.

    A post-norm sub-layer's end - dropout, residual add, normalization - as
    one compiled pass forward and one backward, computing in float32 and
    returning `x`'s dtype; the dropout mask is hashed in both passes (see
    `layers.dropout`), the same mask `dropout` draws for that seed. As
    separate layers they take four passes and four casts forward under
    mixed precision. The gamma and beta gradients, plain reductions, stay
    in TensorFlow's kernels, which run them faster than XLA's. Measured
    forward and backward at (32, 128, 256) on the README's Zen 5 machine:
    bfloat16 4.1-4.2 -> 3.4-3.5 ms, float32 3.6-3.8 -> 3.3 ms. Values equal
    the layers' to float rounding.

    `bias`, the sub-layer's last bias, is added in the same pass (its
    gradient is `y`'s summed over rows, `BiasAddGrad`), instead of by the
    matmul before it: oneDNN's bias add fused into a bfloat16 matmul costs
    about as much as the pass it saves on CPUs with AMX, and Keras's Dense
    adds the bias of a 3-D input in a pass of its own.

    Args:
        x: the residual, `(..., hidden)`.
        y: the sub-layer's output, same shape and dtype.
        gamma, beta: `(hidden,)` scale and offset of the normalization.
        epsilon: float, added to the variance.
        rate: float, dropout rate on `y` (0: no dropout).
        seed: int32 `(2,)` dropout seed; unused at rate 0.
        bias: optional `(hidden,)` bias added to `y` first, cast to `y`'s
            dtype as a layer casts its bias.
    """
    threshold = drop_threshold(rate)
    seed = tf.zeros([2], tf.int32) if seed is None else tf.convert_to_tensor(seed, tf.int32)
    biases = [] if bias is None else [tf.cast(bias, y.dtype)]

    @tf.custom_gradient
    def fused(x, y, gamma, beta, *biases):
        outputs, normalized, inverse_std = _residual_norm_forward(x, y, gamma, beta, seed, epsilon, threshold, *biases)

        def grad(upstream):
            d_x, d_y = _residual_norm_backward(upstream, normalized, inverse_std, gamma, seed, threshold, y.dtype)
            d_bias = [tf.raw_ops.BiasAddGrad(out_backprop=d_y)] if biases else []
            return (d_x, d_y, *_scale_and_offset_gradients(tf.cast(upstream, tf.float32), normalized), *d_bias)

        return outputs, grad

    return fused(x, y, tf.cast(gamma, tf.float32), tf.cast(beta, tf.float32), *biases)


@tf.function(jit_compile=True, reduce_retracing=True)
def _residual_norm_forward(x, y, gamma, beta, seed, epsilon, threshold, bias=None):
    y = _plus(y, bias)
    if threshold:
        y *= keep_scale(y, seed, threshold)
    normalized, inverse_std = _normalized(tf.cast(x, tf.float32) + y, epsilon)
    return tf.cast(normalized * gamma + beta, x.dtype), normalized, inverse_std


@tf.function(jit_compile=True, reduce_retracing=True)
def _residual_norm_backward(upstream, normalized, inverse_std, gamma, seed, threshold, y_dtype):
    d_summed = _normalized_input_gradient(tf.cast(upstream, tf.float32) * gamma, normalized, inverse_std)
    d_y = d_summed * keep_scale(d_summed, seed, threshold) if threshold else d_summed
    return tf.cast(d_summed, upstream.dtype), tf.cast(d_y, y_dtype)
