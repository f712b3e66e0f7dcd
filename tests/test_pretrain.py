import dataclasses
import json
import os
import random
import shutil

import numpy as np
import pytest
import tensorflow as tf

from conftest import TINY_MODEL, WORD_TOKENS
from pipeline.config import Config, PretrainConfig, override
from pipeline.dataset import distribute
from pipeline.demo_corpus import generate, write_demo_corpus
from pipeline.export import main as export_main
from pipeline.layout import CHECKPOINT_DIR
from pipeline.masking import mask_tokens, masked_lm_dataset, swap_segments
from pipeline.model import build_model, build_pretraining_model
from pipeline.model_dir import HOST_LOOP_FIELDS, restore_variables
from pipeline.pretrain import UNREAD_FIELDS, finished_pretraining, initialize_from, pretrain
from pipeline.pretrain import main as pretrain_main
from pipeline.text_stream import sequences_of
from pipeline.tokenizer import CLS_ID, MASK_ID, PAD_ID, SEP_ID, Tokenizer
from pipeline.train import main as train_main
from pipeline.train import train_and_evaluate
from pipeline.trainer import TrainingError

TINY = {
    "model": {**TINY_MODEL, "max_length": 24},
    "data": WORD_TOKENS,
    "optimizer": {"learning_rate": 3e-3},
    # The held-out slice and the refit (on by default) are off but in the test of members' refits.
    "train": {
        "batch_size": 32,
        "epochs": 3,
        "checkpoint_every": 50,
        "pretrain_epochs": 0,
        "validation_split": 0.0,
        "refit": False,
    },
    "pretrain": {"max_predictions": 5, "learning_rate": 3e-3, "batch_size": 32, "min_steps": 0},
}


@pytest.fixture(scope="module")
def pretrained(tmp_path_factory):
    directory = tmp_path_factory.mktemp("pretrain")
    texts = directory / "docs.txt"
    texts.write_text("\n".join(text for text, _ in generate(1600, seed=5)) + "\n", encoding="utf-8")
    # Masked-LM learns slowly: a higher rate and five epochs (~250 steps) for a clear signal.
    config = Config.from_dict(
        {**TINY, "train": {**TINY["train"], "epochs": 5}, "pretrain": {**TINY["pretrain"], "learning_rate": 1e-2}}
    )
    report = pretrain(config, str(directory / "run"), str(texts))
    return str(directory / "run"), report


def test_masking_statistics_match_bert():
    texts = [text for text, _ in generate(3000, seed=2)]
    tokenizer = Tokenizer.learn(texts, kind="wordpiece", vocabulary_size=400, min_count=1, max_length=32)
    tf.random.set_seed(0)
    ids = tokenizer(tf.constant(texts)).numpy()
    features, targets, weights = mask_tokens(
        tokenizer.word_ids(tf.constant(texts)), len(tokenizer.vocabulary), 32, PretrainConfig(max_predictions=16)
    )
    masked, positions = features["token_ids"].numpy(), features["masked_positions"].numpy()
    real = weights.numpy() > 0
    selectable = ((ids != PAD_ID) & (ids != CLS_ID)).sum()
    assert abs(real.sum() / selectable - 0.15) < 0.02
    rows = np.repeat(np.arange(len(texts))[:, None], 16, axis=1)[real]
    chosen_inputs, chosen_originals = masked[rows, positions[real]], targets.numpy()[real]
    np.testing.assert_array_equal(chosen_originals, ids[rows, positions[real]])
    as_mask = np.mean(chosen_inputs == MASK_ID)
    unchanged = np.mean(chosen_inputs == chosen_originals)
    assert abs(as_mask - 0.8) < 0.03 and abs(unchanged - 0.1) < 0.03, (as_mask, unchanged)
    assert abs(1 - as_mask - unchanged - 0.1) < 0.03  # random replacements
    # Positions not chosen are left as they were.
    untouched = np.ones_like(ids, bool)
    untouched[rows, positions[real]] = False
    np.testing.assert_array_equal(masked[untouched], ids[untouched])


def test_whole_word_masking_takes_every_piece_of_a_word():
    texts = [text for text, _ in generate(500, seed=3)]
    # A small vocabulary splits most words into several pieces.
    tokenizer = Tokenizer.learn(texts, kind="wordpiece", vocabulary_size=60, min_count=1, max_length=48)
    tf.random.set_seed(1)
    features, _, weights = mask_tokens(
        tokenizer.word_ids(tf.constant(texts)),
        len(tokenizer.vocabulary),
        48,
        PretrainConfig(max_predictions=40, whole_word_masking=True),
    )
    ids = tokenizer(tf.constant(texts)).numpy()
    continuation = np.vectorize(lambda i: tokenizer.vocabulary[i].startswith("##"))(ids)
    checked = 0
    for row, (positions, weight) in enumerate(zip(features["masked_positions"].numpy(), weights.numpy())):
        chosen = set(positions[weight > 0].tolist())
        for position in chosen:
            if position + 1 < 48 and continuation[row, position + 1]:
                assert position + 1 in chosen  # the word's next piece is chosen too
                checked += 1
    assert checked > 50


