import os

import pytest

from pipeline.files import atomic_write


def test_the_new_file_replaces_the_old_one_whole(tmp_path):
    path = str(tmp_path / "state.json")
    for text in ("first", "second"):
        with atomic_write(path) as f:
            f.write(text)
            assert not os.path.exists(path) or open(path).read() == "first"  # readers see the old file
    assert open(path).read() == "second"
    assert os.listdir(tmp_path) == ["state.json"]


def test_a_failed_write_leaves_the_old_file(tmp_path):
    path = str(tmp_path / "vocab.txt")
    with atomic_write(path) as f:
        f.write("[PAD]\n")
    with pytest.raises(RuntimeError, match="disk full"):
        with atomic_write(path) as f:
            f.write("half a vocab")
            raise RuntimeError("disk full")
    assert open(path).read() == "[PAD]\n"
    assert os.listdir(tmp_path) == ["vocab.txt"]  # nothing half-written left beside it
    with atomic_write(path) as f:  # the next write goes through
        f.write("[PAD]\n[UNK]\n")
    assert open(path).read() == "[PAD]\n[UNK]\n"
    assert os.listdir(tmp_path) == ["vocab.txt"]
