import collections

import numpy as np
import pytest
import tensorflow as tf

from pipeline.config import DataConfig
from pipeline.dataset import (
    Split,
    concatenate,
    distribute,
    eval_dataset,
    hold_out,
    learn_vocabulary,
    load_split,
    train_dataset,
)
from pipeline.demo_corpus import write_demo_corpus
from pipeline.readers import Examples
from pipeline.tokenizer import CLS_ID, UNK_ID


def _split(count, length=6):
    ids = np.arange(count * length, dtype="int32").reshape(count, length) % 50 + 1
    return Split(ids, np.arange(count, dtype="int32") % 3, [f"f:{i}" for i in range(count)], {})


def test_training_shapes_are_fully_static():
    dataset = train_dataset(_split(10), global_batch_size=4, seed=0)
    ids_spec, labels_spec = dataset.element_spec
    assert ids_spec.shape == (4, 6) and ids_spec.dtype == tf.int32
    assert labels_spec.shape == (4,) and labels_spec.dtype == tf.int32
    assert sum(1 for _ in dataset) == 2  # 10 // 4, remainder dropped


def test_shuffle_is_seeded_and_resumable():
    split = _split(32)
    first = [b[1].numpy().tolist() for b in train_dataset(split, 4, seed=7, epoch=1)]
    again = [b[1].numpy().tolist() for b in train_dataset(split, 4, seed=7, epoch=1)]
    other = [b[1].numpy().tolist() for b in train_dataset(split, 4, seed=7, epoch=2)]
    resumed = [b[1].numpy().tolist() for b in train_dataset(split, 4, seed=7, epoch=1, skip_batches=3)]
    assert first == again and first != other and resumed == first[3:]


def _varied_lengths(count=640, max_length=64, seed=0):
    rng = np.random.default_rng(seed)
    lengths = rng.integers(1, max_length + 1, count)
    ids = np.zeros((count, max_length), "int32")
    for row, length in enumerate(lengths):
        ids[row, :length] = rng.integers(1, 50, length)
    return Split(ids, np.arange(count, dtype="int32"), [f"f:{i}" for i in range(count)], {}), lengths


