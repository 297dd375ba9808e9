"""`keras-vit analyze`: write the paper-style analysis figures for a set of images.

    keras-vit analyze photos/ --model ViT-B_16 --weights imagenet21k --output-dir analysis/
    keras-vit analyze a.jpg b.png --model my_model.keras

Writes attention_rollout.png, attention_distance.png,
position_embedding_similarity.png, patch_embedding_components.png (plain
models with 1 or 3 input channels) and analysis.json (the numbers).
"""

import json
import os

__all__ = ["add_parser"]

_IMAGE_SUFFIXES = (".jpg", ".jpeg", ".png", ".bmp", ".gif", ".webp")


def add_parser(commands):
    """Registers the `analyze` sub-command on an argparse sub-parsers object."""
    parser = commands.add_parser(
        "analyze", help="attention rollout, attention distance and embedding figures for images")
    parser.add_argument("images", nargs="+", help="image files or folders of images")
    parser.add_argument("--model", required=True,
                        help='a variant name ("B/16", "ViT-B_16") or a saved .keras model file')
    parser.add_argument("--weights", default=None,
                        help="catalogue tag or .npz path for a variant name (default: random)")
    parser.add_argument("--image-size", type=int, nargs="+", default=None, metavar="PIXELS",
                        help="height [width] for a variant name (default: the weights')")
    parser.add_argument("--output-dir", default="analysis", help="where the PNGs go")
    parser.add_argument("--max-images", type=int, default=128,
                        help="images used for the attention distance (the paper uses 128)")
    parser.add_argument("--rollout-images", type=int, default=6,
                        help="images shown in the rollout figure")
    parser.add_argument("--batch-size", type=int, default=8)
    parser.set_defaults(run=run)
    return parser


def run(args):
    import keras  # noqa: PLC0415  (keep `keras-vit --help` fast)
    import numpy as np  # noqa: PLC0415

    from keras_vit import analysis  # noqa: PLC0415
    from keras_vit.models import ViT  # noqa: PLC0415
    from keras_vit.preprocessing import preprocess_input  # noqa: PLC0415

    paths = _image_paths(args.images)[:args.max_images]
    if args.model.endswith(".keras"):
        if args.weights or args.image_size:
            raise SystemExit("--weights and --image-size apply to a variant name, not a "
                             ".keras file.")
        model = keras.saving.load_model(args.model)
    else:
        size = args.image_size
        if size is not None and len(size) not in (1, 2):
            raise SystemExit("--image-size takes one or two numbers: height [width].")
        size = None if size is None else (size[0] if len(size) == 1 else tuple(size))
        model = ViT(args.model, weights=args.weights, image_size=size)
    probe = analysis.AttentionProbe(model)
    channels = model.input_shape[-1]
    pixels = np.stack([
        keras.utils.img_to_array(keras.utils.load_img(
            path, target_size=probe.image_size,
            color_mode="grayscale" if channels == 1 else "rgb")) for path in paths])
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
    with open(written[-1], "w", encoding="utf-8") as file:
        json.dump(report, file, indent=2)
    for path in written:
        print(path)
    return 0


def _image_paths(entries):
    paths = []
    for entry in entries:
        if os.path.isdir(entry):
            paths += sorted(os.path.join(entry, name) for name in os.listdir(entry)
                            if name.lower().endswith(_IMAGE_SUFFIXES))
        elif os.path.isfile(entry):
            paths.append(entry)
        else:
            raise SystemExit(f"No such image file or folder: {entry}")
    if not paths:
        raise SystemExit(f"No images found in {', '.join(entries)}.")
    return paths
