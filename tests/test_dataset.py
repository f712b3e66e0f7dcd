import numpy as np
import pytest
import tensorflow as tf

from pipeline.config import DataConfig
from pipeline.dataset import Split, distribute, eval_dataset, learn_vocabulary, load_split, train_dataset
from pipeline.demo_corpus import write_demo_corpus


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


def test_distributed_batches_split_across_two_replicas():
    strategy = tf.distribute.MirroredStrategy(["/cpu:0", "/cpu:1"])
    dataset = distribute(strategy, eval_dataset, _split(10), 4)
    total = 0
    for ids, labels, weights in dataset:
        parts = strategy.experimental_local_results(ids)
        assert [p.shape for p in parts] == [(2, 6), (2, 6)]
        total += sum(w.numpy().sum() for w in strategy.experimental_local_results(weights))
    assert total == 10
    with pytest.raises(ValueError, match="does not divide evenly"):
        iter(distribute(strategy, train_dataset, _split(10), 3, seed=0))


def test_demo_corpus_end_to_end(tmp_path):
    train_path, test_path = write_demo_corpus(tmp_path, train_size=300, test_size=50)
    config = DataConfig(tokenizer="word", min_count=1)
    names, tokenizer = learn_vocabulary(train_path, config, max_length=24)
    train = load_split(train_path, config, tokenizer, names)
    test = load_split(test_path, config, tokenizer, names)
    assert names == ["negative", "positive"] and len(train) == 300 and len(test) == 50
    assert train.ids.shape == (300, 24) and train.ids.dtype == np.int32
    assert (train.ids[:, 0] == 2).all() and train.sources[0].endswith("train.csv:2")
