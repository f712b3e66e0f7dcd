import dataclasses
import functools
import glob
import json
import os
import signal
import subprocess
import sys
import time

import keras
import keras_tuner
import numpy as np
import pytest
import tensorflow as tf

from conftest import WORD_TOKENS
from pipeline.config import Config, override
from pipeline.dataset import learn_tokenizer, read_split
from pipeline.demo_corpus import generate, write_demo_corpus
from pipeline.layout import CHECKPOINT_DIR
from pipeline.model import build_pretraining_model
from pipeline.model_dir import load_config, restore_model, restore_variables, save_vocabulary
from pipeline.strategy import configure_runtime
from pipeline.tokenizer import MASK_ID, Tokenizer
from pipeline.train import prepare_data
from process_helper import free_port
from tuning.hypermodel import ClassifierHyperModel, SweepTuner, Vocabularies, make_oracle
from tuning.search_space import SEARCH_SPACE, narrow, sample
from tuning.sweep import parse_args, run_sweep

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BASE = {
    "model": {"max_length": 16},
    "data": WORD_TOKENS,
    "train": {"epochs": 1, "checkpoint_every": 5, "pretrain_epochs": 0},
    "pretrain": {"min_steps": 0},
}
SPACE = {
    "embedding_size": 16,
    "hidden_size": [32, 64],
    "num_heads": 2,
    "num_layers": {"min": 1, "max": 2, "step": 1},
    "intermediate_multiple": 2,
    "dropout_rate": 0.0,
    "sharing": ["all", "none"],
    "pooling": ["flatten", "mean"],
    "learning_rate": {"min": 1e-3, "max": 3e-3},
    "warmup_fraction": 0.0,
    "batch_size": 32,
    "pretrain_learning_rate": 3e-3,
}


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):  # half conftest's: sweeps train many models
    return write_demo_corpus(tmp_path_factory.mktemp("corpus"), train_size=320, test_size=100)


def _trials(directory):
    """The trials' `trial.json` contents; whole even while a sweep runs, since
    they are renamed into place (`tuning.hypermodel.save_json`)."""
    trials = []
    for path in sorted(glob.glob(os.path.join(directory, "trials", "trial_*", "trial.json"))):
        with open(path) as f:
            trials.append(json.load(f))
    return trials


def test_choices_default_to_the_base_config_where_it_is_one():
    hp = keras_tuner.HyperParameters()
    base = {
        "model": {"embedding_size": 128, "hidden_size": 256, "intermediate_size": 1024},
        "data": {"vocabulary_size": 8000},
        "train": {"batch_size": 16},
    }
    sample(hp, SEARCH_SPACE, Config.from_dict(base))
    assert hp.values["vocabulary_size"] == 8000 and hp.values["batch_size"] == 16
    assert hp.values["embedding_size"] == 128  # the base config's, not the first choice (64)
    assert hp.values["intermediate_multiple"] == 2  # the base's 1024 is a width, not a multiple: the first choice
    assert sample(keras_tuner.HyperParameters(), SEARCH_SPACE)["data"]["vocabulary_size"] == 2000


def test_narrowing_the_space():
    space = narrow(SEARCH_SPACE, {"num_layers": 4, "hidden_size": [128], "dropout_rate": {"min": 0, "max": 0.1}})
    assert space["num_layers"][2] == {"fixed": 4} and space["hidden_size"][2] == {"values": [128]}
    assert space["dropout_rate"][2]["max"] == 0.1 and isinstance(space["dropout_rate"][2]["min"], float)
    with pytest.raises(ValueError, match="unknown hyperparameter 'depth'"):
        narrow(SEARCH_SPACE, {"depth": 3})


