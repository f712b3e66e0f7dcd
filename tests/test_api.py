import json

import numpy as np
import pytest

from conftest import TINY_MODEL, WORD_TOKENS
from pipeline.api import load_classifier, train
from pipeline.readers import read_examples

CONFIG = {
    "model": TINY_MODEL,
    "data": WORD_TOKENS,
    "optimizer": {"learning_rate": 3e-3},
    "train": {
        "batch_size": 32,
        "epochs": 2,
        "pretrain_epochs": 0,
        "validation_split": 0.0,
        "refit": False,
    },
}


@pytest.mark.slow
def test_train_then_load_classifier_scores_the_evaluation_files_as_the_run_did(tmp_path, corpus):
    config_file = tmp_path / "config.json"
    config_file.write_text(json.dumps(CONFIG))
    report = train(str(tmp_path / "run"), *corpus, config=str(config_file))
    assert json.loads((tmp_path / "run" / "metrics.json").read_text())["accuracy"] == report["accuracy"]
    assert report["accuracy"] > 0.6  # chance is about 1/2: it learned the word-order task

    classifier = load_classifier(str(tmp_path / "run"))  # the run's directory: its latest export
    assert classifier.path == str(tmp_path / "run" / "export" / "1")
    examples = read_examples(corpus[1])
    probabilities = classifier(examples.texts)
    assert probabilities.shape == (len(examples.texts), len(classifier.label_names))
    np.testing.assert_allclose(probabilities.sum(-1), 1.0, atol=1e-5)
    results = classifier.classify(examples.texts)
    predicted = [result["label"] for result in results]
    assert predicted == [classifier.label_names[i] for i in probabilities.argmax(-1)]
    assert np.mean([p == label for p, label in zip(predicted, examples.labels)]) == pytest.approx(report["accuracy"])
    assert classifier.classify([]) == []

    # A dict of fields, the same run: found done, the same report.
    assert train(str(tmp_path / "run"), *corpus, config=CONFIG)["accuracy"] == report["accuracy"]


def test_load_classifier_of_a_path_without_an_export_names_it(tmp_path):
    with pytest.raises(ValueError, match=f"{tmp_path}: neither a SavedModel nor a folder of numbered versions"):
        load_classifier(str(tmp_path))


def test_unlabelled_files_are_the_pretrainings_and_need_one(tmp_path, corpus):
    with pytest.raises(
        ValueError, match=r"pretrain.unlabelled \(--unlabelled\) a.txt,b.txt: .* train.pretrain_epochs is 0"
    ):
        train(str(tmp_path / "run"), *corpus, config=CONFIG, unlabelled_files=["a.txt", "b.txt"])
    assert not (tmp_path / "run").exists()  # refused before any work