def test_whole_word_masking_in_length_buckets_keeps_every_chosen_piece():
    # Bucketed steps carry only the slots the step's rows filled, not max_predictions.
    texts = [text for text, _ in generate(500, seed=3)]
    tokenizer = Tokenizer.learn(texts, kind="wordpiece", vocabulary_size=60, min_count=1, max_length=48)
    word_ids = tokenizer.word_ids(tf.constant(texts))
    masked = []
    for length_bucket in (0, 8):
        tf.random.set_seed(1)
        masked.append(
            mask_tokens(
                word_ids,
                len(tokenizer.vocabulary),
                48,
                PretrainConfig(max_predictions=40, whole_word_masking=True),
                length_bucket,
            )
        )
    (full, full_targets, full_weights), (cut, cut_targets, cut_weights) = masked
    slots = int(full_weights.numpy().sum(axis=1).max())
    assert cut_weights.shape == (500, slots) and 5 < slots < 40
    np.testing.assert_array_equal(cut_weights, full_weights[:, :slots])
    assert full_weights.numpy()[:, slots:].sum() == 0  # nothing chosen was cut
    np.testing.assert_array_equal(cut["masked_positions"], full["masked_positions"][:, :slots])
    np.testing.assert_array_equal(cut_targets, full_targets[:, :slots])
    length = cut["token_ids"].shape[1]
    np.testing.assert_array_equal(cut["token_ids"], full["token_ids"][:, :length])


def _steps_of(texts, **kwargs):
    """Masked-LM steps whose chosen tokens stay as they were, so token_ids
    show which texts a step holds; and each text's ids by its first word."""
    tokenizer = Tokenizer.learn(texts, kind="word", min_count=1, max_length=64)
    keep_tokens = PretrainConfig(max_predictions=8, mask_token_rate=0.0, random_token_rate=0.0)
    tf.random.set_seed(7)  # as a run's configure_runtime does: the masking's draws follow from it
    dataset = masked_lm_dataset(
        sequences_of(texts, tokenizer), len(tokenizer.vocabulary), 64, 32, keep_tokens, seed=7, **kwargs
    )
    return dataset, {row[1]: (i, row) for i, row in enumerate(tokenizer(tf.constant(texts)).numpy().tolist())}


def _varied_texts(count=640):
    rng = random.Random(0)
    # At most 63 tokens with [CLS]: each text one sequence of max_length 64.
    return [f"t{i} " + " ".join(rng.choices("abcdefgh", k=rng.randint(0, 62))) for i in range(count)]


