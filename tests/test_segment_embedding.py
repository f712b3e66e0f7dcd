import numpy as np

from layer_test_helper import run_layer_test
from layers import SegmentEmbedding

# [CLS] a a [SEP] b [SEP] padding, and one text alone: [CLS] a a padding.
IDS = np.array([[2, 7, 8, 3, 9, 3, 0], [2, 7, 8, 0, 0, 0, 0]], "int32")


def test_layer_contract():
    run_layer_test(SegmentEmbedding, {"segments": 2, "hidden_size": 6, "separator_id": 3}, {"inputs": IDS}, (2, 7, 6))


def test_each_token_gets_the_vector_of_the_segment_its_separators_put_it_in():
    layer = SegmentEmbedding(2, 4, separator_id=3)
    outputs = np.asarray(layer(IDS))
    assert np.asarray(layer.segment_ids(IDS)).tolist() == [[0, 0, 0, 0, 1, 1, 1], [0] * 7]
    np.testing.assert_array_equal(outputs, np.asarray(layer.embeddings)[np.asarray(layer.segment_ids(IDS))])
    # A third separator (a longer pre-training sequence) stays in the last segment.
    assert np.asarray(layer.segment_ids(np.array([[2, 3, 5, 3, 6, 3, 7]]))).tolist() == [[0, 0, 1, 1, 1, 1, 1]]
