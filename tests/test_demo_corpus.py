import collections
import csv

import keras
import numpy as np

from pipeline.demo_corpus import LABELS, generate, write_demo_corpus


def test_deterministic_and_balanced(tmp_path):
    assert generate(200, seed=3) == generate(200, seed=3)
    assert generate(200, seed=3) != generate(200, seed=4)
    counts = collections.Counter(label for _, label in generate(4000, seed=0))
    assert set(counts) == set(LABELS) and abs(counts["positive"] - 2000) < 150
    train, test = write_demo_corpus(tmp_path, train_size=20, test_size=5)
    assert open(train).read().splitlines()[0] == "text,label"
    assert len(open(test).read().splitlines()) == 6


def _bags(rows, vocabulary):
    counts = np.zeros((len(rows), len(vocabulary)), "float32")
    for row, (text, _) in enumerate(rows):
        for word in text.split():
            counts[row, vocabulary[word]] += 1
    labels = np.array([LABELS.index(label) for _, label in rows], "int32")
    return counts, labels


def test_bag_of_words_stays_near_chance():
    train, test = generate(4000, seed=0), generate(1000, seed=1)
    words = sorted({w for text, _ in train + test for w in text.split()})
    vocabulary = {w: i for i, w in enumerate(words)}
    (x_train, y_train), (x_test, y_test) = _bags(train, vocabulary), _bags(test, vocabulary)
    keras.utils.set_random_seed(0)
    model = keras.Sequential(
        [
            keras.Input((len(words),)),
            keras.layers.Dense(64, activation="relu"),
            keras.layers.Dense(2, activation="softmax"),
        ]
    )
    model.compile(optimizer="adam", loss="sparse_categorical_crossentropy", metrics=["accuracy"])
    model.fit(x_train, y_train, epochs=10, batch_size=64, verbose=0)
    train_accuracy = model.evaluate(x_train, y_train, verbose=0)[1]
    test_accuracy = model.evaluate(x_test, y_test, verbose=0)[1]
    assert train_accuracy > 0.6  # it does fit the training set ...
    assert abs(test_accuracy - 0.5) < 0.05, test_accuracy  # ... and learns nothing that transfers


def test_the_test_split_holds_no_training_sentence_and_the_training_split_is_the_first_drawn(tmp_path):
    train, test = write_demo_corpus(tmp_path, train_size=4000, test_size=1000)
    train_rows, test_rows = ([tuple(row) for row in csv.reader(open(path))][1:] for path in (train, test))
    drawn = generate(5000, seed=0)
    assert train_rows == drawn[:4000]
    training_texts = {text for text, _ in train_rows}
    assert len(test_rows) == 1000 and not training_texts & {text for text, _ in test_rows}
    # The draw does repeat sentences: the first 5,000 put about one in seven of the last 1,000 in the first 4,000.
    assert 100 < sum(text in training_texts for text, _ in drawn[4000:]) < 200
