"""Files that another process may read while this one writes them."""

import contextlib
import os


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
        with open(temporary, "w", encoding="utf-8") as f:
            yield f
        os.replace(temporary, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.remove(temporary)
        raise
