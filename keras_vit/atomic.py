"""Atomic writes: every file and folder keras_vit writes appears whole or not at all.

This module is the one place keras_vit renames anything. A file is written
under a temporary name in its own folder (same file system, so the rename
cannot become a copy), flushed to disk with `fsync`, renamed over the target
with `os.replace` (atomic on POSIX and Windows), and the folder is flushed so
the rename itself survives a power cut. A kill at any moment leaves the old
file or the new one, never a torn one; what it can leave is its temporary.

A temporary's name says whose it is and what it was for:

    .tmp-<stem>.<host>-<pid>-<thread>-<random><extensions>

(`report.json` -> `.tmp-report.1f2e3d4c-4242-4243-a1b2c3d4.json`): unique per
call, with the target's extensions kept, since Keras and matplotlib choose the
format from them. The next write to the same target removes the temporaries of
writers that are dead, that is whose process no longer exists on this machine;
a live writer's temporary is never touched, and another machine's only once it
has been left alone for `STALE_S`.

    with atomic_path("run/best.keras") as tmp:   # for writers that take a path
        model.save(tmp)
    with atomic_open("run/report.json", "w") as f:
        json.dump(report, f)
    with temporary_folder("export/model") as tmp:  # folders: a SavedModel
        write_saved_model(tmp)
        publish_folder(tmp, "export/1", replace=True)
"""

import contextlib
import errno
import os
import re
import secrets
import shutil
import socket
import threading
import time
import zlib

__all__ = ["atomic_path", "atomic_open", "write_bytes", "temporary_folder", "publish_folder",
           "remove_temporaries", "check_target", "TEMP_PREFIX"]

TEMP_PREFIX = ".tmp-"
STALE_S = 24 * 3600  # a temporary of another machine is left alone this long
# The host as 8 hex digits: a process id means something only on its own machine.
_HOST = f"{zlib.crc32(socket.gethostname().encode()):08x}"
_TEMPORARY = re.compile(re.escape(TEMP_PREFIX)
                        + r"(?P<stem>[^.]*)\.(?P<host>[0-9a-f]{8})-(?P<pid>\d+)-\d+-[0-9a-f]{8}"
                        + r"(?P<extensions>(\..*)?)", re.DOTALL)
# How keras_vit named its temporaries before they named their writer: `.tmp-<stem>-<random>...`.
_OLD_TEMPORARY = re.compile(re.escape(TEMP_PREFIX) + r"[^.]*-[0-9a-f]{8}(\..*)?", re.DOTALL)


@contextlib.contextmanager
def atomic_path(path):
    """Yields a temporary path next to `path`; when the block succeeds, it becomes `path`.

    The file is created by the caller, with the caller's permissions. If the
    block raises, the temporary file is removed and `path` is left as it was.
    A failure to write (a full disk, a read-only file system, a folder in the
    way, an error naming the temporary) is a `PathError` naming `path`, one line.
    """
    path = os.fspath(path)
    _refuse_folder(path)
    try:
        tmp = _claim(path)
    except OSError as error:  # its folder cannot be made or listed
        raise _not_written(path, error) from None
    try:
        yield tmp
        if not os.path.isfile(tmp):
            raise FileNotFoundError(f"nothing was written to {path}")
        _fsync(tmp)
        os.replace(tmp, path)
    except BaseException as error:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        if isinstance(error, OSError) and _about_writing(error, path, tmp):
            raise _not_written(path, error) from None
        raise
    _fsync_folder(os.path.dirname(tmp))


# Errors only a write gives: whatever raised one in the block was writing this file.
WRITE_ERRNOS = frozenset({errno.ENOSPC, errno.EDQUOT, errno.EFBIG, errno.EROFS})


def _about_writing(error, path, tmp):
    """Whether an OSError raised while `path` was written through `tmp` is about that write:
    a write's errno, or an error naming the temporary or the target (not a nested write's
    PathError, which is one line already)."""
    from keras_vit.errors import PathError

    if isinstance(error, PathError):
        return False
    return error.errno in WRITE_ERRNOS or bool({error.filename, error.filename2} & {tmp, path})


def _not_written(path, error):
    """The one-line PathError for an OSError raised writing `path`, with its errno kept."""
    from keras_vit.errors import PathError

    reason = error.strerror or str(error)
    code = errno.errorcode.get(error.errno)
    failure = PathError(f"{path} could not be written: {reason}{f' ({code})' if code else ''}; "
                        "any earlier file of that name is left as it was.")
    failure.errno = error.errno  # only: with a strerror or filename, str() would be OSError's
    return failure


def check_target(path, what=None):
    """Raises `PathError` now when `path` cannot become a file: it is a folder, or the nearest
    folder above it that exists cannot be written in (a read-only file system, no permission).
    `what` names the path in the message ("--output"). Writers call it before long work, so
    a place nothing can be written fails before the work, not after it."""
    from keras_vit.errors import PathError

    path = os.fspath(path)
    _refuse_folder(path, what)
    folder = os.path.dirname(os.path.abspath(path))
    while not os.path.lexists(folder) and os.path.dirname(folder) != folder:
        folder = os.path.dirname(folder)  # the folder that would hold the folders made
    named = f"{what} {path}" if what else path
    if not os.path.isdir(folder):
        raise PathError(f"{named} cannot be written: {folder} is not a folder.")
    if not os.access(folder, os.W_OK | os.X_OK):  # a read-only mount too: access() checks it
        raise PathError(f"{named} cannot be written: the folder {folder} is not writable "
                        "(a read-only file system, or no permission).")


