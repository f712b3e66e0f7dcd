import numpy as np
import pytest

from layer_test_helper import run_layer_test
from layers import SharedEncoder

KWARGS = {"num_layers": 3, "num_heads": 2, "intermediate_size": 16}


def _inputs():
    rng = np.random.default_rng(2)
    hidden = rng.normal(size=(2, 6, 8)).astype("float32")
    mask = np.array([[1, 1, 1, 1, 0, 0], [1, 1, 0, 0, 0, 0]], bool)
    return hidden, mask


def test_layer_contract():
    hidden, mask = _inputs()
    run_layer_test(SharedEncoder, KWARGS, {"inputs": hidden, "mask": mask}, (2, 3, 6, 8))


def test_layer_contract_grouped_pre_norm():
    hidden, mask = _inputs()
    kwargs = dict(KWARGS, num_layers=4, num_groups=2, norm_first=True)
    run_layer_test(SharedEncoder, kwargs, {"inputs": hidden, "mask": mask}, (2, 4, 6, 8))


def _weight_count(**kwargs):
    encoder = SharedEncoder(num_heads=2, intermediate_size=16, **kwargs)
    encoder.build((None, 6, 8))
    return len(encoder.trainable_weights), encoder.count_params()


def test_sharing_weight_count_does_not_grow_with_depth():
    assert _weight_count(num_layers=1) == _weight_count(num_layers=12)
    one_block = _weight_count(num_layers=12)[1]
    assert _weight_count(num_layers=12, num_groups=3)[1] == 3 * one_block
    assert _weight_count(num_layers=12, num_groups=12)[1] == 12 * one_block


def test_group_mapping_follows_albert():
    encoder = SharedEncoder(num_layers=6, num_groups=2, num_heads=2, intermediate_size=16)
    encoder.build((None, 6, 8))
    blocks = [encoder.blocks.index(encoder.block_for_layer(i)) for i in range(6)]
    assert blocks == [0, 0, 0, 1, 1, 1]


def test_invalid_groups_are_rejected():
    with pytest.raises(ValueError, match="num_groups"):
        SharedEncoder(num_layers=2, num_groups=3, num_heads=2, intermediate_size=16)


def test_outputs_ignore_padding_content():
    hidden, mask = _inputs()
    encoder = SharedEncoder(**KWARGS)
    reference = np.asarray(encoder(hidden, mask=mask))
    noisy = hidden.copy()
    noisy[~mask] = 1e3 * np.random.default_rng(3).normal(size=noisy[~mask].shape)
    perturbed = np.asarray(encoder(noisy, mask=mask))
    np.testing.assert_allclose(
        perturbed[:, :, :4][mask[:, None, :4].repeat(3, 1)],
        reference[:, :, :4][mask[:, None, :4].repeat(3, 1)],
        atol=1e-5,
    )


def test_attention_maps_of_every_layer_and_head():
    hidden, mask = _inputs()
    encoder = SharedEncoder(**KWARGS)
    outputs, scores = encoder(hidden, mask=mask, return_attention_scores=True)
    scores = np.asarray(scores)
    assert scores.shape == (2, 3, 2, 6, 6)  # (batch, layers, heads, query, key)
    np.testing.assert_allclose(scores.sum(-1), 1.0, atol=1e-5)
    # Padding keys get no attention.
    assert np.all(scores[0, ..., 4:] == 0) and np.all(scores[1, ..., 2:] == 0)
    np.testing.assert_allclose(outputs, encoder(hidden, mask=mask), atol=1e-6)
