"""The `keras-vit` command. Each sub-command lives in its own module."""

import argparse
import sys

from keras_vit import cli_export, cli_predict

__all__ = ["main"]


def _info(args):
    from keras_vit.checkpoints import catalogue  # noqa: PLC0415  (keep --help fast)
    from keras_vit.variants import VARIANTS  # noqa: PLC0415

    print(f"{'variant':<22}{'width':>6}{'depth':>6}{'heads':>6}{'stride':>7}  weights")
    for v in VARIANTS.values():
        tags = ", ".join(c.tag for c in catalogue() if c.variant == v.name) or "-"
        print(f"{v.name:<22}{v.width:>6}{v.depth:>6}{v.heads:>6}{v.total_stride:>7}  {tags}")
    return 0


def build_parser():
    parser = argparse.ArgumentParser(prog="keras-vit", description="Vision Transformers for Keras 3.")
    commands = parser.add_subparsers(dest="command", required=True)
    info = commands.add_parser("info", help="list the architectures and their catalogued weights")
    info.set_defaults(run=_info)
    cli_export.add_parser(commands)
    cli_predict.add_parser(commands)
    # Imported here so that `keras-vit --help` stays fast.
    from keras_vit.analysis.command import add_parser as add_analyze  # noqa: PLC0415
    from keras_vit.train_command import add_train_parser  # noqa: PLC0415

    add_train_parser(commands)
    add_analyze(commands)
    return parser


def main(argv=None):
    args = build_parser().parse_args(argv)
    return args.run(args)


if __name__ == "__main__":
    sys.exit(main())
