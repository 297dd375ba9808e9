"""Quiet TensorFlow's C++ start-up log when keras_vit runs as the `keras-vit` command.

Importing TensorFlow 2.21 prints INFO lines (oneDNN, the cudart stub, the CPU
feature guard), some twice, which users of the command read as errors. Most
come from absl logging before TensorFlow initialises it, so
`TF_CPP_MIN_LOG_LEVEL` alone does not hide them. When keras_vit is imported to
run the command (and only then: a library user's process is left alone), this
sets `TF_CPP_MIN_LOG_LEVEL` to 2 (errors only) for TensorFlow's later messages
unless the user set it (theirs wins; with 0 they see the start-up lines too),
and imports TensorFlow
with the process' stderr (file descriptor 2) pointed at /dev/null, and starts its
devices there too (where CUDA cannot start, that logs an ERROR line). This must
run before anything imports Keras: under the command (`running_the_command`, the
one test of it) keras_vit/__init__.py defers its core, and `keras_vit.cli.main`
calls this unless help is asked for (so that `keras-vit --help` imports no
TensorFlow), as does the one sub-command parser whose help imports TensorFlow
(`train`).
"""

import contextlib
import importlib.util
import io
import os
import re
import sys
import tempfile

__all__ = ["running_the_command", "quiet_for_command_line", "without_libjpeg_lines",
           "dropped_if_refused", "stderr_descriptor"]

LEVEL_VARIABLE = "TF_CPP_MIN_LOG_LEVEL"
NVIDIA_DRIVER = "/proc/driver/nvidia"  # present where the NVIDIA kernel driver is loaded (Linux)


def running_the_command():
    """Whether this process is `keras-vit ...` or `python -m keras_vit.cli ...`."""
    script = os.path.basename(sys.argv[0]) if sys.argv else ""
    if script in ("keras-vit", "keras-vit.exe", "keras-vit-script.py"):
        return True
    argv = getattr(sys, "orig_argv", [])  # the interpreter's own arguments (Python 3.10+)
    return any(flag == "-m" and module.startswith("keras_vit.cli")
               for flag, module in zip(argv, argv[1:]))


# The process' own stderr while a block below points file descriptor 2 elsewhere: where a line
# that must be seen goes even then (Ctrl-C's, keras_vit/cli/main.py, written as the process ends).
_real_stderr = None


def stderr_descriptor():
    """A file descriptor of the process' stderr: 2, or its copy while fd 2 is hidden here."""
    return 2 if _real_stderr is None else _real_stderr


@contextlib.contextmanager
def _stderr_pointed_at(descriptor):
    """Points fd 2 at `descriptor` for the block (Python's sys.stderr flushed into each side);
    `stderr_descriptor()` keeps the real one."""
    global _real_stderr
    sys.stderr.flush()
    saved = os.dup(2)
    outer = _real_stderr
    _real_stderr = saved if outer is None else outer  # set before fd 2 moves
    try:
        os.dup2(descriptor, 2)
        yield
    finally:
        sys.stderr.flush()
        os.dup2(saved, 2)
        _real_stderr = outer
        os.close(saved)


def quiet_for_command_line():
    if not running_the_command():
        return
    # A user's own level wins for TensorFlow's later messages; one who asks for everything
    # (0) also sees the start-up lines. Any other level, the usual 3 included, gets a silent
    # start-up: absl prints its lines before it reads the variable.
    level = os.environ.setdefault(LEVEL_VARIABLE, "2")
    if level.strip() in ("", "0"):
        return
    if "tensorflow" in sys.modules or importlib.util.find_spec("tensorflow") is None:
        return
    devnull = os.open(os.devnull, os.O_WRONLY)
    try:
        with _stderr_pointed_at(devnull):
            import tensorflow  # (an import error is raised once stderr is back)

            # Starting the devices logs at ERROR level where CUDA cannot start ("failed call
            # to cuInit"): on every machine without a GPU, with TensorFlow's Linux wheels.
            # Start them here, unheard, rather than at the command's first op.
            gpus = tensorflow.config.list_physical_devices("GPU")
    finally:
        os.close(devnull)
    if not gpus and os.path.exists(NVIDIA_DRIVER):  # then the hidden lines would say why
        print(f"keras-vit: TensorFlow found no usable GPU, though an NVIDIA driver is loaded; "
              f"set {LEVEL_VARIABLE}=0 to see TensorFlow's reasons.", file=sys.stderr)


# What libjpeg prints to stderr itself (TensorFlow passes it no quiet error handler) when it
# fails on a damaged JPEG: the error the user gets already says the file is not an image.
_LIBJPEG_LINE = re.compile(r"(Improper call to JPEG library in state \d+|Premature end of JPEG "
                           r"file|Unsupported marker type 0x[0-9a-f]+|Invalid JPEG file "
                           r"structure: .*|Corrupt JPEG data: .*|Not a JPEG file: .*)\n?$")


@contextlib.contextmanager
def without_libjpeg_lines():
    """Under the command, drops libjpeg's own stderr lines written while the block runs; what
    else reaches stderr meanwhile is written after it. A library user's process is left alone."""
    if not running_the_command():
        yield
        return
    with tempfile.TemporaryFile() as captured:
        try:
            with _stderr_pointed_at(captured.fileno()):
                yield
        finally:
            captured.seek(0)
            for line in captured.read().decode("utf-8", "replace").splitlines(keepends=True):
                if not _LIBJPEG_LINE.match(line):
                    sys.stderr.write(line)


@contextlib.contextmanager
def dropped_if_refused():
    """Under the command, holds what the block writes to stderr (a converter's C++ log, its
    Python warnings and log lines) until it ends: dropped when it ends in a refusal (an error
    of keras_vit's family, whose one line is all the user should read), written out after it
    otherwise (a bug's traceback keeps the log that explains it). A user who asks for
    TensorFlow's every line (TF_CPP_MIN_LOG_LEVEL=0) sees it as it comes; a library user's
    process is left alone."""
    from keras_vit.errors import KerasViTError

    if not running_the_command() or os.environ.get(LEVEL_VARIABLE, "").strip() == "0":
        yield
        return
    with tempfile.TemporaryFile() as captured:
        refused = False
        try:
            with _stderr_pointed_at(captured.fileno()):
                # Python's writers (warnings, print, logging's last resort) look sys.stderr up
                # when they write: into fd 2 too, as it is now, whatever sys.stderr was.
                held = io.TextIOWrapper(open(2, "wb", closefd=False), errors="backslashreplace",
                                        write_through=True)
                try:
                    with contextlib.redirect_stderr(held):
                        yield
                except KerasViTError:
                    refused = True
                    raise
                finally:
                    held.flush()  # into the file before fd 2 moves back
        finally:
            if not refused:
                captured.seek(0)
                sys.stderr.write(captured.read().decode("utf-8", "replace"))
