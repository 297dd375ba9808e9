"""`keras-vit`: the parser of every sub-command, and the one place that runs them."""

import sys

from keras_vit._tf_log import quiet_for_command_line
from keras_vit.cli import analyze, export, info, predict, train
from keras_vit.cli.common import Parser, report_errors

__all__ = ["main", "build_parser"]

COMMANDS = (info, train, predict, export, analyze)  # each: add_parser(commands) -> parser


def build_parser():
    parser = Parser(prog="keras-vit", description="Vision Transformers for Keras 3.")
    commands = parser.add_subparsers(dest="command", required=True, parser_class=Parser)
    for command in COMMANDS:
        command.add_parser(commands)
    parser.set_defaults(commands=commands.choices)
    return parser


def main(argv=None):
    if not {"-h", "--help"} & set(sys.argv[1:] if argv is None else argv):
        quiet_for_command_line()  # before a sub-command's parser or run imports TensorFlow
    args, unknown = build_parser().parse_known_args(argv)
    if unknown:  # reported by the sub-command's parser, so the error names the command
        args.commands[args.command].error(f"unrecognized arguments: {' '.join(unknown)}")
    return report_errors(f"keras-vit {args.command}", args.run, args)


if __name__ == "__main__":
    sys.exit(main())
