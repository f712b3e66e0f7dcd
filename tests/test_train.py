import contextlib
import csv
import dataclasses
import functools
import io
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time

import keras
import numpy as np
import pytest
import tensorflow as tf

from conftest import TINY_MODEL, WORD_TOKENS
from pipeline.config import Config, TrainConfig, override
from pipeline.dataset import Split, hold_out, load_split, tokenize, train_dataset
from pipeline.layout import CHECKPOINT_DIR, REFIT_DIR
from pipeline.metrics import log_loss
from pipeline.model import build_model
from pipeline.model_dir import load_run, restore_model, restore_variables
from pipeline.pretrain import pretrain
from pipeline.readers import read_examples
from pipeline.train import epochs_for, train_and_evaluate
from pipeline.train import main as train_main
from pipeline.trainer import Trainer, TrainingError, build_optimizer
from process_helper import free_ports

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TINY = {
    "model": TINY_MODEL,
    "data": WORD_TOKENS,
    "optimizer": {"learning_rate": 3e-3},
    # Pre-training (on by default) has tests of its own in test_pretrain.py; the held-out slice of the
    # training files and the refit (on by default) theirs below (DEFAULT_SPLIT).
    "train": {
        "batch_size": 32,
        "epochs": 2,
        "checkpoint_every": 10,
        "pretrain_epochs": 0,
        "validation_split": 0.0,
        "refit": False,
    },
}
# TINY with the default validation_split and refit.
DEFAULT_SPLIT = {**TINY, "train": {k: v for k, v in TINY["train"].items() if k not in ("validation_split", "refit")}}


def _config(**train):
    return Config.from_dict({**TINY, "train": {**TINY["train"], **train}})


def _default_split_config(**train):
    return Config.from_dict({**DEFAULT_SPLIT, "train": {**DEFAULT_SPLIT["train"], **train}})


def _held_out(corpus):
    """`(kept, held_out)` Examples of the corpus's training file, as a run with the default split cuts it."""
    return hold_out(read_examples(corpus[0]), Config().train.validation_split)


def _probabilities(model_dir):
    model, tokenizer, _ = restore_model(model_dir)
    texts = ["our team beat their team", "the food was good but the room was awful", ""]
    return np.asarray(model(tokenize(tokenizer, texts)))


def _random_split(count):
    # Ids of a 30-token vocabulary, length 16, classes 0-2 in turn.
    ids = np.random.default_rng(0).integers(1, 30, size=(count, 16)).astype("int32")
    return Split(ids, np.arange(count, dtype="int32") % 3, [f"f:{i}" for i in range(count)], {})


def _printed(function, *args, **kwargs):
    """`(result, output)` of a call, with what it printed."""
    output = io.StringIO()
    with contextlib.redirect_stdout(output):
        result = function(*args, **kwargs)
    return result, output.getvalue()


@pytest.fixture(scope="module")
def one_epoch(tmp_path_factory, corpus):
    """`(run, report, output)`: one epoch of TINY on the corpus, in host loops
    of 7 steps cut short by the checkpoints every 10 and by the epoch's end
    (7, 3, 7, 3), and what it printed."""
    run = str(tmp_path_factory.mktemp("one_epoch") / "run")
    report, output = _printed(train_and_evaluate, _config(epochs=1, steps_per_execution=7), run, *corpus, export=False)
    return run, report, output


@pytest.mark.slow
def test_two_replicas_with_host_loops_match_one_device(tmp_path, corpus, two_replicas):
    # The demo texts make steps cut to 8 and to 16 tokens (train.length_bucket
    # 8): the replicas' all-reduce must take embedding gradients of both sizes.
    single = train_and_evaluate(_config(), str(tmp_path / "one"), *corpus, export=False)
    mirrored = two_replicas
    # Without pre-training its batch size is not read: 15 would not divide among the replicas.
    double = train_and_evaluate(
        override(_config(steps_per_execution=4), {"pretrain": {"batch_size": 15}}),
        str(tmp_path / "two"),
        *corpus,
        strategy=mirrored,
        export=False,
    )
    assert double["train_loss_by_epoch"][2] < double["train_loss_by_epoch"][1]
    assert double["examples"] == single["examples"] == 200
    assert abs(double["accuracy"] - single["accuracy"]) <= 0.02, (single, double)
    np.testing.assert_allclose(_probabilities(tmp_path / "two"), _probabilities(tmp_path / "one"), atol=0.02)


def test_batch_sizes_the_replicas_cannot_share_are_refused_by_field_before_any_work(tmp_path, corpus, two_replicas):
    mirrored = two_replicas
    cases = [
        (_config(batch_size=33), "train.batch_size 33"),
        (override(_config(pretrain_epochs=1), {"pretrain": {"batch_size": 15}}), "pretrain.batch_size 15"),
    ]
    for config, named in cases:
        with pytest.raises(ValueError, match=re.escape(f"{named} does not divide evenly among the 2 replicas")):
            train_and_evaluate(config, str(tmp_path / "run"), *corpus, strategy=mirrored)
        assert not (tmp_path / "run").exists()
    with pytest.raises(ValueError, match="pretrain.batch_size 15 does not divide evenly"):
        pretrain(cases[1][0], str(tmp_path / "pretrain"), [corpus[0]], strategy=mirrored)
    assert not (tmp_path / "pretrain").exists()


