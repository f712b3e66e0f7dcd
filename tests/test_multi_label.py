"""Multi-label (`--multi-label`): any number of labels per text, each with
the probability threshold the held-out slice chose, through training, the
refit, export, predict, a sweep and the XLA-compiled `--tpu` step."""

import json
import os
import re

import numpy as np
import pytest

from conftest import TINY_MODEL, WORD_TOKENS
from pipeline.config import Config
from pipeline.dataset import hold_out, tokenize
from pipeline.labels import encode_label_lists
from pipeline.metrics import multi_label_report
from pipeline.model_dir import load_run, restore_model
from pipeline.readers import read_examples
from pipeline.train import main as train_main
from process_helper import serve_in_a_fresh_process

FILLERS = "the a room team day was and it we then".split()
# A text is labelled with the topic of every topic word it holds (at least one).
TOPICS = {"sport": ["ball", "goal"], "food": ["soup", "bread"], "music": ["song", "guitar"]}
TINY = {
    "model": TINY_MODEL,
    "data": WORD_TOKENS,
    "optimizer": {"learning_rate": 3e-3},
    "train": {"batch_size": 32, "epochs": 12, "checkpoint_every": 10, "pretrain_epochs": 0},
}


def _rows(count, seed):
    rng = np.random.default_rng(seed)
    rows = []
    for _ in range(count):
        words = list(rng.choice(FILLERS, size=rng.integers(3, 7)))
        topics = rng.choice(list(TOPICS), size=rng.integers(1, 3), replace=False)
        for topic in topics:
            words.insert(rng.integers(0, len(words) + 1), rng.choice(TOPICS[topic]))
        rows.append({"text": " ".join(words), "topics": sorted(topics)})
    return rows


def _write_jsonl(path, rows):
    with open(path, "w", encoding="utf-8") as f:
        f.writelines(json.dumps(row) + "\n" for row in rows)
    return str(path)


@pytest.fixture(scope="module")
def tagged(tmp_path_factory):
    """`(train_path, test_path, config_path)`: 640 and 200 texts with their topics, the tiny config."""
    directory = tmp_path_factory.mktemp("tagged")
    test = directory / "test.csv"  # CSV, the labels joined by ";"
    test.write_text("text,topics\n" + "".join(f"{r['text']},{';'.join(r['topics'])}\n" for r in _rows(200, 1)))
    config = directory / "tiny.json"
    config.write_text(json.dumps(TINY))
    return _write_jsonl(directory / "train.jsonl", _rows(640, 0)), str(test), str(config)


@pytest.mark.slow
def test_a_multi_label_run_learns_each_label_with_its_threshold_and_serves_the_labels_over_them(
    tmp_path, tagged, capsys
):
    from pipeline.export import latest_export

    train, test, config = tagged
    run = str(tmp_path / "run")
    argv = ["--train", train, "--eval", test, "--model-dir", run, "--config", config, "--multi-label"]
    train_main([*argv, "--label-column", "topics", "--best-metric", "macro_f1"])
    assert re.search(r"evaluation examples, 3 labels \(1\.[45]\d a training text\)", capsys.readouterr().out)
    with open(os.path.join(run, "metrics.json")) as f:
        report = json.load(f)
    # Learned, on the test texts, by the refit, with the thresholds the held-out slice chose.
    assert report["micro_f1"] > 0.95 and report["macro_f1"] > 0.95 and report["exact_match"] > 0.9, report
    assert set(report["per_label"]) == set(TOPICS) and set(report["validation"]) == {
        "micro_f1",
        "macro_f1",
        "loss",
        "examples",
    }
    config, tokenizer, names = load_run(run)
    assert names == ["food", "music", "sport"] and config.model.head_activation == "sigmoid"
    data = Config.from_dict({"data": {"task": "multi_label", "label_column": "topics"}}).data
    examples = read_examples(train, label_column="topics", label_delimiter=";")
    fit, held_out = hold_out(examples, 0.1, data_config=data)
    share = encode_label_lists(fit, names).mean(axis=0)  # each logit starts at its label's base rate
    np.testing.assert_allclose(config.model.label_log_odds, np.log(share / (1 - share)), rtol=1e-6)
    with open(os.path.join(run, "thresholds.json")) as f:
        thresholds = json.load(f)
    assert thresholds == report["thresholds"] and all(0 < t < 1 for t in thresholds.values())
    kept_model = restore_model(run, refit=False)[0]
    probabilities = np.asarray(kept_model(tokenize(tokenizer, held_out.texts)))
    chosen = multi_label_report(encode_label_lists(held_out, names), probabilities, names, metric="macro_f1")
    assert chosen["thresholds"] == pytest.approx(thresholds, abs=1e-6)  # the kept epoch's F1-best on the slice

    texts = [row["text"] for row in _rows(8, 2)]
    refit = restore_model(run)[0]
    expected = np.asarray(refit(tokenize(tokenizer, texts)))
    served = serve_in_a_fresh_process(latest_export(os.path.join(run, "export")), text=texts)
    np.testing.assert_allclose(served["probabilities"], expected, atol=1e-5)
    over = expected >= np.asarray([thresholds[name] for name in names])
    assert served["over_threshold"] == over.tolist()

    from pipeline.api import load_classifier

    results = load_classifier(run).classify(texts)
    assert [r["labels"] for r in results] == [[n for n, o in zip(names, row) if o] for row in over]
    truth = [row["topics"] for row in _rows(8, 2)]
    assert sum(r["labels"] == t for r, t in zip(results, truth)) >= 7, (results, truth)
    # Exported again from the run's directory: the same thresholds.
    from pipeline.export import main as export_main

    export_main(["--model-dir", run])
    assert capsys.readouterr().out.strip().endswith("export/2")


