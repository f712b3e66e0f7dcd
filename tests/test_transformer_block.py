import numpy as np
from layer_test_helper import run_layer_test

from layers import TransformerBlock


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