def test_prediction_scores_every_example_once_from_two_replicas(tmp_path, two_replicas):
    config = _config()
    mirrored = two_replicas
    model_config = dataclasses.replace(config.model, vocabulary_size=30, num_classes=3)
    split = _random_split(10)
    with mirrored.scope():
        model = build_model(model_config)
        trainer = Trainer(
            model,
            build_optimizer(config.optimizer, 10),
            mirrored,
            dataclasses.replace(config.train, batch_size=4),
            config.optimizer,
            str(tmp_path),
        )
    probabilities, labels = trainer.predict(split)  # 10 rows in 3 global batches of 2 x 2
    np.testing.assert_array_equal(labels, split.labels)
    np.testing.assert_allclose(probabilities, model(split.ids), atol=1e-6)


def test_derived_epochs_give_every_corpus_at_least_min_steps():
    config = TrainConfig(epochs=0, min_steps=1000, batch_size=64)
    assert epochs_for(config, 27_473) == 3  # 429 steps an epoch: the floor of 3
    assert epochs_for(config, 540) == 125  # 8 steps an epoch
    assert epochs_for(config, 100) == 200  # 1 step an epoch: the cap
    assert epochs_for(dataclasses.replace(config, epochs=5), 540) == 5  # given, kept


@pytest.mark.slow
def test_training_stops_after_patience_epochs_without_a_better_score_and_stays_stopped(tmp_path):
    config = dataclasses.replace(_config().train, patience=2)
    optimizer_config = _config().optimizer
    model_config = dataclasses.replace(_config().model, vocabulary_size=30, num_classes=3)
    split = _random_split(64)
    scores = [0.5, 0.9, 0.7, 0.6, 0.95, 0.99]  # the best at epoch 2, then two worse: stop after 4 of 6
    saved = []

    def trainer():
        model = build_model(model_config)
        return model, Trainer(
            model,
            build_optimizer(optimizer_config, 12),
            tf.distribute.get_strategy(),
            config,
            optimizer_config,
            str(tmp_path),
        )

    model, first = trainer()

    def on_epoch_end(epoch):
        saved.append(model.get_weights())
        return scores[epoch]

    losses = first.fit(functools.partial(train_dataset, split, 32, 0), len(split), 6, on_epoch_end)
    assert sorted(losses) == [1, 2, 3, 4] and int(first.step.numpy()) == 8
    assert json.load(open(tmp_path / "best_epoch.json"))["epoch"] == 2
    model.load_weights(str(tmp_path / "best.weights.h5"))
    for value, expected in zip(model.get_weights(), saved[1]):
        np.testing.assert_array_equal(value, expected)
    # Started again, it finds the stop and trains no more.
    _, again = trainer()
    assert sorted(again.fit(functools.partial(train_dataset, split, 32, 0), len(split), 6, on_epoch_end)) == [
        1,
        2,
        3,
        4,
    ]
    assert int(again.step.numpy()) == 8 and len(saved) == 4


@pytest.mark.slow
def test_derived_epochs_are_said_and_saved(tmp_path, corpus, capsys):
    # 640 examples less the held-out tenth, in batches of 32: 18 steps an epoch, 3 epochs for 40 steps at least.
    config = _default_split_config(epochs=0, min_steps=40, pretrain_epochs=0, refit=False)
    train_and_evaluate(config, str(tmp_path / "run"), *corpus, export=False)
    assert json.load(open(tmp_path / "run" / "config.json"))["train"]["epochs"] == 3
    assert "3 epoch(s) (derived: at least 40 steps), stopping after 3 without a better" in capsys.readouterr().out


@pytest.mark.slow
@pytest.mark.parametrize("keep_best_epoch", [True, False])
def test_kept_weights_are_the_best_epochs_or_the_last(tmp_path, keep_best_epoch):
    config = _config(keep_best_epoch=keep_best_epoch)
    model_config = dataclasses.replace(config.model, vocabulary_size=30, num_classes=3)
    split = _random_split(64)
    model = build_model(model_config)
    trainer = Trainer(
        model,
        build_optimizer(config.optimizer, 6),
        tf.distribute.get_strategy(),
        config.train,
        config.optimizer,
        str(tmp_path),
    )
    weights = []

    def on_epoch_end(epoch):
        weights.append(model.get_weights())
        return [0.5, 0.9, 0.7][epoch]  # the second epoch scores best

    trainer.fit(functools.partial(train_dataset, split, 32, 0), len(split), 3, on_epoch_end)
    model.load_weights(str(tmp_path / "best.weights.h5"))
    kept = weights[1] if keep_best_epoch else weights[2]
    assert not np.array_equal(weights[1][0], weights[2][0])
    for value, expected in zip(model.get_weights(), kept):
        np.testing.assert_array_equal(value, expected)


