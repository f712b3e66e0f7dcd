"""Pairs of texts (`--text-pair-column`): `[CLS] a [SEP] b [SEP]` with a
segment embedding, through reading, pre-training, training, the refit,
export, predict and attention maps."""

import json
import os

import numpy as np
import pytest

from conftest import TINY_MODEL, WORD_TOKENS, write_csv
from pipeline.dataset import tokenize
from pipeline.model_dir import load_run, restore_model
from pipeline.pretrain import main as pretrain_main
from pipeline.readers import DataError, read_examples
from pipeline.tokenizer import CLS_ID, SEP_ID, Tokenizer
from pipeline.train import main as train_main
from process_helper import serve_in_a_fresh_process

FILLERS = "the a room team day was and it we then".split()
COLORS = ["red", "blue", "green", "gold"]
TINY = {
    "model": TINY_MODEL,
    "data": WORD_TOKENS,
    "optimizer": {"learning_rate": 3e-3},
    "train": {"batch_size": 32, "epochs": 6, "checkpoint_every": 10, "pretrain_epochs": 1},
    "pretrain": {"batch_size": 32, "max_predictions": 4, "min_steps": 0},
}


def _rows(count, seed):
    # Each text holds one colour, never the same; the label is the second text's: the same words either way
    # round, so only which segment a colour is in tells the label.
    rng = np.random.default_rng(seed)
    rows = []
    for _ in range(count):
        texts = []
        for color in rng.choice(COLORS, size=2, replace=False):
            words = list(rng.choice(FILLERS, size=rng.integers(2, 5)))
            words.insert(rng.integers(0, len(words) + 1), color)
            texts.append(" ".join(words))
        rows.append((*texts, texts[1].split()[[w in COLORS for w in texts[1].split()].index(True)]))
    return rows


def _write(path, rows, header=("premise", "hypothesis", "label")):
    return write_csv(path, rows, header)


@pytest.fixture(scope="module")
def paired(tmp_path_factory):
    directory = tmp_path_factory.mktemp("paired")
    config = directory / "tiny.json"
    config.write_text(json.dumps(TINY))
    return _write(directory / "train.csv", _rows(640, 0)), _write(directory / "test.csv", _rows(200, 1)), str(config)


def test_a_pair_is_packed_cls_a_sep_b_sep_and_the_longer_text_is_cut_first():
    tokenizer = Tokenizer.learn(["a b c d e f g h", "x y"], kind="word", min_count=1, max_length=10)
    ids = {token: index for index, token in enumerate(tokenizer.vocabulary)}
    packed = tokenize(tokenizer, [("a b c d e f g h", "x y"), ("a", "x y")])
    # 8 + 2 tokens and 3 markers in 10: the longer loses 3, the shorter keeps both.
    assert packed[0].tolist() == [CLS_ID, *[ids[w] for w in "a b c d e".split()], SEP_ID, ids["x"], ids["y"], SEP_ID]
    assert packed[1].tolist() == [CLS_ID, ids["a"], SEP_ID, ids["x"], ids["y"], SEP_ID, 0, 0, 0, 0]
    # The length a run derives counts the pair as packed, beside texts alone.
    assert tokenizer.fitting_length([("a", "x y")], multiple=2) == 6
    assert tokenizer.fitting_length([("a", "x y"), "a b c d e f g"], quantile=0, multiple=1) == 6


def test_a_missing_or_empty_second_text_names_file_line_and_column(tmp_path):
    missing = _write(tmp_path / "missing.csv", [("a", "b")], header=("premise", "label"))
    with pytest.raises(DataError, match=r"missing.csv:1: no column 'hypothesis' in header \['premise', 'label'\]"):
        read_examples(missing, ("premise", "hypothesis"))
    empty = _write(tmp_path / "empty.csv", [("a", "b", "x"), ("c", " ", "x")])
    with pytest.raises(DataError, match=r"empty.csv:3: missing or empty text: hypothesis=' '"):
        read_examples(empty, ("premise", "hypothesis"))
    assert read_examples(empty, ("premise", "hypothesis"), skip_bad_rows=True).texts == [("a", "b")]
    with pytest.raises(DataError, match="plain text has no pairs of texts"):
        read_examples(_write(tmp_path / "t.txt", []), ("premise", "hypothesis"), label_column=None)