def test_masked_lm_length_buckets_cut_only_padding_and_keep_every_text():
    texts = _varied_texts()
    dataset, index = _steps_of(texts, length_bucket=16)
    steps, seen = list(dataset), []
    assert len(steps) == 640 // 32
    for features, targets, weights in steps:
        ids, positions = features["token_ids"].numpy(), features["masked_positions"].numpy()
        for id_row in ids.tolist():
            text, full = index[id_row[1]]  # texts open with a word of their own
            assert id_row == full[: ids.shape[1]] and not any(full[ids.shape[1] :])  # only padding cut
            seen.append(text)
        longest = max(int((ids[k] != PAD_ID).sum()) for k in range(len(ids)))
        assert ids.shape == (32, min(-(-longest // 16) * 16, 64))  # the longest, rounded up
        real = weights.numpy() > 0
        assert (positions[real] < longest).all()
        np.testing.assert_array_equal(np.take_along_axis(ids, positions, 1)[real], targets.numpy()[real])
    assert sorted(seen) == list(range(640))  # each text once (640 = 20 whole steps)
    # Similar lengths share a step: far fewer positions than max_length everywhere.
    assert sum(f["token_ids"].shape[1] for f, _, _ in steps) * 32 < 0.7 * 640 * 64
    assert len({f["token_ids"].shape[1] for f, _, _ in steps}) >= 3
    again, _ = _steps_of(texts, length_bucket=16)
    resumed, _ = _steps_of(texts, length_bucket=16, skip_batches=5)
    for (first, _, _), (second, _, _) in zip(steps, again):
        np.testing.assert_array_equal(first["token_ids"], second["token_ids"])
    for first, second in zip(steps[5:], resumed):  # the same texts, masked alike
        tf.nest.map_structure(np.testing.assert_array_equal, first, second)


@pytest.mark.parametrize("length_bucket", [0, 16])
def test_masked_lm_replicas_share_the_steps_of_one_device(length_bucket, two_replicas):
    # As in classification: each step is the single-device step split between
    # the replicas, and a resumed run skips whole steps.
    texts = _varied_texts()
    single = [f["token_ids"].numpy() for f, _, _ in _steps_of(texts, length_bucket=length_bucket)[0]]
    strategy = two_replicas
    for skip in (0, 3):
        dataset = distribute(
            strategy, lambda **kwargs: _steps_of(texts, **kwargs)[0], length_bucket=length_bucket, skip_batches=skip
        )
        steps = 0
        for (features, _, _), expected in zip(dataset, single[skip:]):
            parts = [p.numpy() for p in strategy.experimental_local_results(features["token_ids"])]
            assert [p.shape for p in parts] == [(16, expected.shape[1])] * 2
            np.testing.assert_array_equal(np.concatenate(parts), expected)
            steps += 1
        assert steps == len(single) - skip


def test_loss_falls_and_beats_the_most_frequent_token(pretrained):
    _, report = pretrained
    losses = report["loss_by_epoch"]
    assert losses[5] < losses[1] - 0.5
    assert report["masked_accuracy"] > report["most_frequent_token_accuracy"] + 0.05, report


@pytest.mark.slow
def test_masked_lm_steps_hold_the_pretraining_batch_size_and_its_accuracy_a_sample_of_the_documents(
    tmp_path, monkeypatch
):
    # The accuracy: a fresh masking of the first EVALUATION_DOCUMENTS' worth of
    # steps of the epoch after the last, a shuffled sample, not the whole corpus again.
    documents = [text for text, _ in generate(320, seed=6)]
    (tmp_path / "docs.txt").write_text("\n".join(documents) + "\n", encoding="utf-8")
    monkeypatch.setattr("pipeline.pretrain.EVALUATION_DOCUMENTS", 64)
    config = Config.from_dict(
        {
            **TINY,
            "train": {**TINY["train"], "epochs": 1, "batch_size": 64},
            "pretrain": {**TINY["pretrain"], "batch_size": 16},
        }
    )
    report = pretrain(config, str(tmp_path / "run"), str(tmp_path / "docs.txt"))
    # 320 texts in steps of 16: the epoch ends at step 20 (at the classifier's 64 it would be 5).
    assert tf.train.latest_checkpoint(str(tmp_path / "run" / CHECKPOINT_DIR)).endswith("ckpt-20")
    config, tokenizer = Config.load(str(tmp_path / "run" / "config.json")), Tokenizer.load(str(tmp_path / "run"))
    steps = masked_lm_dataset(
        sequences_of(documents, tokenizer),
        len(tokenizer.vocabulary),
        config.model.max_length,
        config.pretrain.batch_size,
        config.pretrain,
        config.train.seed,
        epoch=1,
        length_bucket=config.train.length_bucket,
    )
    predictions = [int(weights.numpy().sum()) for _, _, weights in steps]
    assert len(predictions) == 20 and report["predictions"] == sum(predictions[:4]) > 0


@pytest.mark.slow
def test_classifier_starts_from_the_pretrained_weights(pretrained, tmp_path):
    run, _ = pretrained
    config = Config.load(os.path.join(run, "config.json"))
    classifier = build_model(dataclasses.replace(config.model, num_classes=2))
    initialize_from(classifier, run, config.model, Tokenizer.load(run).vocabulary)
    reference = build_pretraining_model(config.model)
    restore_variables(reference, tf.train.latest_checkpoint(os.path.join(run, CHECKPOINT_DIR)))
    trained = np.asarray(reference.get_layer("encoder").blocks[0].attention._query_dense.kernel)
    initial = np.asarray(
        build_pretraining_model(config.model).get_layer("encoder").blocks[0].attention._query_dense.kernel
    )
    assert np.abs(trained - initial).max() > 1e-3  # the reference really holds trained weights
    for name in ("embedding", "embedding_norm", "encoder"):
        for ours, theirs in zip(classifier.get_layer(name).get_weights(), reference.get_layer(name).get_weights()):
            np.testing.assert_array_equal(ours, theirs)
    # And the whole command path: the classifier takes the pre-trained vocabulary.
    corpus = write_demo_corpus(tmp_path / "corpus", train_size=320, test_size=64)
    classifier_config = Config.from_dict({**TINY, "train": {**TINY["train"], "epochs": 1}})
    report = train_and_evaluate(classifier_config, str(tmp_path / "classifier"), *corpus, export=False, init_from=run)
    assert report["examples"] == 64
    assert Tokenizer.load(str(tmp_path / "classifier")).vocabulary == Tokenizer.load(run).vocabulary


@pytest.mark.slow
def test_a_finished_pretraining_started_again_returns_its_report_and_trains_nothing(pretrained, capsys):
    # A run started again for its refit, more members or a killed
    # fine-tuning finds its pre-training done: no steps, no second masked-LM
    # evaluation, the report it wrote.
    run, report = pretrained
    config = Config.load(os.path.join(run, "config.json"))
    capsys.readouterr()
    again = pretrain(config, run, os.path.join(os.path.dirname(run), "docs.txt"))
    assert again == report
    out = capsys.readouterr().out
    assert f"The pre-training in {run} is done." in out
    assert "Resuming" not in out and "Epoch" not in out


@pytest.mark.slow
def test_settings_the_pretraining_does_not_read_leave_its_weights_as_they_are_and_it_is_shared(pretrained, tmp_path):
    run, _ = pretrained
    saved = Config.load(os.path.join(run, "config.json"))
    unread = {
        "model": {
            "num_classes": 5,
            "pooling": "mean",
            "head_shared_kernel": False,
            "head_activation": "linear",
            "target_mean": 3.0,
            "target_scale": 2.0,
            "label_log_odds": [-1.0, 0.0, 1.0, 2.0, 3.0],
        },
        "data": {"label_column": "sentiment", "label_delimiter": "|"},
        "optimizer": {"learning_rate": 0.5, "weight_averaging": 0.5},
        "train": {
            "batch_size": 8,
            "token_dropout": 0.3,
            "best_metric": "macro_f1",
            "keep_best_epoch": False,
            "pretrain_epochs": 9,
            "members": 4,
            "refit": True,
            "refit_schedule": "kept",
            "validation_split": 0.3,
            "class_weight": "balanced",
            "huber_delta": 1.0,
        },
    }
    assert {section: tuple(fields) for section, fields in unread.items()} == UNREAD_FIELDS
    # Nor does its host loop change what it computes.
    host_loop = {"train": {"steps_per_execution": 3, "checkpoint_every": 5}}
    assert {section: set(fields) for section, fields in host_loop.items()} == HOST_LOOP_FIELDS
    assert saved.train.steps_per_execution != 3 and saved.train.checkpoint_every != 5
    other = str(tmp_path / "other")
    del unread["train"]["huber_delta"]  # a regression's alone, and class_weight a classification's
    pretrain(override(override(saved, unread), host_loop), other, os.path.join(os.path.dirname(run), "docs.txt"))
    weights = []
    for directory in (run, other):
        model = build_pretraining_model(Config.load(os.path.join(directory, "config.json")).model)
        restore_variables(model, tf.train.latest_checkpoint(os.path.join(directory, CHECKPOINT_DIR)))
        weights.append(model.get_weights())
    for ours, theirs in zip(*weights):
        np.testing.assert_array_equal(ours, theirs)
    # So a classifier whose own pre-training would differ in those alone
    # starts from the finished one; one that would train otherwise does not.
    vocabulary = Tokenizer.load(run).vocabulary
    classifier = override(
        saved,
        {
            **unread,
            "train": {**unread["train"], **host_loop["train"], "pretrain_epochs": saved.train.epochs, "epochs": 2},
        },
    )
    assert finished_pretraining(classifier, vocabulary, [str(tmp_path), run]) == run
    for differing in (
        {"optimizer": {"warmup_fraction": 0.2}},
        {"model": {"dropout_rate": 0.1}},
        {"train": {"pretrain_epochs": saved.train.epochs + 1}},
        {"pretrain": {"learning_rate": 1e-3}},
        {"pretrain": {"batch_size": 16}},
    ):
        assert finished_pretraining(override(classifier, differing), vocabulary, [run]) is None, differing
    assert finished_pretraining(classifier, list(reversed(vocabulary)), [run]) is None


@pytest.mark.slow
def test_a_diverging_masked_lm_names_its_own_learning_rate(tmp_path):
    # Masked-LM trains at pretrain.learning_rate, not optimizer's: the message must
    # send the user to the field that set the rate that diverged.
    texts = tmp_path / "docs.txt"
    texts.write_text("\n".join(text for text, _ in generate(400, seed=5)) + "\n", encoding="utf-8")
    config = Config.from_dict(
        {
            **TINY,
            "optimizer": {**TINY["optimizer"], "clip_norm": 1e30},
            "train": {**TINY["train"], "epochs": 2},
            "pretrain": {**TINY["pretrain"], "learning_rate": 1e20},
        }
    )
    with pytest.raises(
        TrainingError,
        match=r"loss became nan .* Lower pretrain\.learning_rate \(now 1e\+20\) "
        r"or optimizer\.clip_norm \(now 1e\+30\)",
    ):
        pretrain(config, str(tmp_path / "run"), str(texts))


@pytest.fixture(scope="module")
def one_command(tmp_path_factory):
    """`(corpus, config, run, report, member)`: a run pre-trained for 2 epochs
    then fine-tuned, in one command, and the README's recipe of another member
    (`--init-from` its pre-training, the next seed) in `member`."""
    directory = tmp_path_factory.mktemp("one_command")
    corpus = write_demo_corpus(directory / "corpus", train_size=320, test_size=64)
    config = Config.from_dict({**TINY, "train": {**TINY["train"], "epochs": 1, "pretrain_epochs": 2}})
    run, member = str(directory / "run"), str(directory / "member")
    report = train_and_evaluate(config, run, *corpus, export=False)
    train_and_evaluate(
        override(config, {"train": {"pretrain_epochs": 0, "seed": config.train.seed + 1}}),
        member,
        *corpus,
        export=False,
        init_from=os.path.join(run, "pretrain"),
    )
    return corpus, config, run, report, member


@pytest.mark.slow
def test_pretrain_epochs_runs_pretrain_then_init_from_in_one_command(tmp_path, one_command):
    corpus, config, run, one, member = one_command
    with open(os.path.join(run, "pretrain", "pretrain_metrics.json")) as f:
        assert len(json.load(f)["loss_by_epoch"]) == 2
    pretrained = Tokenizer.load(os.path.join(run, "pretrain"))
    assert Tokenizer.load(run).vocabulary == pretrained.vocabulary
    # The same run as the two commands, to the last digit: with the same
    # config, `pipeline.pretrain` pre-trains for train.pretrain_epochs too.
    config.save(str(tmp_path / "config.json"))
    pretrain_main(
        ["--text", corpus[0], "--model-dir", str(tmp_path / "pre"), "--config", str(tmp_path / "config.json")]
    )
    with open(tmp_path / "pre" / "pretrain_metrics.json") as f:
        assert len(json.load(f)["loss_by_epoch"]) == 2
    two = train_and_evaluate(
        override(config, {"train": {"pretrain_epochs": 0}}),
        str(tmp_path / "two"),
        *corpus,
        export=False,
        init_from=str(tmp_path / "pre"),
    )
    assert one["train_loss_by_epoch"] == two["train_loss_by_epoch"]
    assert one["confusion_matrix"] == two["confusion_matrix"]
    # Started again, the run finds both stages done and ends where it ended.
    again = train_and_evaluate(config, run, *corpus, export=False)
    assert again["confusion_matrix"] == one["confusion_matrix"]
    assert again["train_loss_by_epoch"] == one["train_loss_by_epoch"]  # kept, not emptied
    with open(os.path.join(run, "pretrain", "pretrain_metrics.json")) as f:
        assert len(json.load(f)["loss_by_epoch"]) == 2
    with pytest.raises(ValueError, match="train.pretrain_epochs is 2: add --pretrain-epochs 0"):
        train_and_evaluate(config, str(tmp_path / "three"), *corpus, init_from=str(tmp_path / "pre"))
    # More members start from the run's own pre-training (other seeds) and
    # export with it as one ensemble: they share its vocabulary.
    with open(os.path.join(member, "metrics.json")) as f:
        assert json.load(f)["train_loss_by_epoch"] != {str(k): v for k, v in one["train_loss_by_epoch"].items()}
    export_main(["--model-dir", run, member, "--export-dir", str(tmp_path / "ensemble")])
    assert os.path.exists(tmp_path / "ensemble" / "1" / "saved_model.pb")
    # A config without pre-training gives pipeline.pretrain no length: it asks for one.
    override(config, {"train": {"pretrain_epochs": 0}}).save(str(tmp_path / "scratch.json"))
    with pytest.raises(SystemExit, match=r"error: train.pretrain_epochs is 0 .* give --epochs"):
        pretrain_main(
            ["--text", corpus[0], "--model-dir", str(tmp_path / "four"), "--config", str(tmp_path / "scratch.json")]
        )
    assert not os.path.exists(tmp_path / "four")  # refused before any work
    # An ensemble member's --vocabulary-from is the pre-training's vocabulary too.
    texts = [text for text, _ in generate(200, seed=9)]
    other = Tokenizer.learn(texts, kind="word", vocabulary_size=40, min_count=1, max_length=24)
    os.makedirs(tmp_path / "vocabulary")
    other.save(str(tmp_path / "vocabulary"))
    train_and_evaluate(
        config, str(tmp_path / "member"), *corpus, export=False, vocabulary_from=str(tmp_path / "vocabulary")
    )
    for directory in ("member", os.path.join("member", "pretrain")):
        assert Tokenizer.load(str(tmp_path / directory)).vocabulary == other.vocabulary


@pytest.mark.slow
def test_members_fine_tune_from_the_one_pretraining_export_their_ensemble_and_grow_on_resume(tmp_path, one_command):
    import tensorflow_text  # noqa: F401 (the export's tokenizer ops)

    from pipeline.export import latest_export
    from pipeline.model_dir import restore_model
    from pipeline.readers import read_examples

    corpus, config, finished, single, recipe = one_command
    config = override(config, {"train": {"members": 2}})
    # A finished single run grows into the ensemble when started again with
    # more members: member 1 is that run, found done; its pre-training too.
    run = str(tmp_path / "run")
    shutil.copytree(finished, run)
    report = train_and_evaluate(config, run, *corpus)
    seed = config.train.seed
    member = os.path.join(run, "members", "2")
    assert [(m["model_dir"], m["seed"]) for m in report["members"]] == [(run, seed), (member, seed + 1)]
    assert report["members"][0]["accuracy"] == single["accuracy"]
    assert report["train_loss_by_epoch"] == single["train_loss_by_epoch"]  # not trained again
    assert Config.load(os.path.join(run, "config.json")).train.members == 2
    assert not os.path.exists(os.path.join(member, "pretrain"))  # one pre-training for all
    # Member 2 is the README's recipe (--init-from the run's pre-training, the next seed), to the digit.
    with open(os.path.join(member, "metrics.json")) as f:
        member_report = json.load(f)
    with open(os.path.join(recipe, "metrics.json")) as f:
        recipe_report = json.load(f)
    assert member_report["confusion_matrix"] == recipe_report["confusion_matrix"]
    assert member_report["train_loss_by_epoch"] == recipe_report["train_loss_by_epoch"]
    assert report["members"][1]["accuracy"] == recipe_report["accuracy"]
    # The export serves the mean of the two members, and the report scores just that.
    examples = read_examples(corpus[1])
    served = tf.saved_model.load(latest_export(os.path.join(run, "export"))).signatures["serving_default"](
        text=tf.constant(examples.texts)
    )
    members = [restore_model(directory) for directory in (run, member)]
    ids = members[0][1](tf.constant(examples.texts))
    each = [np.asarray(model(ids)) for model, _, _ in members]
    np.testing.assert_allclose(served["probabilities"].numpy(), (each[0] + each[1]) / 2, atol=1e-5)
    labels = [label.decode() for label in served["label"].numpy()]
    assert np.mean([a == b for a, b in zip(labels, examples.labels)]) == pytest.approx(report["accuracy"])
    # Exported again from its directory, it keeps its members.
    export_main(["--model-dir", run])
    again = tf.saved_model.load(os.path.join(run, "export", "2")).signatures["serving_default"](
        text=tf.constant(examples.texts)
    )
    np.testing.assert_allclose(again["probabilities"].numpy(), served["probabilities"].numpy(), atol=1e-6)
    # Started again, it finds every member done and reports the same ensemble.
    again = train_and_evaluate(config, run, *corpus, export=False)
    assert again["members"] == report["members"]
    assert again["confusion_matrix"] == report["confusion_matrix"]
    # With one member again, it is the single run once more, and exports it alone.
    alone = train_and_evaluate(override(config, {"train": {"members": 1}}), run, *corpus)
    assert "members" not in alone and alone["confusion_matrix"] == single["confusion_matrix"]
    served = tf.saved_model.load(latest_export(os.path.join(run, "export"))).signatures["serving_default"](
        text=tf.constant(examples.texts)
    )
    np.testing.assert_allclose(served["probabilities"].numpy(), each[0], atol=1e-5)


@pytest.mark.slow
def test_mismatches_are_clear_errors(pretrained):
    run, _ = pretrained
    config = Config.load(os.path.join(run, "config.json")).model
    wider = dataclasses.replace(config, hidden_size=64, num_classes=2)
    with pytest.raises(ValueError, match=r"does not fit this model \(hidden_size: pre-trained 32, here 64\)"):
        initialize_from(build_model(wider), run, wider, Tokenizer.load(run).vocabulary)
    other = list(Tokenizer.load(run).vocabulary)
    other[7], other[8] = other[8], other[7]
    same = dataclasses.replace(config, num_classes=2)
    with pytest.raises(ValueError, match="its vocabulary differs"):
        initialize_from(build_model(same), run, same, other)
    # Refused as the command line is read, as a message.
    with pytest.raises(SystemExit, match="error: pretrain.batch_size must be 1 or more, got 0"):
        pretrain_main(
            [
                "--text",
                os.path.join(os.path.dirname(run), "docs.txt"),
                "--model-dir",
                os.path.join(os.path.dirname(run), "never"),
                "--batch-size",
                "0",
            ]
        )
    assert not os.path.exists(os.path.join(os.path.dirname(run), "never"))


def test_sentence_order_cuts_documents_into_two_halves_and_swaps_half_of_them():
    texts = [text for text, _ in generate(3000, seed=4)] + ["alone", ""]
    tokenizer = Tokenizer.learn(texts, kind="wordpiece", vocabulary_size=300, min_count=1, max_length=12)
    tf.random.set_seed(3)
    ordered, swapped, weights = swap_segments(tokenizer.word_ids(tf.constant(texts)), 12)
    original = tokenizer(tf.constant(texts)).numpy()
    swapped, weights = swapped.numpy(), weights.numpy()
    for row, ids in enumerate(ordered.merge_dims(1, 2).to_list()):
        assert len(ids) <= 12 and ids[0] == CLS_ID and ids.count(SEP_ID) == 1
        cut = ids.index(SEP_ID)
        first, second = ids[1:cut], ids[cut + 1 :]
        halves = second + first if swapped[row] else first + second
        text = [i for i in original[row, 1:] if i != PAD_ID]
        assert halves == text[: len(halves)] and len(halves) >= len(text) - 3  # the last word may make room
        if weights[row]:
            assert first and second
    assert weights[-2:].tolist() == [0.0, 0.0] and swapped[-2:].tolist() == [0, 0]  # nothing to cut
    assert abs(swapped[weights > 0].mean() - 0.5) < 0.03


def test_sentence_order_cuts_a_pair_at_its_separator_into_the_segments_the_classifier_reads():
    tokenizer = Tokenizer.learn(["a b c x y"], kind="word", min_count=1, max_length=12)
    ids = {token: index for index, token in enumerate(tokenizer.vocabulary)}
    pairs = [("a b c", "x y")] * 200 + [("a b c x y", "")]  # a text alone beside them
    word_ids = next(iter(sequences_of(pairs, tokenizer)().batch(201)))
    tf.random.set_seed(3)
    ordered, swapped, weights = swap_segments(word_ids, 12)
    a, b = [ids[w] for w in "a b c".split()], [ids["x"], ids["y"]]
    in_order, reversed_ = [CLS_ID, *a, SEP_ID, *b], [CLS_ID, *b, SEP_ID, *a]
    rows = ordered.merge_dims(1, 2).to_list()
    assert all(row == (reversed_ if swap else in_order) for row, swap in zip(rows[:200], swapped[:200].numpy()))
    assert weights.numpy().tolist() == [1.0] * 201 and 60 < swapped.numpy().sum() < 140
    alone = rows[200]
    assert alone.count(SEP_ID) == 1 and sorted(alone) == sorted(in_order)  # cut at a random word


@pytest.mark.slow
def test_sentence_order_prediction_learns_and_the_classifier_starts_from_it(tmp_path):
    # Documents open with "alpha" and close with "omega": the order of two
    # halves shows in which word follows [CLS].
    rng = random.Random(0)
    words = [f"w{i}" for i in range(40)]
    docs = ["alpha " + " ".join(rng.choices(words, k=rng.randint(4, 12))) + " omega" for _ in range(1600)]
    (tmp_path / "docs.txt").write_text("\n".join(docs) + "\n", encoding="utf-8")
    config = Config.from_dict(
        {
            **TINY,
            "train": {**TINY["train"], "epochs": 5},
            "pretrain": {**TINY["pretrain"], "sentence_order": True, "learning_rate": 1e-2},
        }
    )
    run = str(tmp_path / "run")
    report = pretrain(config, run, str(tmp_path / "docs.txt"))
    assert report["sentence_order_examples"] == 1600
    assert report["sentence_order_accuracy"] > 0.9, report
    assert report["masked_accuracy"] > report["most_frequent_token_accuracy"] + 0.05, report
    saved = Config.load(os.path.join(run, "config.json"))
    classifier = build_model(dataclasses.replace(saved.model, num_classes=2))
    initialize_from(classifier, run, saved.model, Tokenizer.load(run).vocabulary)
    reference = build_pretraining_model(saved.model, sentence_order=True)
    restore_variables(reference, tf.train.latest_checkpoint(os.path.join(run, CHECKPOINT_DIR)))
    encoders = (classifier.get_layer("encoder"), reference.get_layer("encoder"))
    for ours, theirs in zip(*(encoder.get_weights() for encoder in encoders)):
        np.testing.assert_array_equal(ours, theirs)


@pytest.mark.slow
def test_members_hold_out_one_slice_refit_on_all_training_files_and_eval_scores_the_served_ensemble(tmp_path):
    import tensorflow_text  # noqa: F401 (the export's tokenizer ops)

    from pipeline.dataset import hold_out
    from pipeline.export import latest_export
    from pipeline.labels import load_label_names
    from pipeline.model_dir import restore_model
    from pipeline.readers import read_examples

    corpus = write_demo_corpus(tmp_path / "corpus", train_size=320, test_size=64)
    # The default held-out slice and refit.
    config = Config.from_dict(
        {
            **TINY,
            "train": {
                **TINY["train"],
                "epochs": 1,
                "pretrain_epochs": 1,
                "members": 2,
                "validation_split": 0.1,
                "refit": True,
            },
        }
    )
    run = str(tmp_path / "run")
    report = train_and_evaluate(config, run, *corpus)
    member = os.path.join(run, "members", "2")
    kept_examples, held_out = hold_out(read_examples(corpus[0]), 0.1)
    assert [m["refit_epochs"] for m in report["members"]] == [1, 1]
    assert report["refit"]["examples"] == 320 and report["validation"]["examples"] == len(held_out) > 0
    # The pre-training read the kept training texts alone: one epoch of their batches.
    latest = tf.train.latest_checkpoint(os.path.join(run, "pretrain", CHECKPOINT_DIR))
    assert latest.endswith(f"ckpt-{len(kept_examples) // 32}") and len(kept_examples) // 32 != 320 // 32
    # Member 2's refit is, to the digit, a run from the pre-training on all the training files.
    recipe = str(tmp_path / "recipe")
    train_and_evaluate(
        override(
            config,
            {
                "train": {
                    "members": 1,
                    "pretrain_epochs": 0,
                    "refit": False,
                    "validation_split": 0.0,
                    "seed": config.train.seed + 1,
                }
            },
        ),
        recipe,
        *corpus,
        export=False,
        init_from=os.path.join(run, "pretrain"),
    )
    for value, expected in zip(restore_model(member)[0].get_weights(), restore_model(recipe)[0].get_weights()):
        np.testing.assert_array_equal(value, expected)
    # The export serves the mean of the refits, which the report scores on the evaluation files; its
    # validation scores are the mean of the models kept before them, on the held-out examples.
    tokenizer = Tokenizer.load(run)
    names = np.asarray(load_label_names(run))

    def accuracy(models, examples):
        ids = tokenizer(tf.constant(examples.texts))
        predicted = names[np.argmax(np.mean([np.asarray(model(ids)) for model in models], axis=0), axis=-1)]
        return np.mean(predicted == np.asarray(examples.labels))

    examples = read_examples(corpus[1])
    served = (
        tf.saved_model.load(latest_export(os.path.join(run, "export")))
        .signatures["serving_default"](text=tf.constant(examples.texts))["probabilities"]
        .numpy()
    )
    refits, kept = ([restore_model(d, refit=refit)[0] for d in (run, member)] for refit in (True, False))
    ids = tokenizer(tf.constant(examples.texts))
    np.testing.assert_allclose(served, np.mean([np.asarray(m(ids)) for m in refits], axis=0), atol=1e-5)
    assert accuracy(refits, examples) == pytest.approx(report["accuracy"])
    assert accuracy(kept, held_out) == pytest.approx(report["validation"]["accuracy"])
    # Each member's own scores: its refit on the evaluation files, its kept model on the slice.
    for score, refit_model, kept_model in zip(report["members"], refits, kept):
        assert score["accuracy"] == pytest.approx(accuracy([refit_model], examples))
        assert score["validation"]["accuracy"] == pytest.approx(accuracy([kept_model], held_out))


@pytest.mark.slow
def test_unlabelled_files_are_streamed_into_the_pretraining_with_the_training_texts(tmp_path, capsys):
    corpus = write_demo_corpus(tmp_path / "corpus", train_size=320, test_size=64)
    unlabelled = [f"{text} zorblax" for text, _ in generate(200, seed=11)]  # a word no training text has
    (tmp_path / "more.txt").write_text("\n".join(unlabelled[:120]) + "\n", encoding="utf-8")
    # Any reader format: its labels, none of them a class of the run, are ignored.
    (tmp_path / "more.csv").write_text(
        "text,label\n" + "".join(f'"{text}",unknown\n' for text in unlabelled[120:]), encoding="utf-8"
    )
    files = f"{tmp_path / 'more.txt'},{tmp_path / 'more.csv'}"
    # A sample smaller than the 288 kept training texts and the 200 of the files: the training texts stay in
    # memory and the files stream.
    config = override(
        Config.from_dict(TINY),
        {
            "train": {"epochs": 1, "pretrain_epochs": 1, "validation_split": 0.1},
            "data": {"sample_size": 400},
            "model": {"max_length": 32},
        },
    )
    config.save(str(tmp_path / "config.json"))
    run = str(tmp_path / "run")
    command = ["--train", corpus[0], "--eval", corpus[1], "--model-dir", run, "--config", str(tmp_path / "config.json")]
    train_main([*command, "--unlabelled", files])
    out = capsys.readouterr().out
    assert "2 files streamed with 288 texts in memory (vocabulary from a sample of 400 texts)" in out
    assert "488 sequences a pass: 15 steps an epoch" in out  # every text, each one sequence
    vocabulary = Tokenizer.load(os.path.join(run, "pretrain")).vocabulary
    assert "zorblax" in vocabulary and Tokenizer.load(run).vocabulary == vocabulary
    for directory in (run, os.path.join(run, "pretrain")):
        with open(os.path.join(directory, "config.json")) as f:
            assert json.load(f)["pretrain"]["unlabelled"] == files  # a resume with other files is refused
    with pytest.raises(
        SystemExit, match="error: pretrain.unlabelled .--unlabelled. .*train.pretrain_epochs is 0 .no pre-training."
    ):
        train_main(
            [*command[:-2], "--unlabelled", files, "--model-dir", str(tmp_path / "none"), "--pretrain-epochs", "0"]
        )
    assert not os.path.exists(tmp_path / "none")
