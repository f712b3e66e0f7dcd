"""`TransformerBlock`'s CPU fast path: the block's values, in fewer and faster passes.

`TransformerBlock.call` is plain Keras composition; with `layers.fast_path`
on, it calls `call` here instead, which computes the same outputs from the
same weights (tests compare values and gradients) with:

- attention in batched matmuls, one transpose per operand (`attend`),
  instead of Keras's einsums, which transpose every operand on CPU;
- in training, each post-norm sub-layer's end (its last bias, dropout,
  the residual add and layer normalization) in one compiled pass each way
  (`fused_gradients.residual_norm`), and the feed-forward's first
  projection and GELU with written-out gradients (`feed_forward_hidden`).

Inference graphs, which exports trace, call no XLA: TensorFlow Serving runs
it only behind an experimental flag.
"""

from keras import activations, ops

from layers import fused_gradients


def call(block, inputs, attention_mask, training, return_attention_scores):
    """`block(inputs, ...)` through the fast path."""
    fused_end = ends_compiled(block, training)  # `add` then adds each sub-layer's last bias
    x = block.attention_norm(inputs) if block.norm_first else inputs
    if block.attention_dropout_rate:  # Keras's explicit path drops weights
        attended = block.attention(  # (batch, length, hidden)
            x,
            x,
            attention_mask=attention_mask,
            training=training,
            return_attention_scores=return_attention_scores,
        )
        attention_bias = None
    else:
        attended = attend(block, x, attention_mask, return_attention_scores, output_bias=not fused_end)
        attention_bias = block.attention.output_dense.bias if fused_end else None
    if return_attention_scores:
        attended, scores = attended  # scores: (batch, heads, length, length)
    x = add(block, inputs, attended, block.attention_norm, training, attention_bias)  # (batch, length, hidden)

    y = block.output_norm(x) if block.norm_first else x
    y = feed_forward_hidden(block, y, training)  # (batch, length, intermediate)
    if fused_end:  # the bias is added in `add`
        y = fused_gradients.project(y, block.output_dense.kernel)
    else:
        y = block.output_dense(y)  # (batch, length, hidden)
    outputs = add(block, x, y, block.output_norm, training, block.output_dense.bias if fused_end else None)
    if return_attention_scores:
        return outputs, scores
    return outputs


def add(block, residual, y, norm, training, bias=None):
    """`residual + dropout(y)`, then `norm` after it in post-norm blocks:
    in training one compiled pass each way (`bias` added to `y` in it)."""
    if block.norm_first:
        return residual + block.dropout(y, training=training)
    if ends_compiled(block, training):
        seed = block.dropout.next_seed() if block.dropout.rate else None
        return fused_gradients.residual_norm(
            residual, y, norm.gamma, norm.beta, norm.epsilon, block.dropout.rate, seed, bias
        )
    return norm(residual + block.dropout(y, training=training))


def ends_compiled(block, training):
    """Whether `add` ends each sub-layer in one compiled function: post-norm
    training with hashed dropout masks."""
    return training is True and not block.norm_first and block.dropout.hashed


def feed_forward_hidden(block, x, training):
    """The feed-forward's first projection and activation: in training with
    a faster input gradient and, for Keras's exact GELU, the activation's
    gradient written out, compiled with the bias; otherwise the Dense layer
    and GELU in TensorFlow's kernels."""
    gelu = block.activation is activations.gelu
    if training is not True:
        x = block.intermediate(x)
        return fused_gradients.gelu(x) if gelu else block.activation(x)
    kernel, bias = block.intermediate.kernel, block.intermediate.bias
    if gelu:
        return fused_gradients.dense_gelu(x, kernel, bias)
    return block.activation(fused_gradients.dense(x, kernel, bias))


def attend(block, x, attention_mask, return_attention_scores, output_bias=True):
    """Self-attention with `block.attention`'s weights, in batched matmuls.

    Projecting once and laying heads out as (batch, heads, length,
    head_size) - keys as (batch, heads, head_size, length) - needs one
    transpose per operand (bench/LOG.md has the timings). Logits and
    softmax are float32 under mixed precision. `output_bias=False` leaves
    the output projection's bias for the caller to add.
    """
    length, hidden = ops.shape(x)[1], x.shape[2]  # length may be dynamic
    head_size = hidden // block.num_heads
    flat = ops.reshape(x, (-1, hidden))  # (batch * length, hidden)

    def affine(dense, inputs, bias=True):  # (rows, hidden) through an EinsumDense's weights
        y = ops.matmul(inputs, ops.cast(ops.reshape(dense.kernel, (hidden, hidden)), x.dtype))
        return y + ops.cast(ops.reshape(dense.bias, (hidden,)), x.dtype) if bias else y

    def project(dense, layout):
        y = ops.reshape(affine(dense, flat), (-1, length, block.num_heads, head_size))
        return ops.transpose(y, layout)

    queries = project(block.attention.query_dense, (0, 2, 1, 3)) * ops.cast(head_size**-0.5, x.dtype)
    keys = project(block.attention.key_dense, (0, 2, 3, 1))  # transposed
    values = project(block.attention.value_dense, (0, 2, 1, 3))
    logits = ops.cast(ops.matmul(queries, keys), "float32")  # (batch, heads, length, length)
    if attention_mask is not None:
        # (batch, 1, length or 1, length): -1e9 where a key is hidden.
        logits += ops.where(ops.expand_dims(attention_mask, 1), 0.0, -1e9)
    weights = ops.softmax(logits, axis=-1)
    mixed = ops.matmul(ops.cast(weights, x.dtype), values)  # (batch, heads, length, head_size)
    mixed = ops.reshape(ops.transpose(mixed, (0, 2, 1, 3)), (-1, hidden))
    attended = ops.reshape(affine(block.attention.output_dense, mixed, output_bias), (-1, length, hidden))
    if return_attention_scores:
        return attended, ops.cast(weights, x.dtype)
    return attended
