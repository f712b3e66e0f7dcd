"""The masked-LM input made by tf.data service workers (`--data-service`): a
dispatcher in this process and two workers in processes of their own,
started as users start them (`python -m pipeline.data_service`), so that
nothing but the input pipeline's graph reaches them."""

import collections
import json
import math
import os
import subprocess
import sys

import pytest

from conftest import TINY_MODEL, WORD_TOKENS
from pipeline.config import DataConfig, PretrainConfig
from pipeline.data_service import dispatcher
from pipeline.layout import CONFIG_FILE, PRETRAIN_METRICS_FILE
from pipeline.masking import masked_lm_dataset
from pipeline.pretrain import main as pretrain_main
from pipeline.readers import DataError
from pipeline.text_stream import Sequences, TextSource, raising_data_errors
from pipeline.tokenizer import CLS_ID, PAD_ID, Tokenizer

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CONFIG = {
    "model": {**TINY_MODEL, "max_length": 8},
    "data": {**WORD_TOKENS, "sample_size": 50},  # less than the corpus: a stream
    "train": {"checkpoint_every": 4, "steps_per_execution": 2},
    "pretrain": {"batch_size": 16, "max_predictions": 2},
}


@pytest.fixture(scope="module")
def service():
    server = dispatcher()
    address = server.target.removeprefix("grpc://")
    workers = [
        subprocess.Popen(
            [sys.executable, "-m", "pipeline.data_service", "--dispatcher", address, "--host", "localhost"],
            cwd=ROOT,
            stdout=subprocess.PIPE,
            text=True,
            env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2"),
        )
        for _ in range(2)
    ]
    try:
        for worker in workers:
            assert worker.stdout.readline() == f"tf.data service worker of {address} serving\n"
        yield server.target
    finally:
        for worker in workers:
            worker.kill()
            worker.wait()


def _corpus(directory, files=4, lines=40):
    texts = []
    for index in range(files):
        part = [f"f{index} d{n} w{n % 5}" for n in range(lines)]
        (directory / f"part-{index}.txt").write_text("\n".join(part) + "\n")
        texts += part
    return str(directory / "part-*.txt"), texts


def test_the_workers_make_masked_steps_of_every_line_of_the_files(tmp_path, service):
    files, texts = _corpus(tmp_path)
    tokenizer = Tokenizer.learn(texts, kind="word", min_count=1, max_length=8)
    # A small shuffle buffer: in one of 50 sequences a line can wait longer than a pass of the corpus.
    sequences = Sequences(TextSource(files, DataConfig(**WORD_TOKENS)), tokenizer, cached=False, shuffle_buffer=4)
    # Chosen tokens stay as they were, so that every row is a line of the corpus.
    unchanged = PretrainConfig(mask_token_rate=0.0, random_token_rate=0.0, max_predictions=2)
    steps = masked_lm_dataset(sequences, len(tokenizer.vocabulary), 8, 16, unchanged, seed=1, data_service=service)
    seen = collections.Counter()
    for features, targets, weights in steps.take(60):  # up to six passes of 160 lines
        for ids, positions, target, weight in zip(
            features["token_ids"].numpy(), features["masked_positions"].numpy(), targets.numpy(), weights.numpy()
        ):
            assert ids[0] == CLS_ID and (ids[positions] == target)[weight > 0].all() and weight.sum() == 1
            seen[" ".join(tokenizer.vocabulary[i] for i in ids[1:] if i != PAD_ID)] += 1
        if len(seen) == len(texts):
            break
    # Every line, and none more often than the passes begun: the workers share each pass, one file each at a time,
    # so one worker may be a pass ahead of the other.
    assert set(seen) == set(texts)
    assert max(seen.values()) <= math.ceil(sum(seen.values()) / len(texts)) + 1

    (tmp_path / "part-1.txt").write_bytes(b"f d w\nf \xff w\n")  # a worker meets it
    with pytest.raises(DataError, match=rf"^{tmp_path}/part-1.txt:2: bytes that are not UTF-8"):
        raising_data_errors(list, steps.take(30))


@pytest.mark.slow
def test_a_pretraining_on_the_service_runs_resumes_without_it_and_refuses_rows_read_in_python(
    tmp_path, service, capsys, monkeypatch
):
    monkeypatch.setattr("pipeline.pretrain.EVALUATION_DOCUMENTS", 64)  # a stream has no end to stop at
    files, _ = _corpus(tmp_path)
    config = tmp_path / "tiny.json"
    config.write_text(json.dumps(CONFIG))
    run = str(tmp_path / "run")
    argv = ["--text", files, "--model-dir", run, "--config", str(config), "--steps", "6"]
    pretrain_main([*argv, "--data-service", service])
    assert "masked-token accuracy" in capsys.readouterr().out
    with open(os.path.join(run, PRETRAIN_METRICS_FILE)) as f:
        assert json.load(f)["predictions"] > 0
    with open(os.path.join(run, CONFIG_FILE)) as f:
        assert json.load(f)["pretrain"]["data_service"] == service
    pretrain_main(argv)  # the same run, its input made here: done, not "other settings"
    assert f"The pre-training in {run} is done." in capsys.readouterr().out

    rows = tmp_path / "rows.csv"
    rows.write_text("text,label\na b,x\n")
    with pytest.raises(SystemExit, match=rf"{rows}: --data-service reads plain text files alone"):
        pretrain_main(["--text", str(rows), "--model-dir", str(tmp_path / "csv"), "--data-service", service])
