import numpy as np

from layer_test_helper import run_layer_test
from layers import FactorizedEmbedding, MaskedLMHead


def _inputs():
    rng = np.random.default_rng(5)
    return {
        "inputs": rng.normal(size=(2, 6, 8)).astype("float32"),
        "masked_positions": np.array([[1, 4, 0], [5, 2, 3]], "int32"),
    }


def test_layer_contract():
    run_layer_test(MaskedLMHead, {"vocabulary_size": 20}, _inputs(), (2, 3, 20))


def test_reverse_embedding_is_the_transposed_factorization():
    embedding = FactorizedEmbedding(20, 4, 8)
    embedding(np.ones((1, 3), "int32"))
    hidden = np.random.default_rng(6).normal(size=(2, 3, 8)).astype("float32")
    table, kernel = np.asarray(embedding.token_embedding.embeddings), np.asarray(embedding.projection.kernel)
    np.testing.assert_allclose(embedding(hidden, reverse=True), hidden @ kernel.T @ table.T, atol=1e-5)


def test_tied_head_uses_the_embedding_weights():
    embedding = FactorizedEmbedding(20, 4, 8)
    embedding(np.ones((1, 3), "int32"))
    head = MaskedLMHead(20, token_embedding=embedding)
    inputs = _inputs()
    probabilities = np.asarray(head(**inputs))
    assert head.output_projection is None
    own = {id(w) for w in head.trainable_weights} - {id(w) for w in embedding.trainable_weights}
    assert len(own) == 5  # transform kernel and bias, norm gamma and beta, output bias
    gathered = np.take_along_axis(inputs["inputs"], inputs["masked_positions"][:, :, None], axis=1)
    transformed = np.asarray(head.norm(head.transform(gathered)))
    logits = np.asarray(embedding(transformed, reverse=True)) + np.asarray(head.bias)
    expected = np.exp(logits - logits.max(-1, keepdims=True))
    np.testing.assert_allclose(probabilities, expected / expected.sum(-1, keepdims=True), atol=1e-5)
