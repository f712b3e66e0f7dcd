import numpy as np
from layer_test_helper import run_layer_test

from layers import FactorizedEmbedding


def _ids():
    return np.array([[5, 3, 9, 0, 0], [1, 2, 0, 0, 0]], "int32")


def test_layer_contract():
    kwargs = {"vocabulary_size": 10, "embedding_size": 4, "hidden_size": 6}
    run_layer_test(FactorizedEmbedding, kwargs, {"inputs": _ids()}, (2, 5, 6))


def test_parameter_count_is_factorized():
    # The article's example: 1000 x 16 + 16 x 512 instead of 1000 x 512.
    layer = FactorizedEmbedding(1000, 16, 512, use_bias=False)
    layer.build((None, 10))
    assert layer.count_params() == 1000 * 16 + 16 * 512
    with_bias = FactorizedEmbedding(1000, 16, 512)
    with_bias.build((None, 10))
    assert with_bias.count_params() == 1000 * 16 + 16 * 512 + 512


def test_padding_mask_and_lookup_then_projection():
    layer = FactorizedEmbedding(10, 4, 6)
    ids = _ids()
    outputs = np.asarray(layer(ids))
    table = np.asarray(layer.token_embedding.embeddings)
    kernel = np.asarray(layer.projection.kernel)
    bias = np.asarray(layer.projection.bias)
    np.testing.assert_allclose(outputs, table[ids] @ kernel + bias, atol=1e-6)
    np.testing.assert_array_equal(layer.compute_mask(ids), ids != 0)
