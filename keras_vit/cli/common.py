"""What every sub-command shares: one error policy and one set of model flags.

The error policy: the user's mistakes end the command with one line on stderr,
`keras-vit <command>: error: <what>`, and exit status 2. They are three kinds:
a usage error argparse finds (`Parser.error`); an error of keras_vit's own
family (`keras_vit.KerasViTError`: a bad argument, a file that is not an image
or checkpoint, weights that cannot be had); and an `OSError` about a path the
user named on the command line (a folder given where a file is expected, a file
that cannot be read). Anything else, a plain `ValueError` or an `OSError` about
some other file included, is a bug and keeps its traceback.
"""

import argparse
import itertools
import os
import sys

from keras_vit.errors import CommandError, KerasViTError

__all__ = ["CommandError", "Parser", "add_model_options", "add_max_pixels_option",
           "add_execution_option", "add_precision_option", "add_resize_option",
           "add_max_tokens_option", "load_model", "report_errors", "positive_int", "image_size"]


class Parser(argparse.ArgumentParser):
    """argparse, with usage errors reported under the one error policy.

    `populate(parser)`, when given, adds the arguments the first time this parser
    parses or prints its help: a sub-command whose flags' help text needs Keras or
    TensorFlow (recipes, presets) costs nothing until that sub-command is used, so
    `keras-vit --help` stays fast.
    """

    def __init__(self, *args, populate=None, **kwargs):
        super().__init__(*args, **kwargs)
        self._populate = populate

    def complete(self):
        """Adds the deferred arguments now (once); returns the parser."""
        populate, self._populate = self._populate, None
        if populate is not None:
            populate(self)
        return self

    def parse_known_args(self, args=None, namespace=None):
        args = _join_sizes(sys.argv[1:] if args is None else list(args))
        return super(Parser, self.complete()).parse_known_args(args, namespace)

    def format_usage(self):
        return super(Parser, self.complete()).format_usage()

    def format_help(self):
        return super(Parser, self.complete()).format_help()

    def error(self, message):
        self.exit(2, f"{self.prog}: error: {message}{_choice_hint(message)} (see {self.prog} --help)\n")


def _join_sizes(args):
    """`--image-size H W` as the one token `--image-size=HxW`: argparse's `nargs="+"` would
    also take the image path after `--image-size 32`, and `nargs` cannot say "one or two"."""
    joined, i = [], 0
    while i < len(args):
        if args[i] == "--image-size":
            numbers = list(itertools.takewhile(str.isdigit, args[i + 1:i + 3]))
            if numbers:
                joined.append(f"--image-size={'x'.join(numbers)}")
                i += 1 + len(numbers)
                continue
        joined.append(args[i])
        i += 1
    return joined


def image_size(text):
    """`--image-size`'s value: "224" -> 224, "384x512" -> (384, 512)."""
    try:
        pixels = [int(part) for part in text.split("x")]
    except ValueError:
        pixels = []
    if len(pixels) not in (1, 2) or min(pixels) <= 0:
        raise argparse.ArgumentTypeError(f"takes one or two positive numbers (height [width]), "
                                         f"got {text!r}")
    return pixels[0] if len(pixels) == 1 else tuple(pixels)


def _choice_hint(message):
    """argparse's "invalid choice: 'x' (choose from ...)" gains a "did you mean"."""
    import re

    from keras_vit._support.names import did_you_mean

    found = re.search(r"invalid choice: '(.*?)' \(choose from (.*)\)", message)
    if not found:
        return ""
    choices = [c.strip().strip("'\"") for c in found.group(2).split(",")]
    return did_you_mean(found.group(1), choices)


