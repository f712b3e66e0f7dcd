"""Regression (`--task regression`): a number per text, predicted as a score,
through training, the held-out slice, the refit, members, export, predict
and a sweep."""

import json
import os

import numpy as np
import pytest

from conftest import TINY_MODEL, WORD_TOKENS, write_csv
from pipeline.config import Config
from pipeline.dataset import hold_out, tokenize
from pipeline.model_dir import load_run, restore_model
from pipeline.readers import DataError, read_examples
from pipeline.train import main as train_main
from process_helper import serve_in_a_fresh_process

FILLERS = "the a room food team day was and it we".split()
# Each word's share of a text's score; the score is 50 + 5 x their sum: far from 0 and not unit-sized, so
# the head must learn it standardized.
WEIGHTS = {"good": 1, "great": 2, "bad": -1, "awful": -2}
TINY = {
    "model": TINY_MODEL,
    "data": WORD_TOKENS,
    "optimizer": {"learning_rate": 3e-3},
    "train": {"batch_size": 32, "epochs": 6, "checkpoint_every": 10, "pretrain_epochs": 0},
}
# A sweep's trials as small as TINY's model.
SMALL_SPACE = {
    **{name: TINY_MODEL[name] for name in ("embedding_size", "hidden_size", "num_heads", "num_layers", "pooling")},
    **{"intermediate_multiple": 2, "dropout_rate": 0.0, "sharing": "all", "warmup_fraction": 0.0, "batch_size": 32},
    **{"vocabulary_size": 4000, "token_dropout": 0.0, "learning_rate": {"min": 1e-3, "max": 3e-3}},
}


def _texts_and_scores(count, seed):
    rng = np.random.default_rng(seed)
    rows = []
    for _ in range(count):
        words = list(rng.choice(FILLERS, size=rng.integers(3, 8)))
        for _ in range(rng.integers(0, 4)):
            words.insert(rng.integers(0, len(words) + 1), rng.choice(list(WEIGHTS)))
        rows.append((" ".join(words), 50 + 5 * sum(WEIGHTS.get(word, 0) for word in words)))
    return rows


def _write(path, rows):
    return write_csv(path, rows, ("text", "score"))


@pytest.fixture(scope="module")
def scored(tmp_path_factory):
    """`(train_path, test_path, config_path)`: 640 and 200 scored texts, the tiny config."""
    directory = tmp_path_factory.mktemp("scored")
    config = directory / "tiny.json"
    config.write_text(json.dumps(TINY))
    return (
        _write(directory / "train.csv", _texts_and_scores(640, 0)),
        _write(directory / "test.csv", _texts_and_scores(200, 1)),
        str(config),
    )