@pytest.mark.slow
def test_trials_pretrain_with_their_own_shapes_then_start_from_it_and_share_it(tmp_path, corpus):
    # With unlabelled text too, whose words the vocabulary learns (a word no training text has).
    unlabelled = tmp_path / "unlabelled.txt"
    unlabelled.write_text("".join(f"{text} zorblax\n" for text, _ in generate(80, seed=3)), encoding="utf-8")
    config = Config.from_dict(
        {
            **BASE,
            "train": {**BASE["train"], "pretrain_epochs": 1},
            "pretrain": {**BASE["pretrain"], "unlabelled": str(unlabelled)},
        }
    )
    # Trials are single models: an ensemble setting is refused before any work.
    with pytest.raises(ValueError, match="train.members is 3: sweeps compare single models"):
        run_sweep(
            Config.from_dict({**BASE, "train": {**BASE["train"], "members": 3}}), str(tmp_path / "members"), *corpus
        )
    assert not os.path.exists(tmp_path / "members")
    # Every other hyperparameter fixed: two widths and two poolings are the only four trials.
    space = {
        **SPACE,
        "num_layers": 1,
        "sharing": "all",
        "pooling": ["flatten", "mean"],
        "learning_rate": 2e-3,
        "token_dropout": 0.0,
        "vocabulary_size": 4000,
    }
    directory = str(tmp_path / "sweep")
    rows = run_sweep(config, directory, *corpus, "random", max_trials=5, space_overrides=space)
    assert sorted((row["hidden_size"], row["pooling"]) for row in rows) == [
        (32, "flatten"),
        (32, "mean"),
        (64, "flatten"),
        (64, "mean"),
    ]
    # The pooling is the classifier's alone: one pre-training per width, the
    # width's other trial starting from it.
    own = {}
    for row in rows:
        trial_dir = os.path.join(directory, "trials", f"trial_{row['trial']}")
        if os.path.exists(os.path.join(trial_dir, "pretrain")):
            own.setdefault(row["hidden_size"], []).append(trial_dir)
    assert sorted(own) == [32, 64] and all(len(dirs) == 1 for dirs in own.values()), own
    for row in rows:
        trial_dir = os.path.join(directory, "trials", f"trial_{row['trial']}")
        # pipeline.train's held-out slice and refit (on by default) are off: --eval scores the trial.
        assert (load_config(trial_dir).train.validation_split, load_config(trial_dir).train.refit) == (0.0, False)
        pretrain_dir = os.path.join(own[row["hidden_size"]][0], "pretrain")
        if trial_dir not in own[row["hidden_size"]]:  # the others say where they started
            with open(os.path.join(trial_dir, "pretrained_from.json")) as f:
                assert json.load(f) == {"pretrain_dir": pretrain_dir}
        assert load_config(pretrain_dir).model.hidden_size == row["hidden_size"]
        assert load_config(pretrain_dir).pretrain.unlabelled == str(unlabelled)
        assert Tokenizer.load(pretrain_dir).vocabulary == Tokenizer.load(trial_dir).vocabulary
        assert "zorblax" in Tokenizer.load(trial_dir).vocabulary
        pretrained = build_pretraining_model(load_config(pretrain_dir).model)
        restore_variables(pretrained, tf.train.latest_checkpoint(os.path.join(pretrain_dir, CHECKPOINT_DIR)))
        classifier = restore_model(trial_dir)[0]
        # [MASK] never occurs in classification batches: its embedding row is
        # the pre-trained one, which masked-LM training moved from its start.
        ours, theirs = (m.get_layer("embedding").get_weights()[0][MASK_ID] for m in (classifier, pretrained))
        np.testing.assert_allclose(ours, theirs, rtol=1e-3, atol=1e-6)
        fresh = build_pretraining_model(load_config(pretrain_dir).model).get_layer("embedding").get_weights()[0]
        assert np.abs(theirs - fresh[MASK_ID]).max() > 1e-3


