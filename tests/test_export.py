import json
import os
import shutil
import subprocess
import sys

import numpy as np
import pytest
import tensorflow as tf

from conftest import NAMES, TINY_MODEL, WORD_TOKENS
from graph_helper import xla_compiled_ops
from pipeline.export import latest_export, next_version

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
STRANGE = [
    "",
    "   \t ",
    "x" * 100_000,
    "control\x00\x07\x1b chars",
    "emoji 😀🎉👍🏽",
    "مرحبا بالعالم",
    "עברית",
    "我爱北京天安门没有空格",
    "Mixed 北京 and English!",
    "the cat sat on the mat",
]


def _run(code, *args):
    result = subprocess.run(
        [sys.executable, "-c", code, *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=180,
        env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2"),
    )
    assert result.returncode == 0, result.stderr[-3000:]
    return result.stdout


LOAD_AND_SERVE = """
import json, sys
import tensorflow as tf
import tensorflow_text
loaded = tf.saved_model.load(sys.argv[1])
texts = json.loads(sys.argv[2])
out = loaded.signatures["serving_default"](text=tf.constant(texts))
att = loaded.signatures["attention"](text=tf.constant(texts[:2]))
invalid = loaded.signatures["serving_default"](text=tf.constant([b"\\xff\\xfe bad", b"ok \\xc3"]))
print(json.dumps({"probabilities": out["probabilities"].numpy().tolist(),
                  "invalid_utf8": invalid["probabilities"].numpy().tolist(),
                  "label": [l.decode() for l in out["label"].numpy()],
                  "label_id": out["label_id"].numpy().tolist(),
                  "attention_shape": list(att["attention"].shape),
                  "tokens": [t.decode() for t in att["tokens"].numpy()[1]]}))
"""


def test_fresh_process_matches_the_keras_model(exported):
    model, tokenizer, _, path = exported
    served = json.loads(_run(LOAD_AND_SERVE, path, json.dumps(STRANGE)))
    expected = np.asarray(model(tokenizer(tf.constant(STRANGE))))
    probabilities = np.asarray(served["probabilities"], "float32")
    assert np.abs(probabilities - expected).max() <= 1e-5
    # Any string gives valid probabilities.
    assert np.isfinite(probabilities).all()
    np.testing.assert_allclose(probabilities.sum(-1), 1.0, atol=1e-5)
    assert served["label"] == [NAMES[i] for i in np.argmax(expected, -1)]
    assert served["label_id"] == np.argmax(expected, -1).tolist()
    assert served["attention_shape"] == [2, 2, 2, 24, 24]  # (batch, layers, heads, L, L)
    assert served["tokens"][:1] == ["[CLS]"] and set(served["tokens"][1:]) == {"[PAD]"}
    # Bytes that are not UTF-8 too.
    invalid = np.asarray(served["invalid_utf8"])
    assert invalid.shape == (2, 3) and np.isfinite(invalid).all() and np.allclose(invalid.sum(-1), 1.0, atol=1e-5)


def test_an_export_cutting_chinese_into_words_serves_them_in_a_fresh_process(tmp_path):
    from pipeline.config import ModelConfig
    from pipeline.export import export_saved_model
    from pipeline.model import build_model
    from pipeline.tokenizer import Tokenizer

    reviews = ["这个手机很好用，电池也不错", "手机的屏幕很好", "电池不错，就是有点贵", "iPhone手机很好用"] * 3
    tokenizer = Tokenizer.learn(reviews, vocabulary_size=100, min_count=2, max_length=24, chinese_words=True)
    dimensions = dict(hidden_size=32, embedding_size=16, num_layers=2, num_heads=2, intermediate_size=64)
    model = build_model(
        ModelConfig(vocabulary_size=len(tokenizer.vocabulary), num_classes=3, max_length=24, **dimensions)
    )
    path = export_saved_model(model, tokenizer, NAMES, str(tmp_path))
    texts = ["我的手机电池不错", "手机" * 300, *STRANGE]
    served = json.loads(_run(LOAD_AND_SERVE, path, json.dumps(texts)))
    expected = np.asarray(model(tokenizer(tf.constant(texts))))
    assert np.abs(np.asarray(served["probabilities"], "float32") - expected).max() <= 1e-5
    assert served["tokens"][:7] == ["[CLS]", "手机", "手机", "手机", "手机", "手机", "手机"]


@pytest.mark.slow
def test_versions_and_cli_listing(exported):
    _, _, root, path = exported
    assert path == os.path.join(root, "1") and next_version(root) == 2
    assert latest_export(root) == path and latest_export(path) == path
    cli = os.path.join(os.path.dirname(sys.executable), "saved_model_cli")
    shown = subprocess.run([cli, "show", "--dir", path, "--all"], capture_output=True, text=True, timeout=120)
    assert shown.returncode == 0, shown.stderr[-2000:]
    for name in ("serving_default", "attention", "'text'", "'probabilities'", "'label'", "'label_id'", "'tokens'"):
        assert name in shown.stdout, name


@pytest.mark.slow
def test_predict_cli_jsonl_and_tsv(exported, tmp_path, capsys):
    # In this process; test_console_scripts_run_the_entry_points starts it as a command.
    from pipeline.predict import main as predict_main

    model, tokenizer, root, _ = exported
    inputs = tmp_path / "in.txt"
    inputs.write_text("the cat sat\n北京\n\n", encoding="utf-8")
    predict_main(["--model", root, str(inputs)])
    results = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert [r["text"] for r in results] == ["the cat sat", "北京", ""]
    expected = np.asarray(model(tokenizer(tf.constant(["the cat sat", "北京", ""]))))
    for result, row in zip(results, expected):
        assert list(result["probabilities"]) == NAMES
        np.testing.assert_allclose([result["probabilities"][n] for n in NAMES], row, atol=1e-5)
        assert result["label"] == NAMES[int(np.argmax(row))]
    predict_main(["--model", root, str(inputs), "--format", "tsv"])
    tsv = capsys.readouterr().out.splitlines()
    assert tsv[0].split("\t") == ["label"] + NAMES + ["text"] and len(tsv) == 4


def test_serving_signatures_call_no_xla(exported):
    # TensorFlow Serving runs XLA calls only behind an experimental flag. The
    # hand-written GELU gradient is one (layers.fused_gradients) and is saved
    # with the model, for gradients through it; the signatures never reach it.
    from tensorflow.core.protobuf import saved_model_pb2

    _, _, _, path = exported
    saved = saved_model_pb2.SavedModel()
    with open(os.path.join(path, "saved_model.pb"), "rb") as f:
        saved.ParseFromString(f.read())
    graph_def = saved.meta_graphs[0].graph_def
    functions = [f.signature.name for f in graph_def.library.function]
    signatures = [name for name in functions if "signature_wrapper" in name]
    assert len(signatures) == 2  # serving_default, attention
    assert xla_compiled_ops(graph_def, signatures) == []
    assert xla_compiled_ops(graph_def, functions)  # the walk does find the gradient's


ENSEMBLE_MEMBER = {  # a few seconds of training each on the demo corpus
    "model": {**TINY_MODEL, "dropout_rate": 0.1},
    "data": WORD_TOKENS,
    "optimizer": {"learning_rate": 3e-3},
    "train": {"batch_size": 32, "epochs": 1, "pretrain_epochs": 0},
}
SENTENCES = ["our team beat their team", "the food was good but the room was awful", "", "北京"]


@pytest.mark.slow
def test_an_ensemble_of_runs_serves_the_mean_of_their_probabilities(tmp_path):
    from pipeline.config import Config
    from pipeline.dataset import learn_vocabulary
    from pipeline.demo_corpus import write_demo_corpus
    from pipeline.export import main as export_main
    from pipeline.model import model_internals
    from pipeline.model_dir import restore_model
    from pipeline.tokenizer import Tokenizer
    from pipeline.train import train_and_evaluate

    corpus = write_demo_corpus(tmp_path / "corpus", train_size=640, test_size=100)
    other_corpus = write_demo_corpus(tmp_path / "other", train_size=200, test_size=100, seed=1)
    first, second = str(tmp_path / "first"), str(tmp_path / "second")

    def member(model_dir, seed, data, **kwargs):
        config = Config.from_dict({**ENSEMBLE_MEMBER, "train": {**ENSEMBLE_MEMBER["train"], "seed": seed}})
        train_and_evaluate(config, model_dir, *data, export=False, **kwargs)

    member(first, 1, corpus)
    # The second learns nothing from its own (smaller) corpus: it takes the first's vocabulary.
    member(second, 2, other_corpus, vocabulary_from=first)
    with open(os.path.join(first, "vocab.txt")) as a, open(os.path.join(second, "vocab.txt")) as b:
        vocabulary = a.read()
        assert b.read() == vocabulary
    # What the flag saved the second run from: the vocabulary of its own corpus.
    config = Config.from_dict(ENSEMBLE_MEMBER)
    _, own = learn_vocabulary(other_corpus[0], config.data, config.model.max_length)
    assert own.vocabulary != Tokenizer.load(first).vocabulary

    export_main(["--model-dir", first, second, "--export-dir", str(tmp_path / "ensemble")])
    path = str(tmp_path / "ensemble" / "1")
    served = json.loads(_run(LOAD_AND_SERVE, path, json.dumps(SENTENCES)))
    members = [restore_model(d) for d in (first, second)]
    ids = members[0][1](tf.constant(SENTENCES))
    each = [np.asarray(model(ids)) for model, _, _ in members]
    probabilities = np.asarray(served["probabilities"])
    np.testing.assert_allclose(probabilities, (each[0] + each[1]) / 2, atol=1e-5)
    assert min(np.abs(probabilities - p).max() for p in each) > 1e-3  # neither member alone
    assert served["label"] == [members[0][2][i] for i in np.argmax(probabilities, -1)]
    assert served["attention_shape"] == [2, 4, 2, 16, 16]  # (batch, members x layers, heads, L, L)
    attention = tf.saved_model.load(path).signatures["attention"](text=tf.constant(SENTENCES[:2]))
    for index, (model, _, _) in enumerate(members):
        np.testing.assert_allclose(
            attention["attention"][:, 2 * index : 2 * index + 2],
            model_internals(model, ids[:2])["attention"],
            atol=1e-6,
        )

    # Runs that read other ids, or number the classes otherwise, are refused by name.
    for name, edit in [
        ("vocab.txt", lambda text: text.replace("\nteam\n", "\nsquad\n")),
        ("labels.json", lambda text: json.dumps(list(reversed(json.loads(text))))),
    ]:
        edited = tmp_path / f"edited_{name}"
        shutil.copytree(second, edited)
        with open(edited / name) as f:
            text = f.read()
        assert edit(text) != text
        with open(edited / name, "w") as f:
            f.write(edit(text))
        with pytest.raises(SystemExit, match=f"edited_{name}"):
            export_main(["--model-dir", first, str(edited), "--export-dir", str(tmp_path / "refused")])
    assert not os.path.exists(tmp_path / "refused")
    with pytest.raises(ValueError, match="own vocabulary"):
        member(str(tmp_path / "both"), 3, corpus, vocabulary_from=first, init_from=first)


@pytest.mark.parametrize("command", ["predict", "visualize"])
def test_a_model_path_that_is_no_export_is_a_one_line_error(tmp_path, command):
    from pipeline.predict import main as predict_main
    from pipeline.visualize import main as visualize_main

    missing = str(tmp_path / "no_export")
    main, extra = {
        "predict": (predict_main, []),
        "visualize": (visualize_main, ["--out", str(tmp_path / "out"), "a sentence"]),
    }[command]
    with pytest.raises(SystemExit, match=f"^error: {missing}: neither a SavedModel nor a folder of numbered versions$"):
        main(["--model", missing, *extra])
    assert not (tmp_path / "out").exists()


@pytest.mark.slow
def test_console_scripts_run_the_entry_points(exported):
    from importlib.metadata import entry_points

    scripts = {point.name: point for point in entry_points(group="console_scripts") if point.name.startswith("albert-")}
    assert {name: point.value for name, point in scripts.items()} == {
        "albert-train": "pipeline.train:main",
        "albert-pretrain": "pipeline.pretrain:main",
        "albert-export": "pipeline.export:main",
        "albert-predict": "pipeline.predict:main",
        "albert-visualize": "pipeline.visualize:main",
        "albert-sweep": "tuning.sweep:main",
        "albert-data-service": "pipeline.data_service:main",
    }
    assert all(callable(point.load()) for point in scripts.values())
    _, _, root, _ = exported
    result = subprocess.run(
        [os.path.join(os.path.dirname(sys.executable), "albert-predict"), "--model", root, "--format", "tsv"],
        input="a dog\n",
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr[-2000:]
    assert result.stdout.splitlines()[0] == "label\tnegative\tneutral\tpositive\ttext"
    assert result.stdout.splitlines()[1].endswith("\ta dog")