@pytest.mark.slow
def test_a_regression_learns_scores_keeps_its_epoch_on_them_refits_and_serves_them(tmp_path, scored, capsys):
    from pipeline.export import latest_export

    train, test, config = scored
    run = str(tmp_path / "run")
    argv = ["--train", train, "--eval", test, "--model-dir", run, "--config", config, "--task", "regression"]
    argv += ["--label-column", "score", "--best-metric", "spearman", "--members", "2"]
    train_main(argv)
    out = capsys.readouterr().out
    assert "a score (score: training mean" in out
    with open(os.path.join(run, "metrics.json")) as f:
        report = json.load(f)
    # Learned: the scores follow the weighted words, on the test texts, from the ensemble of the refits.
    assert report["pearson"] > 0.9 and report["spearman"] > 0.9 and report["rmse"] < 3.5, report
    assert set(report["validation"]) == {"rmse", "pearson", "spearman", "loss", "examples"}
    assert [member["seed"] for member in report["members"]] == [42, 43]
    config, tokenizer, names = load_run(run)
    assert names == ["score"] and config.model.head_activation == "linear" and config.model.num_classes == 1
    targets = np.asarray([float(label) for label in read_examples(train, label_column="score").labels])
    kept, held_out = hold_out(read_examples(train, label_column="score"), 0.1, data_config=config.data)
    fit_scores = np.asarray([float(label) for label in kept.labels])
    # The head's scale is of the scores it trained on, the held-out slice left out.
    assert config.model.target_mean == pytest.approx(fit_scores.mean(), rel=1e-6)
    assert config.model.target_scale == pytest.approx(fit_scores.std(), rel=1e-6)
    # The slice keeps every decile of the scores: its mean is near the whole's.
    assert len(held_out) == report["validation"]["examples"] and 50 <= len(held_out) <= 70
    assert abs(np.mean([float(label) for label in held_out.labels]) - targets.mean()) < targets.std() / 3
    with open(os.path.join(run, "best_epoch.json")) as f:  # kept on the held-out Spearman correlation
        assert json.load(f)["score"] == pytest.approx(report["members"][0]["validation"]["spearman"], abs=1e-6)

    texts = [row[0] for row in _texts_and_scores(8, 2)]
    served = serve_in_a_fresh_process(latest_export(os.path.join(run, "export")), text=texts)
    assert list(served) == ["score"]
    models = [restore_model(directory)[0] for directory in (run, os.path.join(run, "members", "2"))]
    mean = np.mean([np.asarray(model(tokenize(tokenizer, texts)))[:, 0] for model in models], axis=0)
    np.testing.assert_allclose(served["score"], mean, atol=1e-5)

    from pipeline.predict import main as predict_main

    source = tmp_path / "texts.txt"
    source.write_text("\n".join(texts[:2]) + "\n")
    predict_main(["--model", run, str(source), "--format", "tsv"])
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == "score\ttext" and [line.split("\t")[1] for line in lines[1:]] == texts[:2]
    np.testing.assert_allclose([float(line.split("\t")[0]) for line in lines[1:]], mean[:2], atol=1e-4)


@pytest.mark.slow
def test_a_label_that_is_no_number_is_an_error_naming_file_and_line_or_is_skipped_and_counted(tmp_path, scored, capsys):
    train, test, config = scored
    bad = _write(tmp_path / "bad.csv", _texts_and_scores(60, 3)[:40] + [("the room was good", "4,5")])
    argv = ["--train", bad, "--eval", test, "--model-dir", str(tmp_path / "run"), "--config", config]
    argv += ["--task", "regression", "--label-column", "score", "--epochs", "1"]
    with pytest.raises(SystemExit, match=f"error: {bad}:42: label '4,5' is not a number \\(data.task regression\\)"):
        train_main(argv)
    train_main([*argv, "--skip-bad-rows", "--validation-split", "0"])
    assert "skipped 1 train row(s): label not a number" in capsys.readouterr().out
    with pytest.raises(DataError, match="label 'x' is not a number"):
        from pipeline.labels import encode_scores

        examples = read_examples(_write(tmp_path / "x.csv", [("a", "1.5"), ("b", "x")]), label_column="score")
        encode_scores(examples)


@pytest.mark.slow
def test_a_sweep_of_a_regression_scores_its_trials_by_rmse(tmp_path, scored):
    from tuning.sweep import run_sweep

    train, test, _ = scored
    data = {**WORD_TOKENS, "task": "regression", "label_column": "score"}
    base = Config.from_dict({**TINY, "data": data, "train": {**TINY["train"], "epochs": 2}})
    # One trial: the ranking of several is the classifier's and the multi-label sweep's to show.
    rows = run_sweep(base, str(tmp_path / "sweep"), train, test, max_trials=1, space_overrides=SMALL_SPACE)
    assert len(rows) == 1 and rows[0]["score"] == rows[0]["val_rmse"] < 10  # the scores' deviation: about 10
    assert {"val_pearson", "val_spearman", "val_loss"} <= set(rows[0]) and "val_accuracy" not in rows[0]
    with pytest.raises(ValueError, match="--objective val_accuracy is not a score of data.task regression"):
        run_sweep(base, str(tmp_path / "other"), train, test, objective="val_accuracy")
