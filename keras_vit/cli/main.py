"""`keras-vit`: the parser of every sub-command, and the one place that runs them."""

import os
import signal
import sys
import threading

from keras_vit._support.tf_log import quiet_for_command_line, stderr_descriptor
from keras_vit.cli import analyze, compare, evaluate, export, info, predict, train
from keras_vit.cli.common import Parser, report_errors

__all__ = ["main", "build_parser"]

COMMANDS = (info, train, predict, evaluate, export, analyze, compare)  # each: add_parser(commands) -> parser


def build_parser():
    from keras_vit import __version__

    parser = Parser(prog="keras-vit", description="Vision Transformers for Keras 3.")
    parser.add_argument("--version", action="version", version=f"keras-vit {__version__}")
    commands = parser.add_subparsers(dest="command", required=True, parser_class=Parser)
    for command in COMMANDS:
        command.add_parser(commands)
    parser.set_defaults(commands=commands.choices)
    return parser


# What Ctrl-C leaves, said in its one line. Only train resumes (keras_vit/training/resume.py):
# its parser sets `interrupted` to say so; every other command writes its files whole or not at
# all (keras_vit/atomic.py), so nothing is half-written and its re-run starts over.
INTERRUPTED = "interrupted; nothing was left half-written, and a re-run starts over"
_interrupted_note = INTERRUPTED  # the running command's, once its arguments are parsed


def main(argv=None):
    """Runs the command; Ctrl-C ends it with one line and exit status 130 (128 + SIGINT)."""
    if threading.current_thread() is not threading.main_thread():  # only it may set handlers
        return _main_to_a_reader(argv)
    previous = signal.signal(signal.SIGINT, _interrupted)
    try:
        return _main_to_a_reader(argv)
    finally:
        signal.signal(signal.SIGINT, previous)


# A writer whose reader has gone (`keras-vit info | head -1`) ends quietly with the status a
# Unix tool killed by SIGPIPE has in the shell: 128 + 13.
READER_GONE = 141


def _main_to_a_reader(argv):
    try:
        code = _main(argv)
        sys.stdout.flush()  # a closed pipe shows here, not as a traceback at exit
        return code
    except BrokenPipeError:
        # Python flushes stdout again at exit: point it at /dev/null so that flush is quiet.
        devnull = os.open(os.devnull, os.O_WRONLY)
        try:
            os.dup2(devnull, sys.stdout.fileno())
        except (OSError, ValueError):  # no file descriptor (a test's captured stdout)
            pass
        finally:
            os.close(devnull)
        return READER_GONE


def _interrupted(signum, frame):
    """Ends the process at once, as a kill would. Not a KeyboardInterrupt: raised inside a
    garbage-collection callback or a `__del__` (TensorFlow's, JAX's), Python prints it as
    "Exception ignored" and goes on. Every file is written atomically (keras_vit/atomic.py)
    and the next run removes a dead writer's temporaries, so what this leaves is whole."""
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()  # what was printed so far (predictions) is kept
        except (OSError, ValueError):
            pass
    # To the process' stderr also while TensorFlow's start-up or libjpeg's lines are hidden
    # (keras_vit/_support/tf_log.py points fd 2 elsewhere meanwhile; a thread that ends such a
    # block as this runs closes the copy: then fd 2 is the stderr again).
    line = f"keras-vit: {_interrupted_note}\n".encode()
    try:
        os.write(stderr_descriptor(), line)
    except OSError:
        os.write(2, line)
    os._exit(130)


def _main(argv):
    argv = sys.argv[1:] if argv is None else list(argv)
    parser = build_parser()
    if not argv:  # a first try: what there is to run, not just the missing argument
        parser.print_help()
        return 2
    # TensorFlow is imported (quietly) only for a sub-command that will run: bare `keras-vit`,
    # --version and every --help answer without it, in well under a second.
    if argv and argv[0] in parser.get_default("commands") and not {"-h", "--help"} & set(argv):
        quiet_for_command_line()  # before a sub-command's parser or run imports TensorFlow
    args, unknown = parser.parse_known_args(argv)
    if unknown:  # reported by the sub-command's parser, so the error names the command
        args.commands[args.command].error(f"unrecognized arguments: {' '.join(unknown)}")
    global _interrupted_note
    _interrupted_note = getattr(args, "interrupted", INTERRUPTED)
    try:
        return report_errors(f"keras-vit {args.command}", args.run, args)
    finally:
        _interrupted_note = INTERRUPTED


if __name__ == "__main__":
    sys.exit(main())
