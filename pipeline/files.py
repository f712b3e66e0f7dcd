"""Files that another process may read while this one writes them."""

import contextlib
import os


@contextlib.contextmanager
def atomic_write(path):
    """A text file to write in place of `path`, renamed over it when the block ends.

    A reader - another worker of a cluster, or a run resumed after this one
    was killed - finds the previous file or the complete new one, never one
    cut short. If the block raises, `path` is left as it was (a `.tmp` file
    beside it may hold what was written; the next write replaces it).
    """
    temporary = path + ".tmp"
    with open(temporary, "w", encoding="utf-8") as f:
        yield f
    os.replace(temporary, path)