@pytest.mark.slow
@pytest.mark.parametrize("tuner, objective", [("hyperband", "val_macro_f1"), ("bayesian", "val_loss")])
def test_hyperband_and_bayesian_trials_complete(tmp_path, corpus, tuner, objective):
    base = {**BASE, "train": {**BASE["train"], "epochs": 2}}
    rows = run_sweep(
        Config.from_dict(base),
        str(tmp_path / tuner),
        *corpus,
        tuner,
        max_trials=2,
        objective=objective,
        space_overrides=SPACE,
    )
    assert len(rows) >= 2 and all(r["status"] == "COMPLETED" for r in rows)
    assert all(r["score"] == r[objective] for r in rows)
    scores = [r["score"] for r in rows]  # the best trial first: the lowest loss, the highest macro-F1
    assert scores == sorted(scores, reverse=objective != "val_loss") and len(set(scores)) > 1


@pytest.mark.slow
def test_random_trials_learn_the_vocabulary_size_they_sample_score_report_and_export_the_best(tmp_path, corpus):
    # Every other hyperparameter fixed: the two sizes are the only two trials.
    space = {
        **SPACE,
        "hidden_size": 32,
        "num_layers": 1,
        "sharing": "all",
        "pooling": "mean",
        "learning_rate": 2e-3,
        "token_dropout": 0.0,
        "vocabulary_size": [30, 60],
    }
    directory = str(tmp_path / "vocabularies")
    rows = run_sweep(
        Config.from_dict(BASE), directory, *corpus, "random", max_trials=3, space_overrides=space, export_best=True
    )
    assert sorted(row["vocabulary_size"] for row in rows) == [30, 60]
    for row in rows:
        assert row["status"] == "COMPLETED", row
        assert 0.0 <= row["score"] <= 1.0 and row["score"] == row["val_accuracy"]
    assert [t["status"] for t in _trials(directory)] == ["COMPLETED"] * 2
    with open(os.path.join(directory, "results.json")) as f:
        assert json.load(f) == rows
    assert open(os.path.join(directory, "results.csv")).read().count("\n") == 3
    base = Tokenizer.load(directory)  # the run's own, 4,000 at most: every word of the corpus
    assert len(base.vocabulary) > 60
    tokenizers = {}
    for row in rows:
        trial_dir = os.path.join(directory, "trials", f"trial_{row['trial']}")
        with open(os.path.join(trial_dir, "config.json")) as f:
            saved = json.load(f)
        tokenizers[row["trial"]] = Tokenizer.load(trial_dir)
        vocabulary = tokenizers[row["trial"]].vocabulary
        # The word tokenizer keeps the most frequent words: the base's first ones.
        assert vocabulary == base.vocabulary[: row["vocabulary_size"]]
        assert saved["data"]["vocabulary_size"] == saved["model"]["vocabulary_size"] == len(vocabulary)
    # The export tokenizes as the best trial did, and the two trials differ.
    best, other = (row["trial"] for row in rows)
    texts = tf.constant(read_split(corpus[0], Config().data).texts[:50])
    ids = {trial: tokenizer(texts).numpy() for trial, tokenizer in tokenizers.items()}
    assert (ids[best] != ids[other]).any()
    exported = tf.saved_model.load(os.path.join(directory, "export", "1"))
    np.testing.assert_array_equal(exported.signatures["attention"](text=texts)["token_ids"].numpy(), ids[best])
    probabilities = exported.signatures["serving_default"](text=texts)["probabilities"].numpy()
    np.testing.assert_allclose(probabilities.sum(axis=-1), 1.0, atol=1e-5)