@pytest.mark.slow
def test_pipeline_pretrain_reads_each_pair_of_its_columns_as_one_sequence(tmp_path, capsys):
    rows = _write(tmp_path / "rows.csv", _rows(64, 3))
    (tmp_path / "tiny.json").write_text(json.dumps({**TINY, "pretrain": {"batch_size": 16}}))
    columns = ["--text-column", "premise", "--text-pair-column", "hypothesis"]
    pretrain_main(
        [
            "--text",
            rows,
            "--model-dir",
            str(tmp_path / "run"),
            "--config",
            str(tmp_path / "tiny.json"),
            *columns,
            "--steps",
            "2",
        ]
    )
    assert "64 texts in 64 sequences of up to 16 tokens" in capsys.readouterr().out
    with open(tmp_path / "run" / "config.json") as f:
        saved = json.load(f)
    assert saved["data"]["text_pair_column"] == "hypothesis" and saved["model"]["segments"] == 2


@pytest.mark.slow
def test_a_pair_task_pretrains_learns_which_text_says_what_and_serves_pairs(tmp_path, paired, capsys):
    from pipeline.export import latest_export
    from pipeline.predict import main as predict_main
    from pipeline.visualize import attention_maps

    train, test, config = paired
    run = str(tmp_path / "run")
    argv = ["--train", train, "--eval", test, "--model-dir", run, "--config", config]
    train_main([*argv, "--text-column", "premise", "--text-pair-column", "hypothesis"])
    capsys.readouterr()
    with open(os.path.join(run, "metrics.json")) as f:
        report = json.load(f)
    # Both texts hold a colour: the segments tell which one is the label.
    assert report["accuracy"] > 0.95, report
    saved, tokenizer, names = load_run(run)
    assert saved.model.segments == 2 and saved.data.text_pair_column == "hypothesis"
    with open(os.path.join(run, "pretrain", "config.json")) as f:
        assert json.load(f)["model"]["segments"] == 2  # the segment embedding is pre-trained too

    rows = _rows(6, 2)
    pairs = [(a, b) for a, b, _ in rows]
    expected = np.asarray(restore_model(run)[0](tokenize(tokenizer, pairs)))
    texts, text_pairs = map(list, zip(*pairs))
    served = serve_in_a_fresh_process(latest_export(os.path.join(run, "export")), text=texts, text_pair=text_pairs)
    np.testing.assert_allclose(served["probabilities"], expected, atol=1e-5)

    lines = tmp_path / "pairs.tsv"
    lines.write_text("".join(f"{a}\t{b}\n" for a, b in pairs))
    predict_main(["--model", run, str(lines), "--format", "tsv"])
    out = capsys.readouterr().out.splitlines()
    assert out[0] == "\t".join(["label", *names, "text", "text_pair"])
    assert [line.split("\t")[0] for line in out[1:]] == [label for *_, label in rows]
    predict_main(["--model", run, "--text", pairs[0][0], "--text-pair", pairs[0][1]])
    assert json.loads(capsys.readouterr().out)["label"] == rows[0][2]
    lines.write_text("no tab here\n")
    with pytest.raises(SystemExit, match=r"pairs.tsv:1: this model takes pairs of texts, tab-separated"):
        predict_main(["--model", run, str(lines)])

    maps = attention_maps(run, [f"{pairs[0][0]}\t{pairs[0][1]}"])
    tokens = maps[0]["tokens"]
    assert tokens[0] == "[CLS]" and tokens.count("[SEP]") == 2 and tokens[-1] == "[SEP]"
    assert " ".join(tokens[1 : tokens.index("[SEP]")]) == pairs[0][0]
