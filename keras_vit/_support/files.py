"""Reading the files a user names: regular files only, and every one read whole has a size cap.

A FIFO with no writer blocks `open` for ever, and a device such as /dev/zero never ends, so a
path that is neither a regular file nor a folder is refused before anything opens it; the open
that follows is non-blocking and checked again, so a path swapped in between cannot hang it.
A file read whole into memory (labels, JSON configs, run records, images) is refused past its
cap instead of growing until memory runs out.
"""

import os
import stat

MAX_TEXT_BYTES = 16 * 2 ** 20  # a 21,843-class labels file is 0.5 MB; run records are KBs
MAX_IMAGE_BYTES = 256 * 2 ** 20  # a 40-megapixel uncompressed BMP is 160 MB

_KINDS = ((stat.S_ISFIFO, "a FIFO"), (stat.S_ISSOCK, "a socket"), (stat.S_ISCHR, "a character device"),
          (stat.S_ISBLK, "a block device"))


def refuse_special_file(path, what, error, mode=None):
    """Raises `error` when `path` is a FIFO, a socket or a device (`what` names what it should
    be: "a checkpoint file"); a missing path is left to the caller to name."""
    if mode is None:
        try:
            mode = os.stat(path).st_mode
        except OSError:
            return
    for is_kind, kind in _KINDS:
        if is_kind(mode):
            raise error(f"{path} is {kind}, not {what}; keras_vit reads regular files only.")


def read_file(path, what, error, max_bytes=MAX_TEXT_BYTES):
    """The bytes of the regular file `path`, refused with `error` when it is not one or holds
    more than `max_bytes`. OSError (a missing file) is the caller's to word."""
    refuse_special_file(path, what, error)
    fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0))
    try:
        mode = os.fstat(fd).st_mode
        if stat.S_ISDIR(mode):
            raise error(f"{path}: is a folder, not {what}.")
        refuse_special_file(path, what, error, mode)
    except BaseException:
        os.close(fd)
        raise
    with os.fdopen(fd, "rb") as f:
        data = f.read(max_bytes + 1)  # a file that grew after any size check is caught too
    if len(data) > max_bytes:
        raise error(f"{path} is larger than {max_bytes // 2 ** 20} MB, too large for {what}.")
    return data


def read_text(path, what, error, max_bytes=MAX_TEXT_BYTES):
    """`read_file` as UTF-8 text; undecodable bytes raise `error`."""
    data = read_file(path, what, error, max_bytes)
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as decode_error:
        raise error(f"{path} is not UTF-8 text ({decode_error}).") from None
