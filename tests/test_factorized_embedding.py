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


def test_unit_scale_layer_contract():
    kwargs = {"vocabulary_size": 10, "embedding_size": 4, "hidden_size": 6, "unit_scale": True}
    run_layer_test(FactorizedEmbedding, kwargs, {"inputs": _ids()}, (2, 5, 6))


def test_unit_scale_multiplies_rows_by_sqrt_e_and_keeps_words_as_loud_as_the_timing_signal():
    import keras

    from layers import get_timing_signal_1d

    keras.utils.set_random_seed(0)
    ids = np.arange(1, 129, dtype="int32").reshape(2, 64)
    scaled = FactorizedEmbedding(200, 128, 256, unit_scale=True)
    outputs = np.asarray(scaled(ids))
    table = np.asarray(scaled.token_embedding.embeddings)
    kernel, bias = np.asarray(scaled.projection.kernel), np.asarray(scaled.projection.bias)
    np.testing.assert_allclose(outputs, table[ids] * np.sqrt(128) @ kernel + bias, atol=1e-5)
    # The timing signal's root mean square is 1/sqrt(2); the words' is of the
    # same order with unit_scale, and a few hundred times smaller without.
    signal = np.sqrt(np.mean(np.square(get_timing_signal_1d(64, 256))))
    words = np.sqrt(np.mean(np.square(outputs)))
    assert 0.5 < words / signal < 1.5, (words, signal)
    plain = np.sqrt(np.mean(np.square(FactorizedEmbedding(200, 128, 256)(ids))))
    assert plain / signal < 0.01, (plain, signal)
