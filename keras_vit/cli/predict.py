"""`keras-vit predict`: the top classes of image files, from a model or an exported SavedModel.

    keras-vit predict cat.jpg dog.png --model B/16 --weights augreg-in21k-ft-in1k-224
    keras-vit predict cat.jpg --saved-model serving/vit

Prints, per image, its path and then one line per class: the probability and
the label: the names of --labels FILE, else the labels.txt `keras-vit train`
wrote beside a .keras model, else ImageNet names for 1000- and 21843-class
heads, else "class <index>". An architecture without --weights has random
weights: its predictions mean nothing, and a warning on stderr says so.
"""

import os

import numpy as np

from keras_vit.cli.common import (
    CommandError,
    add_max_pixels_option,
    add_model_options,
    given_model_options,
    labels_beside,
    load_model,
    positive_int,
    warn,
)

__all__ = ["add_parser", "run", "predict"]


def add_parser(commands):
    """Registers `predict` on an argparse sub-parsers object."""
    parser = commands.add_parser("predict", help="print the top classes of image files",
                                 populate=_add_arguments)
    parser.set_defaults(run=run)
    return parser


def _add_arguments(parser):
    """On first use: the description names the image formats, which Keras' module holds."""
    from keras_vit.preprocessing import IMAGE_FORMATS

    parser.description = f"Print the most probable classes of {IMAGE_FORMATS} images."
    parser.add_argument("images", nargs="+", metavar="IMAGE", help="image files")
    source = parser.add_mutually_exclusive_group(required=True)
    source.add_argument("--model", help='an architecture ("B/16", ...) or a saved .keras file')
    source.add_argument("--saved-model", metavar="DIR",
                        help="an exported SavedModel: a version folder, or the base folder "
                             "(its highest version is used). A SavedModel is a program: it "
                             "runs whatever its graph does, so load only one you trust")
    add_model_options(parser, model_help=False)
    parser.add_argument("--labels", metavar="FILE",
                        help="class names, one per line (default: the labels.txt beside a "
                             ".keras --model, else ImageNet's for 1000- and 21843-class heads)")
    parser.add_argument("--top", type=positive_int, default=5,
                        help="classes printed per image (default: 5)")
    add_max_pixels_option(parser, "images (with --model; a SavedModel keeps the limit it was "
                                  "exported with)")


def run(args):
    for path, rows in predict(args):
        print(path)
        for probability, label in rows:
            print(f"  {probability:.4f}  {label}")
    return 0


def predict(args):
    """[(image path, [(probability, label), ...] best first), ...] for `args.images`."""
    if args.top <= 0:
        raise CommandError(f"--top must be positive, got {args.top}.")
    for path in args.images:
        if not os.path.isfile(path):
            raise CommandError(f"No image file at {path}.")
    labels = None
    labels_file = args.labels or (None if args.saved_model else labels_beside(args.model))
    if labels_file:
        from keras_vit.labels import read_labels
        labels = read_labels(labels_file)
    if args.saved_model:
        given = given_model_options(args)
        if given:
            raise CommandError(f"{', '.join(given)} apply to --model, not to --saved-model.")
        return _predict_saved_model(args.saved_model, args.images, labels, args.top)
    model = load_model(args)  # first: a refused --model, --image-size or --classes is the one line
    if not args.model.endswith(".keras") and args.weights is None:
        warn("keras-vit predict", f"--model {args.model} without --weights has random weights, so "
             "these predictions mean nothing; add --weights (keras-vit info lists them).")
    return _predict_keras(model, args.images, labels, args.top, args.max_pixels)


def _predict_keras(model, paths, labels, top, max_pixels):
    import keras

    from keras_vit.export import has_softmax_head, model_input
    from keras_vit.labels import imagenet_label_names
    from keras_vit.preprocessing import load_image

    size = model.input_shape[1:3]
    pixels = np.stack([load_image(path, size, channels=model.input_shape[-1], max_pixels=max_pixels)
                       for path in paths])
    # A direct call: for a handful of images, model.predict's compilation costs more than it saves.
    to_model_input = model_input(model)
    scores = np.concatenate([keras.ops.convert_to_numpy(model(to_model_input(pixels[i:i + 32]),
                                                              training=False))
                             for i in range(0, len(pixels), 32)])
    probabilities = scores if has_softmax_head(model) else keras.ops.convert_to_numpy(
        keras.ops.softmax(scores.astype(np.float32), axis=-1))
    classes = probabilities.shape[-1]
    labels = _check_labels(labels, classes) or imagenet_label_names(classes)
    return [(path, _top(row, top, labels)) for path, row in zip(paths, probabilities)]


def _predict_saved_model(folder, paths, labels, top):
    import tensorflow as tf

    from keras_vit.preprocessing import not_an_image

    signature = _load_serve_bytes(tf, folder)
    results = []
    for path in paths:
        with open(path, "rb") as f:
            data = f.read()
        try:
            outputs = signature(image_bytes=tf.constant([data]))
        except tf.errors.InvalidArgumentError as error:
            raise not_an_image(path, error) from error
        probabilities = outputs["probabilities"].numpy()[0]
        names = _check_labels(labels, probabilities.shape[-1])
        if names is None and "labels" in outputs:  # the names the export gave its own top-k
            names = dict(zip(outputs["class_ids"].numpy()[0].tolist(),
                             (s.decode("utf-8") for s in outputs["labels"].numpy()[0])))
        results.append((path, _top(probabilities, top, names)))
    return results


def _load_serve_bytes(tf, folder):
    if not os.path.isdir(folder):
        raise CommandError(f"No SavedModel folder at {folder}.")
    if not os.path.exists(os.path.join(folder, "saved_model.pb")):
        versions = [int(n) for n in os.listdir(folder)
                    if n.isdigit() and os.path.exists(os.path.join(folder, n, "saved_model.pb"))]
        if not versions:
            raise CommandError(f"{folder} holds no saved_model.pb, nor version folders with one.")
        folder = os.path.join(folder, str(max(versions)))
    signatures = tf.saved_model.load(folder).signatures
    if "serve_bytes" not in signatures:
        raise CommandError(f"{folder} has no serve_bytes signature (it has {sorted(signatures)}); "
                           "export it with keras_vit.export_saved_model.")
    return signatures["serve_bytes"]


def _check_labels(labels, classes):
    if labels is not None and len(labels) != classes:
        raise CommandError(f"--labels names {len(labels)} classes, but the model has {classes}.")
    return labels


def _top(probabilities, k, names):
    """The k best (probability, name) pairs; `names` is a list or {class id: name}, or None."""
    names = dict(enumerate(names)) if isinstance(names, (list, tuple)) else names or {}
    best = np.argsort(-probabilities, kind="stable")[:k]
    return [(float(probabilities[i]), names.get(int(i), f"class {i}")) for i in best]