@pytest.mark.slow
def test_a_trial_directory_holding_another_vocabulary_is_refused(tmp_path, corpus):
    prepared = prepare_data(Config.from_dict(BASE), str(tmp_path), *corpus)
    config, names, tokenizer = prepared.config, prepared.names, prepared.tokenizer
    data = Vocabularies(prepared, 16, corpus)
    small = dataclasses.replace(config.data, vocabulary_size=30)
    learned, small_train, _ = data(small)
    assert data(small)[0] is learned and data(config.data)[0] is tokenizer  # each size learned once
    assert len(learned.vocabulary) == 30 and small_train.ids.max() < 30
    # Learned again from scratch, the same ids: processes and resumed sweeps agree.
    texts = read_split(corpus[0], config.data).texts
    assert learn_tokenizer(texts, small, 16).vocabulary == learned.vocabulary

    fixed = {
        **SPACE,
        "hidden_size": 32,
        "num_layers": 1,
        "sharing": "all",
        "pooling": "mean",
        "learning_rate": 2e-3,
        "token_dropout": 0.0,
    }
    # KerasTuner's first build, which learns the space, takes the defaults:
    # the base config's size where it is a choice, so nothing is learned.
    base_size = config.data.vocabulary_size
    space = narrow(SEARCH_SPACE, {**fixed, "vocabulary_size": [30, base_size]})
    first = ClassifierHyperModel(config, space, data, tf.distribute.get_strategy())
    assert first.config_for(keras_tuner.HyperParameters()).model.vocabulary_size == len(tokenizer.vocabulary)

    space = narrow(SEARCH_SPACE, {**fixed, "vocabulary_size": 30})
    hypermodel = ClassifierHyperModel(config, space, data, tf.distribute.get_strategy())
    hp = keras_tuner.HyperParameters()
    model = hypermodel.build(hp)
    assert hypermodel.config_for(hp).model.vocabulary_size == 30
    trial_dir = str(tmp_path / "trial")
    os.makedirs(trial_dir)
    save_vocabulary(trial_dir, learn_tokenizer(texts, dataclasses.replace(small, vocabulary_size=29), 16), names)
    with pytest.raises(ValueError, match="another vocabulary"):
        hypermodel.fit(hp, model, trial_dir=trial_dir)


@pytest.mark.slow
def test_a_trial_pretraining_keeps_the_sweeps_tpu_precision(tmp_path, corpus):
    # Pre-training sets the precision policy again: under --tpu, "auto" must
    # stay mixed_bfloat16 for the trials built after it, not fall to float32.
    config = Config.from_dict({**BASE, "train": {**BASE["train"], "pretrain_epochs": 1}})
    prepared = prepare_data(config, str(tmp_path), *corpus)
    config = prepared.config
    data = Vocabularies(prepared, 16, corpus)
    space = narrow(
        SEARCH_SPACE,
        {
            **SPACE,
            "hidden_size": 32,
            "num_layers": 1,
            "sharing": "all",
            "pooling": "mean",
            "learning_rate": 2e-3,
            "token_dropout": 0.0,
        },
    )
    hypermodel = ClassifierHyperModel(config, space, data, tf.distribute.get_strategy(), tpu="local")
    hp = keras_tuner.HyperParameters()
    try:
        configure_runtime(config, "local")  # as run_sweep does under --tpu
        hypermodel.fit(hp, hypermodel.build(hp), trial_dir=str(tmp_path / "trial"))
        assert keras.mixed_precision.global_policy().name == "mixed_bfloat16"
    finally:
        keras.mixed_precision.set_global_policy("float32")


def _command(directory, corpus, config_path, max_trials, tuner="random"):
    return [
        sys.executable,
        "-m",
        "tuning.sweep",
        "--train",
        corpus[0],
        "--eval",
        corpus[1],
        "--directory",
        directory,
        "--tuner",
        tuner,
        "--max-trials",
        str(max_trials),
        "--config",
        config_path,
        "--space",
        json.dumps(SPACE),
    ]


def _config_file(tmp_path):
    path = str(tmp_path / "base.json")
    with open(path, "w") as f:
        json.dump(BASE, f)
    return path


