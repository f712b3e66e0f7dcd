"""A run whose data, model directory and export live in a bucket.

TensorFlow's in-memory `ram://` file system stands in for `gs://`: both are
reached only through `tf.io.gfile`, so a built-in `open` or `os.path` call
left anywhere on the way fails here as it would on Cloud TPU. The file
system lives in this process, so the kill is an exception raised right
after a checkpoint is written, and the resumed run is started in-process.
"""

import numpy as np
import pytest
import tensorflow as tf

from conftest import TINY_MODEL, WORD_TOKENS
from pipeline.config import Config
from pipeline.demo_corpus import write_demo_corpus
from pipeline.layout import (
    BEST_WEIGHTS,
    CONFIG_FILE,
    LABELS_FILE,
    METRICS_FILE,
    PRETRAIN_DIR,
    PRETRAIN_METRICS_FILE,
    REFIT_DIR,
    VOCABULARY_FILE,
)
from pipeline.predict import load_classifier
from pipeline.train import train_and_evaluate
from tuning.sweep import run_sweep

CONFIG = {
    "model": {**TINY_MODEL, "dropout_rate": 0.1},
    "data": WORD_TOKENS,
    "optimizer": {"learning_rate": 3e-3},
    "train": {"batch_size": 32, "epochs": 2, "checkpoint_every": 3, "pretrain_epochs": 1},
    "pretrain": {"min_steps": 0},
}
TEXTS = ["our team beat their team", "the food was good but the room was awful", ""]


class Killed(BaseException):
    """The run stopped as a kill would stop it: nothing after the checkpoint."""


@pytest.mark.slow
def test_a_run_in_a_bucket_resumes_exports_and_serves_as_a_local_run(tmp_path, monkeypatch, capsys):
    bucket = f"ram://{tmp_path.name}"
    config = Config.from_dict(CONFIG)
    train, test = write_demo_corpus(f"{bucket}/corpus", train_size=640, test_size=200)
    local = train_and_evaluate(
        config, str(tmp_path / "run"), *write_demo_corpus(tmp_path / "corpus", train_size=640, test_size=200)
    )

    real_save = tf.train.CheckpointManager.save

    def save_then_die(manager, checkpoint_number=None, **kwargs):
        path = real_save(manager, checkpoint_number=checkpoint_number, **kwargs)
        if checkpoint_number == 6 and "/pretrain/" not in manager.directory:  # in the fine-tuning
            raise Killed(path)
        return path

    monkeypatch.setattr(tf.train.CheckpointManager, "save", save_then_die)
    run = f"{bucket}/run"
    with pytest.raises(Killed):
        train_and_evaluate(config, run, train.replace("train.csv", "tr*.csv"), test)  # a glob in the bucket
    assert tf.io.gfile.exists(f"{run}/checkpoints/ckpt-6.index")
    assert not tf.io.gfile.exists(f"{run}/metrics.json")
    monkeypatch.undo()
    capsys.readouterr()

    resumed = train_and_evaluate(config, run, train.replace("train.csv", "tr*.csv"), test)
    assert "Resuming from the checkpoint at step 6 of" in capsys.readouterr().out
    for key in ("accuracy", "macro_f1", "loss"):
        assert resumed[key] == pytest.approx(local[key], abs=1e-6), key
    for name in (
        CONFIG_FILE,
        VOCABULARY_FILE,
        LABELS_FILE,
        METRICS_FILE,
        BEST_WEIGHTS,
        f"{REFIT_DIR}/{BEST_WEIGHTS}",
        "logs/train",
        f"{PRETRAIN_DIR}/{PRETRAIN_METRICS_FILE}",
    ):
        assert tf.io.gfile.exists(f"{run}/{name}"), name

    in_bucket = load_classifier(f"{run}/export")(TEXTS)  # its latest version, found by listing the bucket
    on_disk = load_classifier(str(tmp_path / "run" / "export"))(TEXTS)
    np.testing.assert_allclose(in_bucket, on_disk, atol=1e-5)


@pytest.mark.slow
def test_a_sweep_in_a_bucket_writes_its_trials_results_and_export(tmp_path):
    bucket = f"ram://{tmp_path.name}"
    config = Config.from_dict({**CONFIG, "train": {**CONFIG["train"], "epochs": 1, "pretrain_epochs": 0}})
    space = {
        "embedding_size": 16,
        "hidden_size": 32,
        "num_heads": 2,
        "num_layers": 1,
        "intermediate_multiple": 2,
        "batch_size": 32,
    }
    rows = run_sweep(
        config,
        f"{bucket}/sweep",
        *write_demo_corpus(f"{bucket}/corpus", train_size=320, test_size=100),
        max_trials=2,
        space_overrides=space,
        export_best=True,
    )
    assert [row["status"] for row in rows] == ["COMPLETED"] * 2
    for name in ("results.json", "results.csv", "trials/trial_0/best.weights.h5", "trials/trial_1/config.json"):
        assert tf.io.gfile.exists(f"{bucket}/sweep/{name}"), name
    assert len(load_classifier(f"{bucket}/sweep/export").classify(TEXTS)) == len(TEXTS)