def report_errors(prog, run, args):
    """Runs `run(args)`; a user error becomes one line on stderr and exit status 2."""
    try:
        return run(args)
    except KerasViTError as error:
        text = _with_flag(str(error), getattr(error, "parameter", None), args)
    except OSError as error:
        if not _names_a_given_path(error, args):
            raise
        names = " -> ".join(str(name) for name in (error.filename, error.filename2) if name is not None)
        text = f"{names}: {error.strerror or error}"
    except Exception as error:  # out of memory only; anything else is re-raised
        if not _out_of_memory(error):
            raise
        # The flags given, else those the command has: never one it lacks.
        sizes = ([name for name in SIZE_OPTIONS if getattr(args, name, None)]
                 or [name for name in SIZE_OPTIONS[:2] if hasattr(args, name)])
        reason = (str(error).strip().splitlines() or [""])[0][:200]
        text = (f"out of memory ({type(error).__name__}: {reason}); retry with a smaller "
                f"{' or '.join('--' + name.replace('_', '-') for name in sizes)}")
    # Some messages (a checkpoint report, the offline advice) span lines: fold them.
    text = " ".join(line.strip() for line in text.splitlines() if line.strip())
    print(f"{prog}: error: {text}", file=sys.stderr)
    return 2


# The flags whose smaller values need less memory, named in the out-of-memory advice when given
# (a LoRA run's factors and their optimizer slots grow with --lora-rank, export's calibration
# pixels with --calibration-images).
SIZE_OPTIONS = ("batch_size", "image_size", "lora_rank", "classes", "calibration_images")


def _out_of_memory(error):
    """Python's MemoryError, or TensorFlow's ResourceExhaustedError (named, not imported:
    a command that never started TensorFlow cannot have raised it)."""
    return isinstance(error, MemoryError) or any(
        cls.__name__ == "ResourceExhaustedError" for cls in type(error).__mro__)


def _with_flag(text, parameter, args):
    """A message naming a library parameter ("image_size 65536 ...") names the command's flag."""
    if parameter and hasattr(args, parameter):
        return text.replace(parameter, f"--{parameter.replace('_', '-')}", 1)
    return text


def _names_a_given_path(error, args):
    """Whether the `OSError` is about a path among the values of the command line's arguments,
    or a path inside a folder among them (an unreadable image in the folder given to predict)."""
    given = set()
    for value in vars(args).values():
        for item in value if isinstance(value, (list, tuple)) else [value]:
            if isinstance(item, str) and item:
                given.add(os.path.abspath(item))
    about = [os.path.abspath(name) for name in (error.filename, error.filename2)
             if isinstance(name, (str, os.PathLike))]
    return any(name == path or (os.path.isdir(path) and name.startswith(os.path.join(path, "")))
               for name in about for path in given)


def add_model_options(parser, model_help=None, required=True):
    """--model and the flags that, with it, say which model to build."""
    if model_help is not False:
        parser.add_argument("--model", required=required,
                            help=model_help or 'an architecture ("B/16", "ViT-B_16", "R50+B/16", '
                                               '"BiT-R50x1", ...) or a saved .keras file')
    parser.add_argument("--weights",
                        help='a catalogue tag ("imagenet21k+imagenet2012", ...) or an .npz file '
                             "(default: random weights)")
    parser.add_argument("--image-size", type=image_size, metavar="PIXELS",
                        help="input size: one number, or height and width (384 512) (default: "
                             "the weights', else 224)")
    parser.add_argument("--classes", type=positive_int, help="head size (default: the weights')")


def positive_int(text):
    """An argparse type: a whole number above zero ("0", "-1", "2.5" are refused)."""
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value <= 0:
        raise argparse.ArgumentTypeError(f"must be a positive whole number, got {text!r}")
    return value


def add_max_pixels_option(parser, what="images"):
    """--max-pixels: the pixel budget of every image decoded (keras_vit.preprocessing)."""
    from keras_vit.preprocessing import MAX_PIXELS  # no TensorFlow: it loads on first decode

    parser.add_argument("--max-pixels", type=positive_int, default=MAX_PIXELS, metavar="PIXELS",
                        help=f"refuse {what} whose header declares more pixels (width x height) "
                             f"than this, before decoding them (default: {MAX_PIXELS})")


def add_execution_option(parser, what="the model"):
    """--execution: graph or XLA on a CPU with TensorFlow (keras_vit.runtime.execution)."""
    from keras_vit.runtime.execution import ENVIRONMENT_VARIABLE, EXECUTION_MODES

    parser.add_argument("--execution", choices=EXECUTION_MODES, default=None,
                        help=f"how TensorFlow runs {what} on a CPU: auto times graph and XLA "
                             f"once for this machine and shape and keeps the faster (default: "
                             f"${ENVIRONMENT_VARIABLE}, else auto)")