@pytest.mark.slow
def test_weight_averaging_scores_and_keeps_the_moving_average_of_the_trained_weights(tmp_path):
    # One step an epoch, so every step's weights are scored: without
    # averaging, the trained weights; with it, their moving average, while
    # training itself goes on unchanged.
    decay = 0.8
    split = _random_split(32)
    trajectories = {}
    for averaging in (0.0, decay):
        config = override(_config(patience=0), {"optimizer": {"weight_averaging": averaging}})  # TINY: no dropout
        keras.utils.set_random_seed(0)  # the same initial weights
        model = build_model(dataclasses.replace(config.model, vocabulary_size=30, num_classes=3))
        trainer = Trainer(
            model,
            build_optimizer(config.optimizer, 8),
            tf.distribute.get_strategy(),
            config.train,
            config.optimizer,
            str(tmp_path / str(averaging)),
        )
        weights = [[w.numpy() for w in model.trainable_variables]]
        scores = iter([0.1, 0.2, 0.9, 0.3, 0.4, 0.5, 0.6, 0.7])  # the third step scores best

        def on_epoch_end(epoch):
            weights.append([w.numpy() for w in model.trainable_variables])
            return next(scores)

        trainer.fit(functools.partial(train_dataset, split, 32, 0), len(split), 8, on_epoch_end)
        trajectories[averaging] = weights
        last = [w.numpy() for w in model.trainable_variables]
        model.load_weights(str(tmp_path / str(averaging) / "best.weights.h5"))
        kept = [w.numpy() for w in model.trainable_variables]
    checkpoint = tf.train.latest_checkpoint(str(tmp_path / str(decay) / CHECKPOINT_DIR))
    restored = {}
    for averaged in (False, True):  # what restore_model falls back on before an epoch has finished
        restore_variables(model, checkpoint, averaged=averaged)
        restored[averaged] = [w.numpy() for w in model.trainable_variables]
    trained, averaged = trajectories[0.0], trajectories[decay]
    expected = trained[0]
    for step in range(1, 9):  # as tf.train.ExponentialMovingAverage(decay, num_updates=step)
        rate = min(decay, (1 + step) / (10 + step))
        expected = [rate * a + (1 - rate) * w for a, w in zip(expected, trained[step])]
        for value, wanted in zip(averaged[step], expected):
            np.testing.assert_allclose(value, wanted, rtol=1e-5, atol=1e-7)
    assert not np.allclose(averaged[8][0], trained[8][0])
    for value, wanted in zip(kept + last + restored[True], averaged[3] + averaged[8] + averaged[8]):
        np.testing.assert_array_equal(value, wanted)  # kept: the best step's average; left: the last's
    for value, wanted in zip(restored[False], trained[8]):
        np.testing.assert_allclose(value, wanted, rtol=1e-6)


@pytest.mark.slow
def test_same_seed_gives_identical_metrics_with_any_host_loop(tmp_path, corpus, one_epoch):
    # 20 steps: in host loops (one_epoch's), then one per call with checkpoints every 6.
    run, first, _ = one_epoch
    second = train_and_evaluate(
        _config(epochs=1, steps_per_execution=1, checkpoint_every=6), str(tmp_path / "b"), *corpus, export=False
    )
    assert first == second
    np.testing.assert_array_equal(_probabilities(run), _probabilities(tmp_path / "b"))
    assert [
        os.path.basename(path)
        for path in tf.train.get_checkpoint_state(
            os.path.join(tmp_path, "b", CHECKPOINT_DIR)
        ).all_model_checkpoint_paths
    ] == ["ckpt-18", "ckpt-20"]


@pytest.mark.slow
def test_nan_loss_stops_and_keeps_the_last_good_checkpoint(tmp_path, corpus, one_epoch):
    model_dir = str(tmp_path / "run")
    shutil.copytree(one_epoch[0], model_dir)
    saved = tf.train.latest_checkpoint(os.path.join(model_dir, CHECKPOINT_DIR))
    config, tokenizer, names = load_run(model_dir)
    config.train.epochs = 2
    train = load_split(corpus[0], config.data, tokenizer, names)
    model = build_model(config.model)
    strategy = tf.distribute.get_strategy()
    trainer = Trainer(model, build_optimizer(config.optimizer, 40), strategy, config.train, config.optimizer, model_dir)
    trainer.restore()
    kernel = model.get_layer("head").logits.kernel
    good = np.asarray(kernel).copy()
    kernel.assign(np.full(kernel.shape, np.nan, "float32"))
    with pytest.raises(
        TrainingError,
        match=r"loss became nan .*last good checkpoint is kept: .*ckpt-20\. Lower "
        r"optimizer\.learning_rate \(now 0\.003\) or optimizer\.clip_norm \(now 1\.0\)",
    ):
        trainer.fit(functools.partial(train_dataset, train, 32, 0), len(train), epochs=2)
    assert tf.train.latest_checkpoint(os.path.join(model_dir, CHECKPOINT_DIR)) == saved
    restored = build_model(config.model)
    restore_variables(restored, saved)
    assert all(np.isfinite(w).all() for w in restored.get_weights())
    np.testing.assert_array_equal(restored.get_layer("head").logits.kernel, good)


