"""Files of a run, local or in a bucket: every path goes through `tf.io.gfile`,
so `gs://` (and TensorFlow's in-memory `ram://`, which tests use) work
wherever a local path does."""

import contextlib
import io

import tensorflow as tf


def open_text(path, errors="strict", newline=None):
    """`path` opened to read UTF-8 text, streamed, as the built-in `open`
    would with these `errors` and `newline`."""
    return io.TextIOWrapper(io.BufferedReader(_GFileReader(path)), encoding="utf-8", errors=errors, newline=newline)


class _GFileReader(io.RawIOBase):
    # The raw binary stream `io.TextIOWrapper` wants, over a `GFile`.

    def __init__(self, path):
        self._file = tf.io.gfile.GFile(path, "rb")

    def readable(self):
        return True

    def readinto(self, buffer):
        data = self._file.read(len(buffer))
        buffer[: len(data)] = data
        return len(data)

    def close(self):
        self._file.close()
        super().close()


def create(path):
    """`path` opened to write text anew, replacing any file there."""
    # TensorFlow's ram:// file system appends to an existing file where "w" should truncate it.
    if tf.io.gfile.exists(path):
        tf.io.gfile.remove(path)
    return tf.io.gfile.GFile(path, "w")


@contextlib.contextmanager
def atomic_write(path):
    """A text file to write in place of `path`, renamed over it when the block ends.

    A reader - another worker of a cluster, or a run resumed after this one
    was killed - finds the previous file or the complete new one, never one
    cut short. If the block raises, `path` is left as it was and what was
    written is removed (a kill leaves it in `path + ".tmp"`, which the next
    write replaces).
    """
    temporary = path + ".tmp"
    try:
        with create(temporary) as f:
            yield f
        tf.io.gfile.rename(temporary, path, overwrite=True)
    except BaseException:
        with contextlib.suppress(tf.errors.NotFoundError):
            tf.io.gfile.remove(temporary)
        raise
