"""Pre-training on a corpus larger than the vocabulary's sample: a stream.

Documents of lines (a blank line ends each) in shards on TensorFlow's
in-memory `ram://` file system, which stands in for `gs://`; the kill is an
exception raised right after a checkpoint is written, as in
test_bucket_paths.py.
"""

import json
import random

import numpy as np
import pytest
import tensorflow as tf

from conftest import TINY_MODEL, WORD_TOKENS
from pipeline.config import Config
from pipeline.layout import CONFIG_FILE, PRETRAIN_METRICS_FILE
from pipeline.pretrain import main as pretrain_main
from pipeline.pretrain import pretrain

CONFIG = {
    "model": {**TINY_MODEL, "max_length": 16},
    "data": {**WORD_TOKENS, "sample_size": 60},
    "train": {"checkpoint_every": 4, "steps_per_execution": 2},
    "pretrain": {"batch_size": 16, "max_predictions": 3, "documents": "blank_line", "steps": 8},
}


class Killed(BaseException):
    """The run stopped as a kill would stop it: nothing after the checkpoint."""


def _write_shards(directory, shards=4, documents=15):
    tf.io.gfile.makedirs(directory)
    rng = random.Random(0)
    words = [f"w{index}" for index in range(40)]
    for shard in range(shards):
        lines = []
        for _ in range(documents):
            lines += [" ".join(rng.choices(words, k=rng.randint(2, 9))) for _ in range(rng.randint(1, 6))] + [""]
        with tf.io.gfile.GFile(f"{directory}/part-{shard}.txt", "w") as f:
            f.write("\n".join(lines))
    return f"{directory}/part-*.txt"


@pytest.mark.slow
def test_a_stream_on_two_replicas_killed_and_resumed_ends_as_an_uninterrupted_run_on_one_device(
    tmp_path, monkeypatch, capsys, two_replicas
):
    monkeypatch.setattr("pipeline.pretrain.EVALUATION_DOCUMENTS", 64)  # a stream has no end to stop at
    bucket = f"ram://{tmp_path.name}"
    files = _write_shards(f"{bucket}/corpus")
    config = Config.from_dict(CONFIG)
    whole = pretrain(config, f"{bucket}/whole", files)
    start = capsys.readouterr().out
    assert "4 files streamed (vocabulary from a sample of 60 texts) of up to 16 tokens" in start
    assert "(documents of lines)" in start and 0 < whole["padding_share"] < 0.5
    assert list(whole["loss_by_epoch"]) == [1]  # the 8 steps are one epoch
    assert tf.train.latest_checkpoint(f"{bucket}/whole/checkpoints").endswith("ckpt-8")

    real_save = tf.train.CheckpointManager.save

    def save_then_die(manager, checkpoint_number=None, **kwargs):
        path = real_save(manager, checkpoint_number=checkpoint_number, **kwargs)
        if checkpoint_number == 4:
            raise Killed(path)
        return path

    monkeypatch.setattr(tf.train.CheckpointManager, "save", save_then_die)
    with pytest.raises(Killed):
        pretrain(config, f"{bucket}/killed", files, strategy=two_replicas)
    monkeypatch.setattr(tf.train.CheckpointManager, "save", real_save)
    capsys.readouterr()
    resumed = pretrain(config, f"{bucket}/killed", files, strategy=two_replicas)
    assert "Resuming from the checkpoint at step 4 of 8." in capsys.readouterr().out
    # The stream read again up to step 4 and masked as before, each step split between the
    # replicas: the steps of one device, and its model.
    assert (resumed["masked_accuracy"], resumed["predictions"]) == (whole["masked_accuracy"], whole["predictions"])
    ends = [tf.train.load_checkpoint(f"{bucket}/{run}/checkpoints") for run in ("whole", "killed")]  # step 8
    weights = [name for name in ends[0].get_variable_to_shape_map() if name.startswith("model/")]
    assert len(weights) > 10
    for name in weights:
        np.testing.assert_allclose(ends[1].get_tensor(name), ends[0].get_tensor(name), rtol=1e-4, atol=1e-6)


@pytest.mark.slow
def test_without_steps_a_stream_is_counted_once_and_runs_its_epochs(tmp_path, monkeypatch, capsys):
    # Its epochs, or more where pretrain.min_steps needs them: 2 epochs and a step are 3 epochs.
    monkeypatch.setattr("pipeline.pretrain.EVALUATION_DOCUMENTS", 64)
    files = _write_shards(str(tmp_path / "corpus"))
    per_epoch = _packed_sequences(files, capacity=15) // 16
    pretraining = {**CONFIG["pretrain"], "steps": 0, "min_steps": 2 * per_epoch + 1}
    (tmp_path / "config.json").write_text(json.dumps({**CONFIG, "pretrain": pretraining}))
    arguments = ["--text", files, "--model-dir", str(tmp_path / "run"), "--config", str(tmp_path / "config.json")]
    pretrain_main([*arguments, "--epochs", "2", "--documents", "blank_line", "--sample-size", "50"])
    out = capsys.readouterr().out
    assert "Counting the sequences of one pass for 2 epochs" in out
    assert f"{per_epoch} steps an epoch, 3 epochs, raised from 2 to reach pretrain.min_steps" in out
    saved = Config.load(str(tmp_path / "run" / CONFIG_FILE))
    assert (saved.data.sample_size, saved.pretrain.documents, saved.train.epochs) == (50, "blank_line", 2)
    with open(tmp_path / "run" / PRETRAIN_METRICS_FILE) as f:
        assert list(json.load(f)["loss_by_epoch"]) == ["1", "2", "3"]
    assert tf.train.latest_checkpoint(str(tmp_path / "run" / "checkpoints")).endswith(f"ckpt-{3 * per_epoch}")


def _packed_sequences(files, capacity):
    # By hand: a document's tokens (one a word here) fill sequences one after another.
    count = 0
    for path in tf.io.gfile.glob(files):
        with tf.io.gfile.GFile(path) as f:
            for document in f.read().split("\n\n"):
                count += -(-len(document.split()) // capacity)
    return count