def _train_command(model_dir, corpus, config_path):
    return [
        sys.executable,
        "-m",
        "pipeline.train",
        "--model-dir",
        model_dir,
        "--train",
        corpus[0],
        "--eval",
        corpus[1],
        "--config",
        config_path,
        "--checkpoint-every",
        "3",
    ]


@pytest.fixture(scope="module")
def default_run(tmp_path_factory, corpus):
    """`(config_path, run, output)`: a tiny config with dropout (resuming must
    restore its random state too), the default held-out slice and refit; its
    run by `pipeline.train`, never interrupted, and what it printed."""
    directory = tmp_path_factory.mktemp("default_run")
    config_path = str(directory / "tiny.json")
    with open(config_path, "w") as f:
        json.dump(
            {
                **DEFAULT_SPLIT,
                "model": {**TINY["model"], "dropout_rate": 0.1},
                "train": {**DEFAULT_SPLIT["train"], "token_dropout": 0.1},
            },
            f,
        )
    run = str(directory / "run")
    _, output = _printed(train_main, _train_command(run, corpus, config_path)[3:])
    return config_path, run, output


@pytest.mark.slow
def test_killed_run_resumes_to_the_same_result(tmp_path, corpus, default_run):
    # Killed in the fine-tuning, then again in the refit, then let finish: in other processes than the
    # uninterrupted run's, to the digit.
    config_path, whole_dir, _ = default_run
    command = _train_command(str(tmp_path / "killed"), corpus, config_path)
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2")
    killed_dir = str(tmp_path / "killed")
    fine_tuning_steps = len(_held_out(corpus)[0]) // 32 * 2  # on the training examples not held out
    for stage in ("", REFIT_DIR):
        process = subprocess.Popen(
            command, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True
        )
        deadline = time.time() + 180
        while not os.path.exists(os.path.join(killed_dir, stage, CHECKPOINT_DIR, "ckpt-6.index")):
            assert process.poll() is None and time.time() < deadline, "no checkpoint before the run ended"
            time.sleep(0.02)
        process.send_signal(signal.SIGKILL)
        output = process.communicate()[0]
        if stage:  # resumed in the fine-tuning's last checkpoint, past its kill
            assert re.search(rf"Resuming from the checkpoint at step \d+ of {fine_tuning_steps}\.", output), output[
                -3000:
            ]
        assert not os.path.exists(os.path.join(killed_dir, "metrics.json"))

    # Resumed with another host loop (checkpoints every 5 steps, loops of 2),
    # which trains the same weights.
    resumed = subprocess.run(
        command[:-1] + ["5", "--steps-per-execution", "2"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert f"Resuming from the checkpoint at step {fine_tuning_steps} of {fine_tuning_steps}." in resumed.stdout
    refit_steps = 640 // 32 * 2  # the refit trains on all the training examples
    assert re.search(rf"Resuming from the checkpoint at step \d+ of {refit_steps}\.", resumed.stdout)
    metrics = [json.load(open(os.path.join(d, "metrics.json"))) for d in (killed_dir, whole_dir)]
    # Every epoch's loss is kept; the one a kill cut averages the steps after the resume.
    losses = [(report.pop("train_loss_by_epoch"), report["refit"].pop("train_loss_by_epoch")) for report in metrics]
    assert metrics[0] == metrics[1]
    for killed, whole in zip(*losses):  # the fine-tuning's (2 epochs), then the refit's (as many as kept)
        assert killed.keys() == whole.keys() and "1" in whole and len(losses[0][0]) == 2
        assert killed["1"] != whole["1"]
        assert all(killed[epoch] == whole[epoch] for epoch in whole if epoch != "1")
    # The refit, what the export serves, is the uninterrupted run's to the digit.
    for resumed_weights, whole_weights in zip(*(restore_model(d)[0].get_weights() for d in (killed_dir, whole_dir))):
        np.testing.assert_array_equal(resumed_weights, whole_weights)
    assert os.path.isdir(os.path.join(killed_dir, "export", "1"))


@pytest.mark.slow
def test_by_default_a_slice_of_the_training_files_keeps_the_epoch_the_refit_trains_on_all_and_eval_only_scores(
    tmp_path, corpus, default_run
):
    import tensorflow_text  # noqa: F401 (the export's tokenizer ops)

    from pipeline.export import latest_export

    config_path, run, output = default_run
    config = Config.load(config_path)
    with open(os.path.join(run, "metrics.json")) as f:
        report = json.load(f)
    epoch_losses = [
        float(loss) for loss in re.findall(r"^validation accuracy .*, loss ([0-9.]+)$", output, re.MULTILINE)
    ]
    kept_examples, held_out = _held_out(corpus)
    # A tenth of the distinct texts, with every copy of them (the demo's sentences repeat).
    assert len(held_out) + len(kept_examples) == 640 and not set(held_out.texts) & set(kept_examples.texts)
    assert report["validation"]["examples"] == len(held_out) == 63 and report["examples"] == 200
    assert report["refit"]["examples"] == 640
    _, tokenizer, names = load_run(run)
    held_out_model, refit = restore_model(run, refit=False)[0], restore_model(run)[0]

    def accuracy(model, examples):
        predicted = np.asarray(names)[np.argmax(model(tokenize(tokenizer, examples.texts)), axis=-1)]
        return np.mean(predicted == np.asarray(examples.labels))

    # The held-out examples kept the epoch of their lowest loss and give the validation scores;
    # the evaluation files score the export, the refit.
    held_out_loss = log_loss(
        [names.index(label) for label in held_out.labels], held_out_model(tokenize(tokenizer, held_out.texts))
    )
    assert len(epoch_losses) == 2 and held_out_loss == pytest.approx(min(epoch_losses), abs=1e-4)
    with open(os.path.join(run, "best_epoch.json")) as f:
        assert json.load(f) == {
            "epoch": 1 + epoch_losses.index(min(epoch_losses)),
            "score": pytest.approx(-held_out_loss, rel=1e-5),
        }
    assert report["validation"]["loss"] == pytest.approx(held_out_loss, rel=1e-5)
    assert report["validation"]["accuracy"] == pytest.approx(accuracy(held_out_model, held_out))
    examples = read_examples(corpus[1])
    assert report["accuracy"] == pytest.approx(accuracy(refit, examples))
    served = (
        tf.saved_model.load(latest_export(os.path.join(run, "export")))
        .signatures["serving_default"](text=tf.constant(examples.texts))["probabilities"]
        .numpy()
    )
    np.testing.assert_allclose(served, refit(tokenize(tokenizer, examples.texts)), atol=1e-5)
    # The evaluation files choose nothing and are never trained on: with their labels
    # scrambled, the same models, other scores.
    scrambled = str(tmp_path / "scrambled.csv")
    with open(scrambled, "w", encoding="utf-8", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(["text", "label"])
        writer.writerows(zip(examples.texts, examples.labels[1:] + examples.labels[:1]))
    other = str(tmp_path / "other")
    # As metrics.json holds it (keys as strings), to compare with the run's.
    other_report = json.loads(json.dumps(train_and_evaluate(config, other, corpus[0], scrambled, export=False)))
    for refit_flag in (False, True):
        for ours, theirs in zip(
            restore_model(run, refit=refit_flag)[0].get_weights(),
            restore_model(other, refit=refit_flag)[0].get_weights(),
        ):
            np.testing.assert_array_equal(ours, theirs)
    assert other_report["validation"] == report["validation"] and other_report["accuracy"] != report["accuracy"]
    # The refit is a run on the training files in their order with the run's vocabulary, up to the kept epoch.
    recipe = train_and_evaluate(
        override(config, {"train": {"validation_split": 0.0, "refit": False, "keep_best_epoch": False}}),
        str(tmp_path / "recipe"),
        *corpus,
        export=False,
        vocabulary_from=run,
    )
    kept_epochs = report["refit"]["epochs"]
    assert report["refit"]["train_loss_by_epoch"] == {
        str(epoch): loss for epoch, loss in recipe["train_loss_by_epoch"].items() if epoch <= kept_epochs
    }


@pytest.mark.slow
def test_refit_without_a_held_out_slice_trains_again_on_train_and_eval_up_to_the_kept_epoch(tmp_path, corpus):
    import tensorflow_text  # noqa: F401 (the export's tokenizer ops)

    from pipeline.export import latest_export

    run = str(tmp_path / "run")
    first = train_and_evaluate(_config(), run, *corpus, export=False)
    # A finished run is refit by starting it again with the refit on; had it kept its last epoch, the refit
    # trains both.
    with open(os.path.join(run, "best_epoch.json"), "w") as f:
        json.dump({"epoch": 2, "score": first["accuracy"]}, f)
    config = _config(refit=True)
    report = train_and_evaluate(config, run, *corpus)
    assert load_run(run)[0].train.refit
    assert {key: report["refit"][key] for key in ("epochs", "examples")} == {"epochs": 2, "examples": 840}
    # The report scores the model kept on the evaluation files, not the refit, which trained on them.
    examples = read_examples(corpus[1])
    _, tokenizer, names = load_run(run)
    held_out, refit = restore_model(run, refit=False)[0], restore_model(run)[0]
    ids = tokenize(tokenizer, examples.texts)
    predicted = np.asarray(names)[np.argmax(held_out(ids), axis=-1)]
    assert np.mean(predicted == np.asarray(examples.labels)) == pytest.approx(report["accuracy"])
    assert "validation" not in report
    # The refit is, to the digit, a run on the training and evaluation files with the run's vocabulary.
    recipe = train_and_evaluate(
        _config(keep_best_epoch=False),
        str(tmp_path / "recipe"),
        ",".join(corpus),
        corpus[1],
        export=False,
        vocabulary_from=run,
    )
    for value, expected in zip(refit.get_weights(), restore_model(str(tmp_path / "recipe"))[0].get_weights()):
        np.testing.assert_array_equal(value, expected)
    assert report["refit"]["train_loss_by_epoch"] == recipe["train_loss_by_epoch"]
    # The export serves the refit.
    served = (
        tf.saved_model.load(latest_export(os.path.join(run, "export")))
        .signatures["serving_default"](text=tf.constant(examples.texts))["probabilities"]
        .numpy()
    )
    np.testing.assert_allclose(served, refit(ids), atol=1e-5)
    assert np.abs(served - held_out(ids)).max() > 0.01
    # Had the run kept its first epoch, the refit stops after it: with the run's schedule, still spanning
    # two, the recipe's first epoch; with one planned for the kept epoch (--refit-schedule kept), a
    # one-epoch recipe's.
    with open(os.path.join(run, "best_epoch.json"), "w") as f:
        json.dump({"epoch": 1, "score": report["accuracy"]}, f)
    shutil.rmtree(os.path.join(run, REFIT_DIR))
    planned = str(tmp_path / "planned")  # the same run, had it been started with the other schedule
    shutil.copytree(run, planned)
    with open(os.path.join(planned, "config.json")) as f:
        saved = json.load(f)
    saved["train"]["refit_schedule"] = "kept"
    with open(os.path.join(planned, "config.json"), "w") as f:
        json.dump(saved, f)
    again = train_and_evaluate(config, run, *corpus, export=False)
    assert again["refit"]["train_loss_by_epoch"] == {1: recipe["train_loss_by_epoch"][1]}
    assert tf.train.latest_checkpoint(os.path.join(run, REFIT_DIR, CHECKPOINT_DIR)).endswith("ckpt-26")
    assert again["confusion_matrix"] == report["confusion_matrix"]
    kept = train_and_evaluate(_config(refit=True, refit_schedule="kept"), planned, *corpus, export=False)
    one_epoch = train_and_evaluate(
        _config(keep_best_epoch=False, epochs=1),
        str(tmp_path / "one_epoch"),
        ",".join(corpus),
        corpus[1],
        export=False,
        vocabulary_from=run,
    )
    assert kept["refit"]["train_loss_by_epoch"] == one_epoch["train_loss_by_epoch"]
    assert kept["refit"]["train_loss_by_epoch"] != again["refit"]["train_loss_by_epoch"]


def _start_workers(model_dir, corpus, config_path):
    """Two `pipeline.train` processes of one MultiWorkerMirroredStrategy cluster on
    127.0.0.1; each writes its output to `model_dir` + `.worker<index>.log`."""
    cluster = {"worker": [f"127.0.0.1:{port}" for port in free_ports(2)]}
    workers = []
    for index in range(2):
        with open(f"{model_dir}.worker{index}.log", "w") as log:  # the child keeps its own handle
            workers.append(
                subprocess.Popen(
                    _train_command(model_dir, corpus, config_path),
                    cwd=ROOT,
                    stdout=log,
                    stderr=subprocess.STDOUT,
                    env=dict(
                        os.environ,
                        TF_CPP_MIN_LOG_LEVEL="2",
                        TF_CONFIG=json.dumps({"cluster": cluster, "task": {"type": "worker", "index": index}}),
                    ),
                )
            )
        workers[-1].log = log.name
    return workers


def _finish(workers, timeout=300):
    """The workers' outputs once all have succeeded. When one fails, the others
    would wait for it forever: they are stopped, and its output is the error."""
    deadline = time.time() + timeout
    while any(worker.poll() is None for worker in workers):
        if any(worker.returncode for worker in workers) or time.time() > deadline:
            for worker in workers:
                worker.kill()
                worker.wait()
            break
        time.sleep(0.1)
    outputs = []
    for worker in workers:
        with open(worker.log) as f:
            outputs.append(f.read())
    # Every failed worker's output: the one that failed first, not only one stopped here.
    assert all(worker.returncode == 0 for worker in workers), "\n".join(
        f"worker {index} (exit status {worker.returncode}):\n{output[-3000:]}"
        for index, (worker, output) in enumerate(zip(workers, outputs))
        if worker.returncode
    )
    return outputs


@pytest.mark.slow
def test_two_workers_kill_and_resume_to_the_result_of_an_uninterrupted_cluster(tmp_path, corpus):
    config_path = str(tmp_path / "tiny.json")
    # The default held-out slice (both workers hold out the same examples); the refit, another training
    # as the first is, has its kill and resume tested in one process (test_killed_run_resumes_to_the_same_result).
    with open(config_path, "w") as f:
        json.dump(
            {
                **DEFAULT_SPLIT,
                "model": {**TINY["model"], "dropout_rate": 0.1},
                "train": {**DEFAULT_SPLIT["train"], "refit": False},
            },
            f,
        )
    whole_dir, killed_dir = str(tmp_path / "whole"), str(tmp_path / "killed")
    outputs = _finish(_start_workers(whole_dir, corpus, config_path))
    assert "2 replica(s) of CollectiveAllReduceStrategy" in outputs[0]  # MultiWorkerMirroredStrategy
    # Each worker evaluates its half of the evaluation set; both report all of it.
    summaries = [output[output.index("class     precision") :].split("\nExported")[0].strip() for output in outputs]
    assert summaries[0] == summaries[1]
    whole = json.load(open(os.path.join(whole_dir, "metrics.json")))
    assert whole["examples"] == 200
    assert whole["train_loss_by_epoch"]["2"] < whole["train_loss_by_epoch"]["1"]
    # The chief alone wrote the run's files; the other worker's folder is gone.
    assert sorted(os.listdir(whole_dir)) == sorted(
        [
            "best.weights.h5",
            "best_epoch.json",
            "checkpoints",
            "config.json",
            "epoch_losses.json",
            "export",
            "labels.json",
            "logs",
            "metrics.json",
            "tokenizer.json",
            "vocab.txt",
        ]
    )
    assert whole["validation"]["examples"] == len(_held_out(corpus)[1])
    assert os.listdir(os.path.join(whole_dir, "export")) == ["1"]

    workers = _start_workers(killed_dir, corpus, config_path)
    deadline = time.time() + 120
    while not os.path.exists(os.path.join(killed_dir, CHECKPOINT_DIR, "ckpt-9.index")):
        assert all(w.poll() is None for w in workers) and time.time() < deadline, "no checkpoint in time"
        time.sleep(0.02)
    for worker in workers:
        worker.send_signal(signal.SIGKILL)
        worker.wait()
    assert not os.path.exists(os.path.join(killed_dir, "metrics.json"))
    outputs = _finish(_start_workers(killed_dir, corpus, config_path))
    assert all("Resuming from the checkpoint at step" in output for output in outputs)
    resumed = json.load(open(os.path.join(killed_dir, "metrics.json")))
    losses = [report.pop("train_loss_by_epoch") for report in (whole, resumed)]
    assert resumed == whole
    assert losses[0].keys() == losses[1].keys() == {"1", "2"}  # the cut epoch: the steps after the resume
    assert losses[0]["2"] == losses[1]["2"]
    assert not os.path.exists(os.path.join(killed_dir, "workers"))


@pytest.mark.slow
def test_tpu_flag_without_a_tpu_fails_clearly(tmp_path):
    result = subprocess.run(
        [sys.executable, "-m", "pipeline.train", "--tpu", "--model-dir", str(tmp_path)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2"),
    )
    assert result.returncode != 0
    assert "error: --tpu local: no TPU could be reached" in result.stderr
    assert "Traceback" not in result.stderr


@pytest.mark.slow
def test_missing_eval_files_and_negative_pretraining_fail_before_any_work(tmp_path, corpus):
    with pytest.raises(ValueError, match="--eval is required with --train"):
        train_and_evaluate(Config(), str(tmp_path / "run"), corpus[0], None)
    with pytest.raises(ValueError, match="train.pretrain_epochs must be 0 .none. or more, got -1"):
        train_and_evaluate(Config.from_dict({"train": {"pretrain_epochs": -1}}), str(tmp_path / "run"), *corpus)
    # From the command line too, as a message, not a traceback.
    with pytest.raises(SystemExit, match="error: train.members must be 1 or more, got 0"):
        train_main(["--model-dir", str(tmp_path / "run"), "--train", corpus[0], "--eval", corpus[1], "--members", "0"])
    with pytest.raises(SystemExit, match=r"error: train.validation_split must be at least 0 and under 1, got 1.0"):
        train_main(
            ["--model-dir", str(tmp_path / "run"), "--train", corpus[0], "--eval", corpus[1], "--validation-split", "1"]
        )
    with pytest.raises(SystemExit, match="error: train.refit_schedule must be run or kept, got 'last'"):
        train_main(
            [
                "--model-dir",
                str(tmp_path / "run"),
                "--train",
                corpus[0],
                "--eval",
                corpus[1],
                "--refit-schedule",
                "last",
            ]
        )
    with pytest.raises(
        SystemExit,
        match="error: train.best_metric must be one of loss, accuracy, macro_f1 for data.task classification, got 'f1'",
    ):
        train_main(
            ["--model-dir", str(tmp_path / "run"), "--train", corpus[0], "--eval", corpus[1], "--best-metric", "f1"]
        )
    assert not os.path.exists(tmp_path / "run")


@pytest.mark.slow
def test_a_saved_config_lacking_fields_is_refused_naming_them(tmp_path, corpus):
    model_dir = str(tmp_path / "other_version")
    os.makedirs(model_dir)
    saved = Config.from_dict(TINY).to_dict()
    del saved["model"]["head_shared_kernel"], saved["train"]["refit"]
    json.dump(saved, open(os.path.join(model_dir, "config.json"), "w"))
    message = r"config.json lacks model.head_shared_kernel, train.refit: saved by another version"
    with pytest.raises(ValueError, match=message):
        load_run(model_dir)
    with pytest.raises(ValueError, match=message):  # before any work
        train_and_evaluate(Config.from_dict(TINY), model_dir, *corpus, export=False)
    assert os.listdir(model_dir) == ["config.json"]


def test_class_weights_scale_each_examples_loss_by_its_label(tmp_path):
    config = _config()
    model = build_model(dataclasses.replace(config.model, vocabulary_size=30, num_classes=3))
    split = _random_split(6)
    trainer = Trainer(
        model,
        build_optimizer(config.optimizer, 6),
        tf.distribute.get_strategy(),
        config.train,
        config.optimizer,
        str(tmp_path),
        class_weights=np.array([1.0, 3.0, 0.5], "float32"),
    )
    per_example, _, _ = trainer._forward_backward((split.ids, split.labels))
    plain = keras.losses.sparse_categorical_crossentropy(split.labels, model(split.ids, training=True))
    np.testing.assert_allclose(per_example, plain * np.array([1.0, 3.0, 0.5] * 2), rtol=1e-5)


@pytest.mark.slow
def test_class_weight_is_said_at_the_start_and_saved(tmp_path, corpus, capsys):
    train_and_evaluate(
        _config(epochs=1, class_weight="negative:1,positive:2.5"), str(tmp_path / "run"), *corpus, export=False
    )
    assert "class weights (negative:1,positive:2.5): negative 1, positive 2.5" in capsys.readouterr().out
    with open(tmp_path / "run" / "config.json") as f:
        assert json.load(f)["train"]["class_weight"] == "negative:1,positive:2.5"
    with pytest.raises(ValueError, match="names class 'neutral', which the training data does not have"):
        train_and_evaluate(_config(epochs=1, class_weight="neutral:2"), str(tmp_path / "other"), *corpus)


@pytest.mark.slow
def test_evaluation_texts_that_repeat_training_texts_are_counted_and_named(tmp_path, corpus, capsys, one_epoch):
    with open(corpus[0]) as f:
        lines = f.read().splitlines()
    evaluation = tmp_path / "eval.csv"
    evaluation.write_text("\n".join([lines[0], *lines[1:21], *open(corpus[1]).read().splitlines()[1:31]]) + "\n")
    report = train_and_evaluate(_config(epochs=1), str(tmp_path / "run"), corpus[0], str(evaluation), export=False)
    assert report["evaluation_texts_in_training"] == 20
    assert json.load(open(tmp_path / "run" / "metrics.json"))["evaluation_texts_in_training"] == 20
    assert (
        f"Warning: 20 of the 50 evaluation examples (40.0%) repeat a training text (the first: {evaluation}:2, "
        f"as {corpus[0]}:2)" in capsys.readouterr().out
    )
    _, clean, output = one_epoch
    assert clean["evaluation_texts_in_training"] == 0 and "repeat a training text" not in output


@pytest.mark.slow
def test_chinese_training_texts_are_cut_into_words_said_saved_and_resumed(tmp_path, capsys, one_epoch):
    rows = [("这个手机很好用，电池也不错", "positive"), ("屏幕太差了，电池也不行", "negative")] * 40
    chinese = tmp_path / "chinese.csv"
    with open(chinese, "w", newline="", encoding="utf-8") as f:
        csv.writer(f).writerows([("text", "label"), *rows])
    run = str(tmp_path / "run")
    train_and_evaluate(_config(epochs=1), run, str(chinese), str(chinese), export=False)
    assert "(Chinese as words)" in capsys.readouterr().out
    _, tokenizer, _ = load_run(run)
    ids = tokenizer(tf.constant(["手机电池"]))[0]
    assert [t.decode() for t in tokenizer.tokens(ids).numpy()[:3]] == ["[CLS]", "手机", "电池"]
    # config.json holds the choice "auto" resolved to; the same command resumes.
    assert Config.load(os.path.join(run, "config.json")).data.chinese_words == "on"
    train_and_evaluate(_config(epochs=1), run, str(chinese), str(chinese), export=False)
    assert "Resuming from the checkpoint at step 2 of 2" in capsys.readouterr().out
    # English training texts stay as they were.
    english, _, output = one_epoch
    assert Config.load(os.path.join(english, "config.json")).data.chinese_words == "off"
    assert "(Chinese as words)" not in output
