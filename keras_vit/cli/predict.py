"""`keras-vit predict`: the top classes of images, from a model or an exported SavedModel.

    keras-vit predict cat.jpg dog.png --model B/16 --weights augreg-in21k-ft-in1k-224
    keras-vit predict photos/ --model run/model.keras --output preds.csv
    keras-vit predict cat.jpg --saved-model serving/vit

Images are files, folders (their images, recursively), glob patterns, or .txt
files listing paths; they stream through `keras_vit.predict_images` in batches.
Without --output, prints per image its path and then one line per class: the
probability and the label (the names of --labels FILE, else the labels.txt
`keras-vit train` wrote beside a .keras model, else ImageNet names for 1000- and
21843-class heads, else "class <index>"). With --output preds.csv or .jsonl,
writes a row per image (a header first) and shows progress on stderr. An image
that cannot be read is a row with its error; the others go on, and the command
ends with exit status 1 and the count. An architecture without --weights has
random weights: its predictions mean nothing, and a warning on stderr says so.
"""

import contextlib
import json
import sys

from keras_vit._support.outputs import write_line
from keras_vit.cli.common import (
    CommandError,
    add_execution_option,
    add_max_pixels_option,
    add_max_tokens_option,
    add_model_options,
    add_precision_option,
    add_resize_option,
    given_model_options,
    labels_beside,
    load_model,
    positive_int,
    warn,
)

__all__ = ["add_parser", "run", "predict"]

DEFAULT_BATCH_SIZE = 32
# Ctrl-C's line (keras_vit/cli/main.py): the lines printed so far stay; a file is written whole
# once every image is done, and nothing records how far a run got.
INTERRUPTED = ("interrupted; predictions are not saved part-way (an --output file is written "
               "only once every image is done), so a re-run starts again from the first image")


def add_parser(commands):
    """Registers `predict` on an argparse sub-parsers object."""
    parser = commands.add_parser("predict", help="print the top classes of image files",
                                 populate=_add_arguments)
    parser.set_defaults(run=run, interrupted=INTERRUPTED)
    return parser


def _add_arguments(parser):
    """On first use: the description names the image formats, which Keras' module holds."""
    from keras_vit.preprocessing import IMAGE_FORMATS

    parser.description = f"Print the most probable classes of {IMAGE_FORMATS} images."
    parser.add_argument("images", nargs="+", metavar="IMAGE",
                        help="image files, folders (searched recursively), glob patterns, or "
                             ".txt files listing image paths one per line")
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
    parser.add_argument("--output", metavar="FILE",
                        help="write the predictions to a .csv or .jsonl file (a row per image, "
                             "a header first) instead of printing them, with progress on stderr")
    parser.add_argument("--batch-size", type=positive_int, default=DEFAULT_BATCH_SIZE,
                        help=f"images per model call (default: {DEFAULT_BATCH_SIZE})")
    add_max_pixels_option(parser, "images (with --model; a SavedModel keeps the limit it was "
                                  "exported with)")
    add_execution_option(parser, "a --model")
    add_precision_option(parser, "a --model")
    add_resize_option(parser)
    add_max_tokens_option(parser)


def run(args):
    output = args.output
    if output:
        from keras_vit.atomic import check_target

        if not output.lower().endswith((".csv", ".jsonl")):
            raise CommandError(f"--output must end in .csv or .jsonl, got {output!r}.")
        check_target(output, "--output")  # a folder, or a place nothing can be written: now
    results = predict(args)
    if getattr(args, "precision", None) not in (None, "float32"):
        results = _reporting_precision(results, output)
    progress = None
    if output:
        from keras_vit._support.progress import Progress

        progress = Progress("keras-vit predict", every=PROGRESS_EVERY)
    failed = total = 0
    with _writer(output, args.top) as write:
        for result in results:
            total += 1
            if result.error is not None:
                failed += 1
                write_line(f"keras-vit predict: error: {result.error}", sys.stderr)
            write(result)
            if progress:
                progress.update(total)
    if progress:
        progress.close()
    if failed:
        print(f"keras-vit predict: {failed} of {total} images could not be read.", file=sys.stderr)
        return 1
    return 0


PROGRESS_EVERY = 1000  # images between progress lines when stderr is not a terminal