def _refuse_folder(path, what=None):
    from keras_vit.errors import PathError

    if os.path.isdir(path):
        raise PathError(f"{f'{what} ' if what else ''}{path} is a folder; name a file to write.")


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


@contextlib.contextmanager
def temporary_folder(path):
    """Yields a temporary folder path next to `path` (not yet created) to build a folder in.

    `publish_folder` renames it into place; whatever is still there when the
    block ends, because it raised or published nothing, is deleted.
    """
    tmp = _claim(os.fspath(path))
    try:
        yield tmp
    finally:
        if os.path.lexists(tmp):
            shutil.rmtree(tmp, ignore_errors=True)


def publish_folder(source, target, replace=False):
    """Renames the folder `source` (from `temporary_folder`) to `target` in one step.

    Fails with FileExistsError when `target` exists: another writer made it, and
    the rename never merges into or replaces it. With `replace`, an old `target`
    is first renamed aside under a temporary name, out of readers' sight in one
    step, and deleted once `source` is in its place: a kill leaves the old folder,
    the new one or, between the two renames, neither; never a half-deleted one.
    """
    source, target = os.fspath(source), os.fspath(target)
    _fsync_tree(source)
    old = None
    if replace and os.path.lexists(target):
        old = _claim(target)
        os.replace(target, old)
    try:
        if os.path.lexists(target):
            raise FileExistsError(f"{target} already exists.")
        try:
            os.rename(source, target)  # onto a folder made meanwhile: OSError, never a merge
        except OSError as error:
            if os.path.lexists(target):
                raise FileExistsError(f"{target} already exists.") from error
            raise
    except BaseException:
        if old is not None and not os.path.lexists(target):
            with contextlib.suppress(OSError):
                os.rename(old, target)  # nothing took its place: the old folder goes back
        raise
    finally:
        _fsync_folder(os.path.dirname(os.path.abspath(target)))
        if old is not None and os.path.lexists(old):
            shutil.rmtree(old, ignore_errors=True)
    return target


def remove_temporaries(folder):
    """Removes the temporaries dead writers left in `folder`, whatever their target, and those
    of earlier keras_vit releases (whose writers are long gone); returns their names."""
    return _remove_dead(folder, lambda target: True, old_names=True)


def _claim(path):
    """A temporary name next to `path`, for this call alone; clears dead writers' ones first."""
    folder, name = os.path.split(os.path.abspath(path))
    os.makedirs(folder, exist_ok=True)
    _remove_dead(folder, lambda target: target == name)
    stem, dot, extensions = name.partition(".")
    owner = f"{_HOST}-{os.getpid()}-{threading.get_native_id()}-{secrets.token_hex(4)}"
    return os.path.join(folder, f"{TEMP_PREFIX}{stem}.{owner}{dot}{extensions}")


def _remove_dead(folder, wanted, old_names=False):
    """Deletes the temporaries in `folder` whose target passes `wanted` and whose writer died."""
    try:
        names = os.listdir(folder)
    except FileNotFoundError:
        return []
    removed = []
    for name in sorted(names):
        if not name.startswith(TEMP_PREFIX):
            continue
        found = _TEMPORARY.fullmatch(name)
        if not (found or old_names and _OLD_TEMPORARY.fullmatch(name)):
            continue
        if found and not wanted(found["stem"] + found["extensions"]):
            continue
        path = os.path.join(folder, name)
        try:
            if found and _writer_may_live(found["host"], int(found["pid"]), path):
                continue
            if os.path.isdir(path) and not os.path.islink(path):
                shutil.rmtree(path)
            else:
                os.unlink(path)
        except OSError:  # removed meanwhile (by its writer, or another cleaner)
            continue
        removed.append(name)
    return removed


def _writer_may_live(host, pid, path):
    if host != _HOST:  # another machine's: only its age says anything
        return time.time() - os.lstat(path).st_mtime < STALE_S
    if pid == os.getpid():
        return True
    try:
        os.kill(pid, 0)  # signal 0 only asks whether the process exists
    except ProcessLookupError:
        return False
    except PermissionError:  # it exists, as another user's
        return True
    return True


def _fsync(path):
    with open(path, "rb") as file:
        os.fsync(file.fileno())


def _fsync_tree(folder):
    """Flushes every file and folder under `folder`, so its rename publishes whole contents."""
    for parent, _, files in os.walk(folder):
        for name in files:
            _fsync(os.path.join(parent, name))
        _fsync_folder(parent)


def _fsync_folder(folder):
    """Makes renames in `folder` durable; not every platform can open a folder (Windows)."""
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