@pytest.mark.slow
def test_chief_and_two_workers_share_the_trials(tmp_path, corpus):
    directory, port = str(tmp_path / "distributed"), str(free_port())
    command = _command(directory, corpus, _config_file(tmp_path), max_trials=4)
    processes = {}
    for tuner_id in ("chief", "tuner0", "tuner1"):
        env = dict(
            os.environ,
            TF_CPP_MIN_LOG_LEVEL="2",
            KERASTUNER_TUNER_ID=tuner_id,
            KERASTUNER_ORACLE_IP="127.0.0.1",
            KERASTUNER_ORACLE_PORT=port,
        )
        processes[tuner_id] = subprocess.Popen(
            command, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
        )
        if tuner_id == "chief":
            time.sleep(3)  # let the chief open its port first
    try:
        outputs = {name: p.communicate(timeout=400)[0] for name, p in processes.items()}
    finally:
        for p in processes.values():
            p.kill()
    for name, process in processes.items():
        assert process.returncode == 0, (name, outputs[name][-3000:])
    trials = _trials(directory)
    assert len(trials) == 4 and all(t["status"] == "COMPLETED" for t in trials)
    # Both workers ran trials; the chief only served the oracle and reports.
    assert "Epoch 1/1" in outputs["tuner0"] and "Epoch 1/1" in outputs["tuner1"]
    assert "Epoch 1/1" not in outputs["chief"]
    best = max(trials, key=lambda t: t["score"])
    with open(os.path.join(directory, "results.json")) as f:
        reported = json.load(f)  # written by the chief
    assert reported[0]["trial"] == best["trial_id"] and reported[0]["score"] == best["score"]
    table = [line for line in outputs["chief"].splitlines() if line.startswith("trial ")]
    assert table and "val_macro_f1" in table[0]


@pytest.mark.slow
def test_interrupted_sweep_continues_without_rerunning_trials(tmp_path, corpus):
    directory = str(tmp_path / "resumed")
    command = _command(directory, corpus, _config_file(tmp_path), max_trials=3)
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2")
    process = subprocess.Popen(command, cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.time() + 300
    while not any(t["status"] == "COMPLETED" for t in _trials(directory)):
        assert process.poll() is None and time.time() < deadline, "the sweep ended before it was stopped"
        time.sleep(0.1)
    process.send_signal(signal.SIGKILL)
    process.wait()
    done = {t["trial_id"]: t for t in _trials(directory) if t["status"] == "COMPLETED"}
    weights = {i: os.path.getmtime(os.path.join(directory, "trials", f"trial_{i}", "best.weights.h5")) for i in done}
    finished = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True, timeout=400)
    assert finished.returncode == 0, finished.stdout[-2000:] + finished.stderr[-2000:]
    trials = {t["trial_id"]: t for t in _trials(directory)}
    assert len(trials) == 3 and all(t["status"] == "COMPLETED" for t in trials.values())
    for trial_id, before in done.items():  # kept, with its score, and not trained again
        assert trials[trial_id]["score"] == before["score"]
        path = os.path.join(directory, "trials", f"trial_{trial_id}", "best.weights.h5")
        assert os.path.getmtime(path) == weights[trial_id]


class _Killed(Exception):
    pass