def add_precision_option(parser, what="the model", auto_help=None):
    """--precision: float32, bfloat16 (mixed_bfloat16) or auto (keras_vit.runtime.precision)."""
    from keras_vit.runtime.precision import PRECISIONS

    parser.add_argument("--precision", choices=PRECISIONS, default=None,
                        help=f"what {what} computes in: bfloat16 runs it under Keras' "
                             "mixed_bfloat16 and records its top-1 agreement and largest logit "
                             "difference with float32; " + (auto_help or
                             "auto picks bfloat16 only where the hardware has it natively, it "
                             "is timed faster and it agrees with float32 on >= 99.5%% of the "
                             "first batch") + " (default: float32)")


def add_resize_option(parser):
    """--resize: stretch, crop or aspect_crop, overriding the model's preprocessing of record."""
    from keras_vit.preprocessing_record import RESIZE_MODES

    parser.add_argument("--resize", choices=RESIZE_MODES, default=None,
                        help="how an image becomes the model's size: stretch (the whole image), "
                             "crop (the short side resized, then the centre cropped) or "
                             "aspect_crop (the largest centred region of the model's shape, "
                             "resized: keras-hub's), in the "
                             "interpolation the weights' source uses (default: the source's own, "
                             "recorded in the model: stretch for the official weights; a "
                             "SavedModel keeps the resize it was exported with)")


def add_max_tokens_option(parser):
    """--max-tokens: a NaFlex model's sequence budget (keras_vit/runtime/naflex_inputs.py)."""
    parser.add_argument("--max-tokens", "--sequence-length", type=positive_int, default=None,
                        metavar="N", help="a NaFlex model's (SigLIP 2 NaFlex) sequence budget: "
                        "each image at its own aspect ratio in at most N patches, e.g. 256, 576, "
                        "784 or 1024 (default: the model's stored grid, 256)")


MODEL_OPTIONS = ("weights", "image_size", "classes")


def given_model_options(args):
    """The model flags the user gave, spelled as on the command line."""
    return [f"--{name.replace('_', '-')}" for name in MODEL_OPTIONS
            if getattr(args, name, None) is not None]


def load_model(args):
    """The model `--model` (with --weights, --image-size, --classes) names, through
    `keras_vit.models.factory.load`: an architecture, a `.keras` file or a training run's
    folder (a SavedModel folder is --saved-model's); the flags a saved model ignores, and sizes
    that cannot fit here, are refused naming their flag."""
    from keras_vit.models.factory import keras_file, load

    if keras_file(args.model) is not None:
        given = given_model_options(args)
        if given:
            raise CommandError(f"{args.model} is a saved model; {', '.join(given)} cannot change it.")
        # A model.keras from `keras-vit train` names its optimizer (keras_vit's SGD or
        # AdamW), which `import keras_vit` registers; under the command keras_vit loads on
        # first use, so it is registered here.
        import keras_vit.training.optimizers  # noqa: F401
        return load(args.model)
    from keras_vit.memory import check_fits
    from keras_vit.variants import get_architecture

    architecture = get_architecture(args.model)  # a ViT variant, or a BiT ("BiT-R50x1")
    # The constructors check too; here the batch joins in, and the flag is named.
    check_fits(architecture, args.image_size, args.classes, getattr(args, "batch_size", None) or 1)
    return load(args.model, weights=args.weights, image_size=args.image_size, classes=args.classes)


def labels_beside(model_path):
    """The labels.txt `keras-vit train` wrote beside a .keras file (a run folder's
    model.keras), or None."""
    from keras_vit.models.factory import keras_file

    model_file = keras_file(model_path) if model_path else None
    if model_file is None:
        return None
    path = os.path.join(os.path.dirname(os.path.abspath(model_file)), "labels.txt")
    return path if os.path.isfile(path) else None


def warn(prog, message):
    """A warning under the policy's format: one line on stderr; the command goes on."""
    print(f"{prog}: warning: {message}", file=sys.stderr)
