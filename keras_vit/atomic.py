"""Atomic file writes: every file keras_vit writes appears whole or not at all.

A file is written under a temporary name in its own folder (same file system,
so the rename cannot become a copy), flushed to disk with `fsync`, and renamed
over the target with `os.replace`, which POSIX and Windows make atomic. A kill,
an out-of-memory error or a pre-emption at any moment leaves the old file or
the new one, never a torn one; what it can leave is a temporary file, whose
name starts with `TEMP_PREFIX` and which `remove_temporaries` clears.

    with atomic_path("run/best.keras") as tmp:   # for writers that take a path
        model.save(tmp)
    with atomic_open("run/report.json", "w") as f:
        json.dump(report, f)

Test hook: when the environment variable `KERAS_VIT_TEST_WRITE_DELAY` holds a
number of seconds, every write waits that long after writing its temporary file
and before renaming it, so the fault-injection tests (tests/test_faults.py) can
kill a process while a write is in flight. It is for those tests only; unset,
it costs nothing.
"""

import contextlib
import os
import secrets
import time

__all__ = ["atomic_path", "atomic_open", "write_bytes", "remove_temporaries", "TEMP_PREFIX"]

TEMP_PREFIX = ".tmp-"
WRITE_DELAY_VARIABLE = "KERAS_VIT_TEST_WRITE_DELAY"


@contextlib.contextmanager
def atomic_path(path):
    """Yields a temporary path next to `path`; when the block succeeds, it becomes `path`.

    The temporary name keeps `path`'s extensions (".keras", ".weights.h5", ".png"),
    since Keras and matplotlib choose the format from them. The file is created
    by the caller, with the caller's permissions. If the block raises, the
    temporary file is removed and `path` is left as it was.
    """
    path = os.fspath(path)
    folder = os.path.dirname(os.path.abspath(path))
    os.makedirs(folder, exist_ok=True)
    name = os.path.basename(path)
    stem, dot, extensions = name.partition(".")
    tmp = os.path.join(folder, f"{TEMP_PREFIX}{stem}-{secrets.token_hex(4)}{dot}{extensions}")
    try:
        yield tmp
        if not os.path.isfile(tmp):
            raise OSError(f"nothing was written to {path}")
        _test_write_delay()
        _fsync(tmp)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
    _fsync_folder(folder)


@contextlib.contextmanager
def atomic_open(path, mode="w", **kwargs):
    """`open(path, mode)` for writing, made atomic: the file appears when the block ends."""
    if not mode.startswith(("w", "x")):
        raise ValueError(f"atomic_open writes whole files (mode 'w' or 'wb'), not {mode!r}.")
    with atomic_path(path) as tmp, open(tmp, mode, **kwargs) as file:
        yield file


def write_bytes(path, content):
    """Writes `content` (bytes) to `path` atomically; returns `path`."""
    with atomic_open(path, "wb") as file:
        file.write(content)
    return path


def remove_temporaries(folder):
    """Removes the temporary files a killed write left in `folder`; returns their names."""
    if not os.path.isdir(folder):
        return []
    names = sorted(n for n in os.listdir(folder) if n.startswith(TEMP_PREFIX))
    for name in names:
        with contextlib.suppress(OSError):
            os.unlink(os.path.join(folder, name))
    return names


def _test_write_delay():
    delay = os.environ.get(WRITE_DELAY_VARIABLE)
    if delay:
        time.sleep(float(delay))


def _fsync(path):
    with open(path, "rb") as file:
        os.fsync(file.fileno())


def _fsync_folder(folder):
    """Makes the rename itself durable; not every platform can open a folder (Windows)."""
    try:
        handle = os.open(folder, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(handle)
    except OSError:
        pass
    finally:
        os.close(handle)