def test_length_buckets_cut_only_padding_and_keep_every_example():
    split, lengths = _varied_lengths()
    batches = list(train_dataset(split, 32, seed=3, length_bucket=16))
    assert len(batches) == 640 // 32
    seen = []
    for ids, labels in batches:
        ids, labels = ids.numpy(), labels.numpy()
        longest = lengths[labels].max()
        assert ids.shape == (32, min(-(-longest // 16) * 16, 64))  # the longest, rounded up
        np.testing.assert_array_equal(ids, split.ids[labels, : ids.shape[1]])  # only padding cut
        seen.extend(labels.tolist())
    assert sorted(seen) == list(range(640))  # each example once (640 = 20 whole batches)
    # Similar lengths share a batch: far fewer positions than max_length everywhere.
    positions = sum(ids.shape[0] * ids.shape[1] for ids, _ in batches)
    assert positions < 0.7 * 640 * 64, positions
    assert len({ids.shape[1] for ids, _ in batches}) >= 3  # several lengths in one epoch


def test_length_buckets_are_seeded_and_resumable():
    split, _ = _varied_lengths()

    def labels(**kwargs):
        return [b[1].numpy().tolist() for b in train_dataset(split, 32, seed=7, length_bucket=16, **kwargs)]

    first = labels(epoch=1)
    assert first == labels(epoch=1) and first != labels(epoch=2)
    assert labels(epoch=1, skip_batches=5) == first[5:]


def test_token_dropout_hides_real_tokens_only_and_is_seeded_and_resumable():
    split, lengths = _varied_lengths(count=1024)
    split.ids[:, 0] = CLS_ID

    def batches(**kwargs):
        return [
            (ids.numpy(), labels.numpy())
            for ids, labels in train_dataset(split, 32, seed=7, length_bucket=16, token_dropout=0.2, **kwargs)
        ]

    first = batches(epoch=1)
    hidden = real = 0
    for ids, labels in first:
        original = split.ids[labels, : ids.shape[1]]
        changed = ids != original
        assert (ids[changed] == UNK_ID).all()  # only ever [UNK]
        assert not changed[:, 0].any() and not changed[original == 0].any()  # never [CLS] nor padding
        hidden += changed.sum()
        real += (original[:, 1:] != 0).sum() - (original[:, 1:] == UNK_ID).sum()
    assert 0.18 < hidden / real < 0.22, hidden / real
    again, resumed, other = batches(epoch=1), batches(epoch=1, skip_batches=5), batches(epoch=2)
    assert all((a == b).all() for x, y in zip(first, again) for a, b in zip(x, y))
    assert all((a == b).all() for x, y in zip(first[5:], resumed) for a, b in zip(x, y))

    # A new draw each epoch: the same example loses other tokens.
    def hidden_by_example(batches):
        return {label: tuple(row == UNK_ID) for ids, labels in batches for label, row in zip(labels, ids)}

    first_hidden, other_hidden = hidden_by_example(first), hidden_by_example(other)
    assert sum(first_hidden[label] != other_hidden[label] for label in first_hidden) > 0.5 * len(first_hidden)


@pytest.mark.parametrize("count,batch", [(10, 4), (7, 7), (1, 8)])
def test_evaluation_counts_every_example_once(count, batch):
    split = _split(count)
    seen_labels, seen_rows, total = [], [], 0
    for ids, labels, weights in eval_dataset(split, batch):
        assert ids.shape == (batch, 6)
        keep = weights.numpy() > 0
        seen_rows.extend(ids.numpy()[keep].tolist())
        seen_labels.extend(labels.numpy()[keep].tolist())
        total += weights.numpy().sum()
    assert total == count
    assert seen_rows == split.ids.tolist() and seen_labels == split.labels.tolist()


def test_distributed_batches_split_across_two_replicas(two_replicas):
    strategy = two_replicas
    dataset = distribute(strategy, eval_dataset, _split(10), 4)
    total = 0
    for ids, labels, weights in dataset:
        parts = strategy.experimental_local_results(ids)
        assert [p.shape for p in parts] == [(2, 6), (2, 6)]
        total += sum(w.numpy().sum() for w in strategy.experimental_local_results(weights))
    assert total == 10
    with pytest.raises(ValueError, match="does not divide evenly"):
        iter(distribute(strategy, train_dataset, _split(10), 3, seed=0))


@pytest.mark.parametrize("length_bucket,token_dropout", [(0, 0.0), (16, 0.0), (16, 0.1)])
def test_two_replicas_share_the_steps_of_one_device(length_bucket, token_dropout, two_replicas):
    # Each step's global batch is the single-device batch, split between the
    # replicas (with one length), and resuming skips whole steps.
    split, _ = _varied_lengths()
    strategy = two_replicas
    options = dict(seed=5, length_bucket=length_bucket, token_dropout=token_dropout)
    single = [(ids.numpy(), labels.numpy()) for ids, labels in train_dataset(split, 32, **options)]
    for skip in (0, 3):
        dataset = distribute(strategy, train_dataset, split, 32, skip_batches=skip, **options)
        steps = 0
        for (ids, labels), (expected_ids, expected_labels) in zip(dataset, single[skip:]):
            parts = [p.numpy() for p in strategy.experimental_local_results(ids)]
            assert [p.shape for p in parts] == [(16, expected_ids.shape[1])] * 2
            np.testing.assert_array_equal(np.concatenate(parts), expected_ids)
            labels = np.concatenate([p.numpy() for p in strategy.experimental_local_results(labels)])
            np.testing.assert_array_equal(labels, expected_labels)
            steps += 1
        assert steps == len(single) - skip


def test_demo_corpus_end_to_end(tmp_path):
    train_path, test_path = write_demo_corpus(tmp_path, train_size=300, test_size=50)
    config = DataConfig(tokenizer="word", min_count=1)
    names, tokenizer = learn_vocabulary(train_path, config, max_length=24)
    train = load_split(train_path, config, tokenizer, names)
    test = load_split(test_path, config, tokenizer, names)
    assert names == ["negative", "positive"] and len(train) == 300 and len(test) == 50
    assert train.ids.shape == (300, 24) and train.ids.dtype == np.int32
    assert (train.ids[:, 0] == 2).all() and train.sources[0].endswith("train.csv:2")


def test_concatenated_splits_are_the_split_of_all_their_files(tmp_path):
    # A refit's data: the training and evaluation splits the run holds, not the files read again.
    (tmp_path / "a.csv").write_text("text,label\nthe cat sat,pos\n  ,neg\na dog ran far,neg\n", encoding="utf-8")
    (tmp_path / "b.csv").write_text("text,label\nthe dog,pos\nfine,\nmany cats,odd\ncat,neg\n", encoding="utf-8")
    config = DataConfig(tokenizer="word", min_count=1, skip_bad_rows=True)
    names, tokenizer = learn_vocabulary(str(tmp_path / "a.csv"), config, max_length=8)
    parts = [load_split(str(tmp_path / name), config, tokenizer, names) for name in ("a.csv", "b.csv")]
    joined, whole = concatenate(parts), load_split(f"{tmp_path}/a.csv,{tmp_path}/b.csv", config, tokenizer, names)
    np.testing.assert_array_equal(joined.ids, whole.ids)
    np.testing.assert_array_equal(joined.labels, whole.labels)
    assert (
        joined.sources
        == whole.sources
        == [f"{tmp_path}/{source}" for source in ("a.csv:2", "a.csv:4", "b.csv:2", "b.csv:5")]
    )
    assert joined.skipped == whole.skipped and sum(whole.skipped.values()) == 3


def test_held_out_slice_takes_every_copy_of_a_text_and_leaves_texts_of_two_labels_in_training():
    # 60 distinct texts of label a, each written three times; 30 of b once; "both" is given a and b.
    texts = [f"a {i % 60}" for i in range(180)] + [f"b {i}" for i in range(30)] + ["both", "both"]
    labels = ["a"] * 180 + ["b"] * 30 + ["a", "b"]
    examples = Examples(texts, labels, [f"f.csv:{i + 2}" for i in range(len(texts))], collections.Counter())
    kept, held_out = hold_out(examples, 0.1)
    assert not set(kept.texts) & set(held_out.texts)
    # A tenth of each label's distinct texts, with all their copies: 6 texts of a (18 rows), 3 of b.
    assert collections.Counter(held_out.labels) == {"a": 18, "b": 3}
    assert collections.Counter(held_out.texts) == {text: 3 for text in held_out.texts if text.startswith("a")} | {
        text: 1 for text in held_out.texts if text.startswith("b")
    }
    assert kept.texts.count("both") == 2 and len(kept.texts) + len(held_out.texts) == len(texts)


def test_held_out_slice_is_stratified_seeded_disjoint_and_keeps_every_label():
    labels = ["a"] * 700 + ["b"] * 250 + ["c"] * 45 + ["d"] * 5 + ["e"]
    texts = [f"text {i}" for i in range(len(labels))]
    examples = Examples(texts, labels, [f"f.csv:{i + 2}" for i in range(len(labels))], collections.Counter(empty=3))
    kept, held_out = hold_out(examples, 0.1)
    # A tenth of each label (rounded), in file order, the rest kept in file order; nothing lost.
    assert collections.Counter(held_out.labels) == {"a": 70, "b": 25, "c": 4}  # d: round(0.5) = 0; e kept
    assert sorted(kept.sources + held_out.sources, key=lambda s: int(s.split(":")[1])) == examples.sources
    for part in (kept, held_out):
        assert part.sources == sorted(part.sources, key=lambda s: int(s.split(":")[1]))
        assert [int(s.split(":")[1]) - 2 for s in part.sources] == [int(t.split()[1]) for t in part.texts]
        assert [labels[int(t.split()[1])] for t in part.texts] == part.labels
    assert kept.skipped == {"empty": 3} and held_out.skipped == {}  # skipped rows counted once
    assert set(kept.labels) == set(labels)
    # The same draw every time; another seed draws other examples of the same counts.
    assert hold_out(examples, 0.1)[1].sources == held_out.sources
    other = hold_out(examples, 0.1, seed=1)[1]
    assert other.sources != held_out.sources and collections.Counter(other.labels) == collections.Counter(
        held_out.labels
    )
    # Even (nearly) all of a label leaves it one example to train on.
    assert collections.Counter(hold_out(examples, 0.999)[0].labels) == {label: 1 for label in "abcde"}
    with pytest.raises(ValueError, match=r"train.validation_split 0.1 of 4 training examples holds out none"):
        hold_out(
            Examples(["x", "y", "z", "w"], ["a", "b", "a", "b"], ["f:1", "f:2", "f:3", "f:4"], collections.Counter()),
            0.1,
        )
