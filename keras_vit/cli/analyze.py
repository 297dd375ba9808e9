"""`keras-vit analyze`: write the paper-style analysis figures for a set of images.

    keras-vit analyze photos/ --model ViT-B_16 --weights imagenet21k --output-dir analysis/
    keras-vit analyze a.jpg b.png --model my_model.keras

Writes attention_rollout.png, attention_distance.png,
position_embedding_similarity.png, patch_embedding_components.png (plain
models with 1 or 3 input channels) and analysis.json (the numbers).
"""

import json
import os

from keras_vit.atomic import atomic_open
from keras_vit.cli.common import add_max_pixels_option, add_model_options, load_model

__all__ = ["add_parser", "run"]


def add_parser(commands):
    """Registers the `analyze` sub-command on an argparse sub-parsers object."""
    parser = commands.add_parser(
        "analyze", help="attention rollout, attention distance and embedding figures for images")
    parser.add_argument("images", nargs="+", help="image files or folders of images")
    add_model_options(parser)
    parser.add_argument("--output-dir", default="analysis", help="where the PNGs go")
    parser.add_argument("--max-images", type=int, default=128,
                        help="images used for the attention distance (the paper uses 128)")
    parser.add_argument("--rollout-images", type=int, default=6,
                        help="images shown in the rollout figure")
    parser.add_argument("--batch-size", type=int, default=8)
    add_max_pixels_option(parser)
    parser.set_defaults(run=run)
    return parser


def run(args):
    import numpy as np

    from keras_vit import analysis
    from keras_vit.preprocessing import image_paths, load_image, preprocess_input

    paths = image_paths(args.images)[:args.max_images]
    model = load_model(args)
    probe = analysis.AttentionProbe(model)
    pixels = np.stack([load_image(path, probe.image_size, channels=model.input_shape[-1],
                                  max_pixels=args.max_pixels)
                       for path in paths])
    images = preprocess_input(pixels)

    os.makedirs(args.output_dir, exist_ok=True)
    shown = slice(0, args.rollout_images)
    rollout = probe.attention_rollout(images[shown], batch_size=args.batch_size)
    written = [analysis.plot_attention_rollout(
        os.path.join(args.output_dir, "attention_rollout.png"), pixels[shown], rollout.upsampled,
        titles=[os.path.basename(p) for p in paths[shown]])]
    distances = probe.mean_attention_distance(images, batch_size=args.batch_size)
    written.append(analysis.plot_mean_attention_distance(
        os.path.join(args.output_dir, "attention_distance.png"), distances, probe.image_size,
        title=f"{model.name}, {len(images)} images"))
    similarity = analysis.position_embedding_similarity(model)
    written.append(analysis.plot_position_embedding_similarity(
        os.path.join(args.output_dir, "position_embedding_similarity.png"), similarity,
        title=f"{model.name} position embedding similarity"))
    kernel_shape = model.get_layer("embedding").kernel.shape
    components = None
    if kernel_shape[2] in (1, 3):
        components = analysis.patch_embedding_components(
            model, num_components=min(28, kernel_shape[-1], int(np.prod(kernel_shape[:3]))))
        written.append(analysis.plot_patch_embedding_components(
            os.path.join(args.output_dir, "patch_embedding_components.png"),
            components.components, title=f"{model.name} patch-embedding components"))
    report = {
        "model": model.name, "images": len(images), "image_size": list(probe.image_size),
        "grid_size": list(probe.grid_size), "stride": list(probe.stride),
        "mean_attention_distance_pixels": np.round(distances, 3).tolist(),
        "patch_components_explained_variance": None if components is None else
        np.round(components.explained_variance_ratio, 5).tolist(),
    }
    written.append(os.path.join(args.output_dir, "analysis.json"))
    with atomic_open(written[-1], "w", encoding="utf-8") as file:
        json.dump(report, file, indent=2)
    for path in written:
        print(path)
    return 0
