"""What every sub-command shares: one error policy and one set of model flags.

The error policy: a problem with the user's input (a bad argument, a missing or
unreadable file, weights that cannot be had) ends the command with one line on
stderr, `keras-vit <command>: error: <what>`, and exit status 2. Anything else
is a bug and keeps its traceback.
"""

import argparse
import os
import sys

__all__ = ["CommandError", "Parser", "add_model_options", "add_max_pixels_option", "load_model",
           "report_errors", "user_errors"]


class CommandError(Exception):
    """A problem with the command's input, reported as one line on stderr."""


class Parser(argparse.ArgumentParser):
    """argparse, with usage errors reported under the one error policy."""

    def error(self, message):
        self.exit(2, f"{self.prog}: error: {message} (see {self.prog} --help)\n")


def user_errors():
    """The exceptions a command reports as one line: bad input, missing files, no network."""
    from keras_vit.checkpoints import WeightsUnavailableError
    from keras_vit.data import DatasetUnavailableError

    return (CommandError, ValueError, OSError, WeightsUnavailableError, DatasetUnavailableError)


def report_errors(prog, run, args):
    """Runs `run(args)`; a user error becomes one line on stderr and exit status 2."""
    try:
        return run(args)
    except user_errors() as error:
        # Some messages (a checkpoint report, the offline advice) span lines: fold them.
        text = " ".join(line.strip() for line in str(error).splitlines() if line.strip())
        print(f"{prog}: error: {text}", file=sys.stderr)
        return 2


def add_model_options(parser, model_help=None, required=True):
    """--model and the flags that, with it, say which model to build."""
    if model_help is not False:
        parser.add_argument("--model", required=required,
                            help=model_help or 'an architecture ("B/16", "ViT-B_16", "R50+B/16", '
                                               "...) or a saved .keras file")
    parser.add_argument("--weights",
                        help='a catalogue tag ("imagenet21k+imagenet2012", ...) or an .npz file '
                             "(default: random weights)")
    parser.add_argument("--image-size", type=int, nargs="+", metavar="PIXELS",
                        help="input size: one number, or height and width (default: the "
                             "weights', else 224)")
    parser.add_argument("--classes", type=int, help="head size (default: the weights')")


def add_max_pixels_option(parser, what="images"):
    """--max-pixels: the pixel budget of every image decoded (keras_vit.preprocessing)."""
    from keras_vit.preprocessing import MAX_PIXELS  # no TensorFlow: it loads on first decode

    def positive(text):
        value = int(text)
        if value <= 0:
            raise argparse.ArgumentTypeError(f"must be a positive number of pixels, got {text}")
        return value

    parser.add_argument("--max-pixels", type=positive, default=MAX_PIXELS, metavar="PIXELS",
                        help=f"refuse {what} whose header declares more pixels (width x height) "
                             f"than this, before decoding them (default: {MAX_PIXELS})")


MODEL_OPTIONS = ("weights", "image_size", "classes")


def given_model_options(args):
    """The model flags the user gave, spelled as on the command line."""
    return [f"--{name.replace('_', '-')}" for name in MODEL_OPTIONS
            if getattr(args, name, None) is not None]


def load_model(args):
    """The model `--model` (with --weights, --image-size, --classes) names."""
    import keras

    from keras_vit.models import ViT

    if args.model.endswith(".keras"):
        given = given_model_options(args)
        if given:
            raise CommandError(f"{args.model} is a saved model; {', '.join(given)} cannot change it.")
        if not os.path.isfile(args.model):
            raise CommandError(f"No .keras file at {args.model}.")
        return keras.saving.load_model(args.model)
    return ViT(args.model, weights=args.weights, image_size=_image_size(args.image_size),
               classes=args.classes)


def _image_size(pixels):
    if pixels is None:
        return None
    if len(pixels) not in (1, 2):
        raise CommandError("--image-size takes one or two numbers: height [width].")
    return pixels[0] if len(pixels) == 1 else tuple(pixels)