def _die_while_writing(monkeypatch, name):
    """Every write to a file called `name` (or `name.tmp`) writes half its text
    and raises `_Killed`, as a process killed mid-write leaves it: through
    `tf.io.gfile`, as KerasTuner writes, or `open`, as `pipeline.files` does for
    `tuning.hypermodel`."""

    def doomed(path):
        return os.path.basename(str(path)).removesuffix(".tmp") == name

    def dying_write(write, text):
        write(text[: len(text) // 2])
        raise _Killed(name)

    gfile_write = tf.io.gfile.GFile.write
    monkeypatch.setattr(
        tf.io.gfile.GFile,
        "write",
        lambda self, text: (
            dying_write(lambda t: gfile_write(self, t), text) if doomed(self.name) else gfile_write(self, text)
        ),
    )

    class DyingFile:
        def __init__(self, f):
            self.f = f

        def write(self, text):
            dying_write(self.f.write, text)

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            self.f.close()

    def dying_open(path, mode="r", *args, **kwargs):
        f = open(path, mode, *args, **kwargs)
        return DyingFile(f) if "w" in mode and doomed(path) else f

    monkeypatch.setattr("pipeline.files.open", dying_open, raising=False)


def _tuner(directory, kind):
    """What each run of a sweep builds on the same directory (no training)."""
    return SweepTuner(
        oracle=make_oracle(kind, "val_accuracy", max_trials=5, seed=1, max_epochs=3),
        hypermodel=lambda hp: hp.Choice("units", [8, 16, 32, 64]),
        directory=str(directory),
        project_name="trials",
    )


def _one_completed_trial(tuner):
    done = tuner.oracle.create_trial(tuner.tuner_id)
    tuner.oracle.update_trial(done.trial_id, {"val_accuracy": 0.625})
    done.status = keras_tuner.engine.trial.TrialStatus.COMPLETED
    tuner.oracle.end_trial(done)
    tuner.save()
    return done


@pytest.mark.parametrize("kind", ["random", "bayesian", "hyperband"])
def test_a_sweep_killed_while_writing_its_state_reloads(tmp_path, monkeypatch, kind):
    tuner = functools.partial(_tuner, tmp_path, kind)
    first = tuner()
    done = _one_completed_trial(first)
    for name, write in [
        ("trial.json", lambda run: run.oracle.create_trial(run.tuner_id)),
        ("oracle.json", lambda run: run.save()),
        (os.path.basename(first._get_tuner_fname()), lambda run: run.save()),
    ]:
        run = tuner()  # the run after the last one was killed
        with monkeypatch.context() as patch:
            _die_while_writing(patch, name)
            with pytest.raises(_Killed):
                write(run)

    reloaded = tuner().oracle  # reads every trial.json, oracle.json and the tuner's file
    assert reloaded.trials[done.trial_id].status == "COMPLETED"
    assert reloaded.trials[done.trial_id].score == 0.625
    assert reloaded.get_space().get_config() == first.oracle.get_space().get_config()


@pytest.mark.parametrize("kind", ["random", "bayesian", "hyperband"])
def test_a_trial_started_just_before_a_kill_runs_again(tmp_path, monkeypatch, kind):
    first = _tuner(tmp_path, kind)
    done = _one_completed_trial(first)
    run = _tuner(tmp_path, kind)

    def killed(oracle):
        raise _Killed("oracle.json")

    with monkeypatch.context() as patch:  # killed after the new trial's file, before the oracle's
        patch.setattr(type(run.oracle), "save", killed)
        with pytest.raises(_Killed):
            run.oracle.create_trial(run.tuner_id)
    started = [t for t in _trials(tmp_path) if t["status"] == "RUNNING"]
    assert len(started) == 1
    resumed = _tuner(tmp_path, kind).oracle
    trial = resumed.create_trial("tuner0")
    # The same trial, with the same values, not a new one beside an orphan.
    assert trial.trial_id == started[0]["trial_id"] and trial.status == "RUNNING"
    assert trial.hyperparameters.values == started[0]["hyperparameters"]["values"]
    assert sorted(resumed.trials) == sorted([done.trial_id, trial.trial_id])


def test_the_sweep_takes_the_task_and_column_flags_of_pipeline_train(tmp_path, capsys):
    argv = ["--directory", str(tmp_path), "--epochs", "2", "--multi-label", "--label-delimiter", "|"]
    argv += [
        "--text-column",
        "premise",
        "--text-pair-column",
        "hypothesis",
        "--label-column",
        "tags",
        "--skip-bad-rows",
    ]
    _, overrides = parse_args(argv)
    assert overrides == {
        "data": {
            "task": "multi_label",
            "label_delimiter": "|",
            "text_column": "premise",
            "text_pair_column": "hypothesis",
            "label_column": "tags",
            "skip_bad_rows": True,
        },
        "train": {"epochs": 2},
    }
    assert override(Config(), overrides).model.segments == 2  # the pair column packs two segments
    with pytest.raises(SystemExit):
        parse_args(["--directory", str(tmp_path), "--task", "regression", "--multi-label"])
    assert "--multi-label is --task multi_label, not regression" in capsys.readouterr().err