def _writer(output, top):
    """A context giving `write(result)`: to the terminal, or to a .csv or .jsonl file
    (written whole or not at all, through keras_vit.atomic). A path that is not UTF-8 is
    written as keras_vit._support.outputs says: its bytes in the CSV and on stdout, JSON's
    \\udcXX escapes in JSONL; CSV text cells are spreadsheet-safe."""
    if not output:
        def show(result):
            if result.error is None:
                write_line(result.path, sys.stdout)
                for probability, label in result.top:
                    write_line(f"  {probability:.4f}  {label}", sys.stdout)
        return contextlib.nullcontext(show)
    if output.lower().endswith(".jsonl"):
        return _jsonl_writer(output)
    return _csv_writer(output, top)


@contextlib.contextmanager
def _jsonl_writer(output):
    from keras_vit._support.outputs import NAME_ERRORS
    from keras_vit.atomic import atomic_open

    with atomic_open(output, "w", encoding="utf-8", errors=NAME_ERRORS) as f:
        def write(result):
            # ensure_ascii: a non-UTF-8 name's bytes are \udcXX escapes, which json.loads and
            # os.fsencode turn back into the bytes.
            f.write(json.dumps({"path": result.path, "error": result.error,
                                "labels": [label for _, label in result.top],
                                "probabilities": [p for p, _ in result.top]}) + "\n")
        yield write


@contextlib.contextmanager
def _csv_writer(output, top):
    from keras_vit._support.outputs import csv_file

    header = ["path", "error", *[f"top{i}_{what}" for i in range(1, top + 1)
                                 for what in ("label", "probability")]]
    with csv_file(output, header) as write_row:
        def write(result):
            cells = [c for p, label in result.top for c in (label, p)]
            write_row([result.path, result.error, *cells, *[None] * (2 * top - len(cells))])
        yield write


def _reporting_precision(results, output):
    """`results`, passed on; once the first batch has run, the precision it ran in (and under
    bfloat16 its agreement with float32 on that batch) goes to stderr, and with --output to
    OUTPUT.precision.json."""
    reported = False
    for result in results:
        if not reported and results.precision is not None:
            reported = True
            record = results.precision
            measured = record.get("agreement")
            agreement = "" if measured is None else (
                f"; top-1 agreement with float32 {measured['top1_agreement']:.4f}, max logit "
                f"difference {measured['max_logit_difference']:.4g} on the first "
                f"{measured['images']} images")
            print(f"keras-vit predict: precision {record['precision']} ({record['reason']})"
                  f"{agreement}", file=sys.stderr)
            if output:
                from keras_vit.atomic import atomic_open

                with atomic_open(output + ".precision.json", "w", encoding="utf-8") as f:
                    json.dump(record, f, indent=2)
        yield result


def predict(args):
    """`keras_vit.predict_images`' results (`ImagePrediction`s) for `args.images`, a stream."""
    from keras_vit.runtime.inference import image_files, predict_images

    if args.top <= 0:
        raise CommandError(f"--top must be positive, got {args.top}.")
    # First: a source that names nothing is the one line; the files found are predicted on
    # as they are (a folder is walked once).
    images = image_files(args.images)
    labels = None
    labels_file = args.labels or (None if args.saved_model else labels_beside(args.model))
    if labels_file:
        from keras_vit.labels import read_labels
        labels = read_labels(labels_file)
    if args.saved_model:
        given = given_model_options(args)
        if given:
            raise CommandError(f"{', '.join(given)} apply to --model, not to --saved-model.")
        return predict_images(args.saved_model, images, args.batch_size, args.top, labels,
                              precision=args.precision, resize=args.resize,
                              max_tokens=args.max_tokens)
    model = load_model(args)  # first: a refused --model, --image-size or --classes is the one line
    from keras_vit.models.factory import keras_file

    if keras_file(args.model) is None and args.weights is None:
        warn("keras-vit predict", f"--model {args.model} without --weights has random weights, so "
             "these predictions mean nothing; add --weights (keras-vit info lists them).")
    if labels is not None and len(labels) != int(model.output_shape[-1]):
        raise CommandError(f"--labels names {len(labels)} classes, but the model has "
                           f"{int(model.output_shape[-1])}.")
    return predict_images(model, images, args.batch_size, args.top, labels, args.max_pixels,
                          execution=args.execution, precision=args.precision, resize=args.resize,
                          max_tokens=args.max_tokens)
