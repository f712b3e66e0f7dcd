import dataclasses

import keras
import numpy as np
import pytest
import tensorflow as tf

from layers import FactorizedEmbedding, SharedEncoder
from pipeline.config import ModelConfig
from pipeline.model import build_model, model_internals

SMALL = ModelConfig(
    vocabulary_size=24,
    num_classes=2,
    max_length=12,
    embedding_size=16,
    hidden_size=32,
    num_layers=2,
    num_heads=2,
    intermediate_size=64,
    dropout_rate=0.0,
)


def _encoder_and_embedding_params(vocab, embedding, hidden, layers, groups, heads, ffn):
    ids = keras.Input((16,), dtype="int32")
    embedding_layer = FactorizedEmbedding(vocab, embedding, hidden, use_bias=embedding != hidden)
    encoder = SharedEncoder(num_layers=layers, num_groups=groups, num_heads=heads, intermediate_size=ffn)
    encoder(embedding_layer(ids))
    return embedding_layer.count_params() + encoder.count_params()


def test_parameter_count_at_albert_base():
    vocab, embedding, hidden, ffn = 30000, 128, 768, 3072
    block = 4 * (hidden * hidden + hidden) + hidden * ffn + ffn + ffn * hidden + hidden + 2 * 2 * hidden
    albert = _encoder_and_embedding_params(vocab, embedding, hidden, 12, 1, 12, ffn)
    assert albert == vocab * embedding + embedding * hidden + hidden + block
    assert 11e6 <= albert <= 12e6
    # Unfactorized (E = H, the table is the embedding) and unshared: BERT-base size.
    bert = _encoder_and_embedding_params(vocab, hidden, hidden, 12, 12, 12, ffn)
    assert bert == vocab * hidden + hidden * hidden + 12 * block
    assert 107e6 <= bert - hidden * hidden <= 109e6


def test_model_maps_int32_ids_to_probabilities():
    model = build_model(SMALL)
    assert model.input.dtype == "int32" and tuple(model.input.shape) == (None, None)
    ids = np.random.default_rng(0).integers(1, 24, size=(3, 12)).astype("int32")
    probabilities = np.asarray(model(ids))
    assert probabilities.shape == (3, 2)
    np.testing.assert_allclose(probabilities.sum(-1), 1.0, atol=1e-6)


def test_output_ignores_padding_and_other_rows():
    model = build_model(SMALL)
    row = np.array([[2, 5, 7, 9, 0, 0, 0, 0, 0, 0, 0, 0]], "int32")
    others = np.random.default_rng(1).integers(1, 24, size=(5, 12)).astype("int32")
    alone = np.asarray(model(row))
    batched = np.asarray(model(np.concatenate([others[:2], row, others[2:]])))
    np.testing.assert_allclose(batched[2:3], alone, atol=1e-6)


@pytest.mark.parametrize("pooling", ["flatten", "mean", "first"])
def test_batches_cut_to_their_longest_text_give_the_same_outputs_and_gradients(pooling):
    # Training cuts the common padding of a batch (TrainConfig.length_bucket):
    # the probabilities and every gradient must equal the full-length ones.
    model = build_model(dataclasses.replace(SMALL, pooling=pooling, num_classes=3))
    ids = np.zeros((3, 12), "int32")
    ids[0, :4], ids[1, :7], ids[2, :2] = [2, 5, 7, 9], [3, 4, 5, 6, 7, 8, 9], [2, 11]
    results = []
    for batch in (ids, ids[:, :8]):
        with tf.GradientTape() as tape:
            probabilities = model(batch)
            loss = -tf.reduce_sum(tf.math.log(probabilities[:, 1]))
        results.append([probabilities] + tape.gradient(loss, model.trainable_variables))
    for full, cut in zip(*results):
        np.testing.assert_allclose(tf.convert_to_tensor(cut), tf.convert_to_tensor(full), rtol=1e-5, atol=1e-6)


def test_internals_share_the_models_weights():
    model = build_model(dataclasses.replace(SMALL, num_classes=3))
    ids = np.array([[2, 5, 7, 0, 0, 0, 0, 0, 0, 0, 0, 0]], "int32")
    internals = model_internals(model, ids)
    np.testing.assert_allclose(internals["probabilities"], model(ids), atol=1e-6)
    assert internals["attention"].shape == (1, 2, 2, 12, 12)
    assert internals["layer_outputs"].shape == (1, 2, 12, 32)


def _order_task(count, seed):
    """Label 1 when token 21 comes before token 22; both always occur."""
    rng = np.random.default_rng(seed)
    ids = rng.integers(3, 21, size=(count, 12)).astype("int32")
    ids[:, 0] = 2  # [CLS]
    for row in ids:
        first, second = rng.choice(np.arange(1, 12), size=2, replace=False)
        row[first], row[second] = 21, 22
    labels = (np.argmax(ids == 21, axis=1) < np.argmax(ids == 22, axis=1)).astype("int32")
    return ids, labels


def _bag_of_words():
    ids = keras.Input((12,), dtype="int32")
    x = keras.layers.Embedding(24, 32)(ids)
    x = keras.layers.GlobalAveragePooling1D()(x)
    x = keras.layers.Dense(32, activation="relu")(x)
    return keras.Model(ids, keras.layers.Dense(2, activation="softmax")(x))


@pytest.mark.slow
def test_learns_word_order_where_bag_of_words_cannot():
    keras.utils.set_random_seed(0)
    train_ids, train_labels = _order_task(4000, seed=0)
    test_ids, test_labels = _order_task(1000, seed=1)
    scores = {}
    for name, model in [("attention", build_model(SMALL)), ("bag_of_words", _bag_of_words())]:
        model.compile(
            optimizer=keras.optimizers.Adam(3e-3),
            loss="sparse_categorical_crossentropy",
            metrics=["accuracy"],
        )
        model.fit(train_ids, train_labels, batch_size=64, epochs=8, verbose=0)
        scores[name] = model.evaluate(test_ids, test_labels, verbose=0)[1]
    assert scores["attention"] >= 0.95, scores
    assert abs(scores["bag_of_words"] - 0.5) < 0.06, scores
