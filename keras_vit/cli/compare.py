"""`keras-vit compare`: training runs and evaluations side by side, in one table.

    keras-vit compare runs/vit runs/bit --output comparison/

Writes comparison.md (per run: model, weights, recipe, parameters, GFLOPs per image,
training time, images/s, test accuracy, macro precision/recall/F1; then per class
precision/recall/F1 side by side) and comparison.png (the learning curves overlaid),
through `keras_vit.analysis.compare_runs`. Folders on different datasets or splits are
refused, naming the difference.
"""

import os

from keras_vit.cli.common import CommandError

__all__ = ["add_parser", "run"]


def add_parser(commands):
    """Registers the `compare` sub-command on an argparse sub-parsers object."""
    parser = commands.add_parser(
        "compare", help="put training runs and evaluations side by side (same dataset and split)",
        description="Writes comparison.md and comparison.png for the folders of `keras-vit "
                    "train` runs or `keras-vit evaluate --output` folders; refuses folders on "
                    "different datasets or splits.")
    parser.add_argument("folders", nargs="+", metavar="RUN_OR_EVAL_DIR",
                        help="folders holding a report.json (train --output, evaluate --output)")
    parser.add_argument("--output", required=True,
                        help="folder for comparison.md and comparison.png")
    parser.set_defaults(run=run)
    return parser


def run(args):
    from keras_vit.analysis.compare import compare_runs

    if os.path.exists(args.output) and not os.path.isdir(args.output):
        raise CommandError(f"--output {args.output} is an existing file; the comparison goes "
                           "into a folder.")
    for path in compare_runs(args.folders, args.output):
        print(path)
    return 0
