import numpy as np

from graph_helper import xla_compiled_ops
from layer_test_helper import run_layer_test
from layers import TransformerBlock, fast_block


def _inputs():
    return np.random.default_rng(1).normal(size=(2, 5, 8)).astype("float32")


def test_layer_contract_post_norm():
    kwargs = {"num_heads": 2, "intermediate_size": 16}
    run_layer_test(TransformerBlock, kwargs, {"inputs": _inputs()}, (2, 5, 8))


def test_layer_contract_pre_norm():
    kwargs = {"num_heads": 2, "intermediate_size": 16, "norm_first": True}
    run_layer_test(TransformerBlock, kwargs, {"inputs": _inputs()}, (2, 5, 8))


def test_attention_is_bidirectional_and_sums_to_one():
    block = TransformerBlock(num_heads=2, intermediate_size=16)
    _, scores = block(_inputs(), return_attention_scores=True)
    scores = np.asarray(scores)  # (batch, heads, query, key)
    assert scores.shape == (2, 2, 5, 5)
    np.testing.assert_allclose(scores.sum(-1), 1.0, atol=1e-5)
    # No causal mask: the first query attends to the last key.
    assert (scores[:, :, 0, -1] > 0).all()


def test_attention_equals_keras_multi_head_attention():
    # The block computes attention itself with the weights of its Keras
    # MultiHeadAttention sublayer; outputs, weights and gradients must match
    # that layer's own computation, with and without padding.
    import tensorflow as tf

    block = TransformerBlock(num_heads=2, intermediate_size=16)
    x = tf.constant(_inputs())
    block(x)
    keys = np.array([[True] * 5, [True, True, True, False, False]])
    for key_mask in (None, keys[:, None, :], np.broadcast_to(keys[:, None, :], (2, 5, 5))):
        full_mask = None if key_mask is None else np.broadcast_to(key_mask, (2, 5, 5))
        results = []
        for attend in (
            lambda: fast_block.attend(block, x, key_mask, return_attention_scores=True),
            lambda: block.attention(x, x, attention_mask=full_mask, return_attention_scores=True),
        ):
            with tf.GradientTape() as tape:
                tape.watch(x)
                output, scores = attend()
                loss = tf.reduce_sum(tf.sin(output))
            gradients = tape.gradient(loss, [x] + block.attention.trainable_variables)
            results.append([output, scores] + gradients)
        for ours, keras_value in zip(*results):
            np.testing.assert_allclose(ours, keras_value, rtol=1e-5, atol=1e-6)


def test_feed_forward_runs_compiled_in_training_only():
    # Training graphs get the compiled GELU; inference graphs (what an
    # export traces) call no XLA, and both compute the same function.
    import tensorflow as tf

    block = TransformerBlock(num_heads=2, intermediate_size=16)
    x = tf.constant(_inputs())
    graphs, outputs = {}, {}
    for training in (True, False):
        function = tf.function(lambda v, training=training: block(v, training=training))
        outputs[training] = function(x).numpy()  # no dropout: the same values
        graphs[training] = function.get_concrete_function(x).graph.as_graph_def()
    assert xla_compiled_ops(graphs[True])
    assert xla_compiled_ops(graphs[False]) == []
    np.testing.assert_allclose(outputs[True], outputs[False], rtol=1e-5, atol=1e-6)


def test_training_with_dropout_equals_the_layers_with_the_same_seeds():
    # Post-norm training ends each sub-layer in one compiled function
    # (bias, dropout, residual add, layer norm); it must draw the masks the
    # Dropout layer would, from the same seeds, and give the same values
    # and gradients.
    import tensorflow as tf

    block = TransformerBlock(num_heads=2, intermediate_size=16, dropout_rate=0.2, initializer_range=0.5)
    x = tf.constant(_inputs())
    block(x)
    start = block.dropout.seed_generator.state.numpy()
    results = []
    for layers_only in (False, True):
        block.dropout.seed_generator.state.assign(start)
        if layers_only:
            # The fused path hands `_add` the sub-layer's last bias to add.
            block._add = lambda residual, y, norm, training, bias=None: norm(
                residual + block.dropout(y if bias is None else y + bias, training=training)
            )
        with tf.GradientTape() as tape:
            tape.watch(x)
            outputs = block(x, training=True)
            loss = tf.reduce_sum(tf.sin(outputs))
        results.append([outputs, *tape.gradient(loss, [x] + block.trainable_variables)])
    for fused, layers_value in zip(*results):
        np.testing.assert_allclose(fused, layers_value, rtol=1e-5, atol=1e-5)
    inference = block(x, training=False).numpy()
    assert np.abs(results[0][0].numpy() - inference).max() > 0.1  # dropout was on