@pytest.mark.slow
def test_an_unknown_evaluation_label_or_a_malformed_list_names_file_and_line(tmp_path, tagged, capsys):
    train, _, config = tagged
    unknown = tmp_path / "eval.csv"
    unknown.write_text("text,topics\nthe ball,sport\na poem,poetry;music\n")
    argv = ["--train", train, "--model-dir", str(tmp_path / "run"), "--config", config, "--multi-label"]
    argv += ["--label-column", "topics", "--epochs", "1", "--validation-split", "0"]
    with pytest.raises(SystemExit, match=f"error: {unknown}:3: label 'poetry' never seen in training"):
        train_main([*argv, "--eval", str(unknown)])
    malformed = tmp_path / "malformed.csv"
    malformed.write_text("text,topics\nthe ball,sport;\n")
    with pytest.raises(SystemExit, match=f"error: {malformed}:2: malformed label list: topics='sport;'"):
        train_main([*argv, "--eval", str(malformed)])
    with pytest.raises(SystemExit):
        train_main([*argv, "--eval", str(malformed), "--task", "regression"])
    assert "error: --multi-label is --task multi_label, not regression" in capsys.readouterr().err


@pytest.mark.slow
def test_a_sweep_of_a_multi_label_task_ranks_by_micro_f1_and_exports_the_best_with_its_thresholds(tmp_path, tagged):
    from pipeline.predict import load_classifier
    from tuning.sweep import run_sweep

    train, test, _ = tagged
    base = Config.from_dict(
        {
            **TINY,
            "data": {**WORD_TOKENS, "task": "multi_label", "label_column": "topics"},
            "train": {**TINY["train"], "epochs": 2},
        }
    )
    space = {
        **{name: TINY_MODEL[name] for name in ("embedding_size", "hidden_size", "num_heads", "num_layers", "pooling")},
        **{"intermediate_multiple": 2, "dropout_rate": 0.0, "sharing": "all", "warmup_fraction": 0.0},
        **{"batch_size": 32, "vocabulary_size": 4000, "token_dropout": 0.0},
        "learning_rate": {"min": 1e-3, "max": 3e-3},
    }
    directory = str(tmp_path / "sweep")
    rows = run_sweep(base, directory, train, test, max_trials=2, space_overrides=space, export_best=True)
    assert len(rows) == 2 and all(row["score"] == row["val_micro_f1"] for row in rows)
    assert rows[0]["val_micro_f1"] >= rows[1]["val_micro_f1"]
    best = os.path.join(directory, "trials", f"trial_{rows[0]['trial']}")
    with open(os.path.join(best, "thresholds.json")) as f:
        thresholds = json.load(f)
    classifier = load_classifier(os.path.join(directory, "export"))
    assert classifier.multi_label and classifier.label_names == ["food", "music", "sport"]
    served = classifier._model.thresholds.numpy()
    np.testing.assert_allclose(served, [thresholds[name] for name in classifier.label_names], rtol=1e-6)
