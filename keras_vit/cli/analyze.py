"""`keras-vit analyze`: write the paper-style analysis figures for a set of images.

    keras-vit analyze photos/ --model ViT-B_16 --weights imagenet21k --output-dir analysis/
    keras-vit analyze a.jpg b.png --model my_model.keras

Writes attention_rollout.png, attention_distance.png,
position_embedding_similarity.png, patch_embedding_components.png (plain
models with 1 or 3 input channels) and analysis.json (the numbers), through
`keras_vit.analysis.analyze`.
"""

import os

from keras_vit.cli.common import (
    CommandError,
    add_max_pixels_option,
    add_model_options,
    load_model,
    positive_int,
)

__all__ = ["add_parser", "run"]


def add_parser(commands):
    """Registers the `analyze` sub-command on an argparse sub-parsers object."""
    parser = commands.add_parser(
        "analyze", help="attention rollout, attention distance and embedding figures for images")
    parser.add_argument("images", nargs="+", help="image files or folders of images")
    add_model_options(parser)
    parser.add_argument("--output-dir", default="analysis", help="where the PNGs go")
    parser.add_argument("--max-images", type=positive_int, default=128,
                        help="images used for the attention distance (the paper uses 128)")
    parser.add_argument("--rollout-images", type=positive_int, default=6,
                        help="images shown in the rollout figure")
    parser.add_argument("--batch-size", type=positive_int, default=8)
    add_max_pixels_option(parser)
    parser.set_defaults(run=run)
    return parser


def run(args):
    from keras_vit.analysis import analyze

    if os.path.exists(args.output_dir) and not os.path.isdir(args.output_dir):
        raise CommandError(f"--output-dir {args.output_dir} is an existing file; the figures go "
                           "into a folder.")
    written = analyze(load_model(args), args.images, args.output_dir, max_images=args.max_images,
                      rollout_images=args.rollout_images, batch_size=args.batch_size,
                      max_pixels=args.max_pixels)
    for path in written:
        print(path)
    return 0
