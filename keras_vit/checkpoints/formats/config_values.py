"""Checks of the values a source's config gives, before a model is built from them.

A NaN epsilon builds a model whose every output is NaN; a head count given as a string
fails deep inside Keras; a layer count of a million builds for ever, and 1e400 is an infinite
float that no integer conversion survives. Every field a format reads from a config is checked
here for its type and range, naming the file and the field in one line; a format declares its
fields as a table ({field: check}) and `check_fields` applies it, so a new format (a family's
config) reuses the checks and the caps. `check_architecture` then runs the memory check
(keras_vit/memory.py) on the architecture the config describes, before anything is built.
"""

import math

from keras_vit.checkpoints.errors import CheckpointError
from keras_vit.errors import SizeError

__all__ = ["check_object", "check_fields", "check_architecture", "check_geometry", "count", "counts",
           "number",
           "epsilon", "flag", "mapping", "optional", "string", "strings", "MAX_LAYERS", "MAX_WIDTH",
           "MAX_HEADS", "MAX_PIXELS", "MAX_CLASSES", "MAX_STAGES", "LAYERS", "WIDTH", "HEADS", "PIXELS",
           "CLASSES"]

# Upper bounds of a config's sizes. Every released ViT is far inside them (ViT-22B: 48 layers,
# width 6,144, MLP 24,576, 48 heads; the largest image sizes 1,024 pixels; ImageNet-21k's
# 21,843 classes), and a model inside them is still checked against memory; past them a config
# is refused before anything loops over, or allocates by, the value.
MAX_LAYERS = 256  # encoder blocks, or a ResNet stage's units (ResNet-1001: 111 a stage)
MAX_WIDTH = 2 ** 18  # a hidden, MLP or channel size
MAX_HEADS = 1024
MAX_PIXELS = 2 ** 14  # an image side, or a patch side
MAX_CLASSES = 2 ** 22
MAX_STAGES = 8  # ResNet stages (BiT and the hybrids have 3 or 4)


def check_object(path, config):
    """`config`, if it is a JSON object; else a one-line refusal naming `path`."""
    if not isinstance(config, dict):
        raise CheckpointError(f"{path} holds a JSON {type(config).__name__}, not the object a "
                              "config is.")
    return config


def _shown(value, limit=60):
    """A value for a message: never a dump of whatever a lying file holds."""
    text = repr(value)
    return text if len(text) <= limit else text[:limit] + "..."


class _Refusal(Exception):
    """What is wrong with one value ("a positive integer up to 256 was expected")."""


def _is_int(value):
    return isinstance(value, int) and not isinstance(value, bool)  # JSON true is not a count


def count(cap, low=1):
    """A check: a positive integer (from `low`) up to `cap`."""
    def check(value):
        if not _is_int(value) or not low <= value <= cap:
            kind = "a positive integer" if low == 1 else f"an integer from {low}"
            raise _Refusal(f"{kind} up to {cap:,} was expected")
        return value
    return check


def counts(cap, most, least=1, low=1):
    """A check: a list of `least` to `most` integers from `low` up to `cap` (positive ones by
    default)."""
    def check(value):
        if (not isinstance(value, list) or not least <= len(value) <= most
                or not all(_is_int(v) and low <= v <= cap for v in value)):
            length = most if least == most else f"{least} to {most}"
            kind = "positive integers" if low == 1 else f"integers from {low}"
            raise _Refusal(f"a list of {length} {kind} up to {cap:,} was expected")
        return value
    return check


def number(low, high, low_open=True):
    """A check: a finite number above `low` (or at it, with `low_open=False`) up to `high`."""
    def check(value):
        if (isinstance(value, bool) or not isinstance(value, (int, float))
                or not math.isfinite(value) or not (low < value if low_open else low <= value)
                or value > high):
            raise _Refusal(f"a finite number {'above' if low_open else 'from'} {low} up to "
                           f"{high:,} was expected")
        return value
    return check


def epsilon(value):
    """A check: a LayerNorm epsilon, a finite number between 0 and 1."""
    if (isinstance(value, bool) or not isinstance(value, (int, float))
            or not math.isfinite(value) or not 0 < value < 1):
        raise _Refusal("a LayerNorm epsilon is a finite number between 0 and 1")
    return value


def flag(value):
    """A check: true or false."""
    if not isinstance(value, bool):
        raise _Refusal("true or false was expected")
    return value


def string(value):
    """A check: a string."""
    if not isinstance(value, str):
        raise _Refusal("a string was expected")
    return value


def mapping(value):
    """A check: a JSON object."""
    if not isinstance(value, dict):
        raise _Refusal("an object was expected")
    return value


def strings(value):
    """A check: a list of strings."""
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise _Refusal("a list of strings was expected")
    return value


def optional(check):
    """`check`, or null."""
    def check_or_null(value):
        return None if value is None else check(value)
    return check_or_null


# The checks of a config's sizes, by what the size is (count's caps above).
LAYERS, WIDTH, HEADS = count(MAX_LAYERS), count(MAX_WIDTH), count(MAX_HEADS)
PIXELS, CLASSES = count(MAX_PIXELS), count(MAX_CLASSES)


def check_fields(path, config, fields, prefix="", required=()):
    """Applies {field: check} to `config` (a dict), refusing the first bad value in one line
    naming `path` and the field (`prefix` + field: "backbone_config."); a field absent from
    `config` is left to the reader's defaults, unless it is `required`."""
    for field in required:
        if field not in config:
            raise CheckpointError(f"{path}: {prefix}{field} is missing; the config of the model "
                                  "it describes sets it.")
    for field, check in fields.items():
        if field in config:
            try:
                check(config[field])
            except _Refusal as refusal:
                raise CheckpointError(f"{path}: {prefix}{field} is {_shown(config[field])}; "
                                      f"{refusal}.") from None
    return config


def check_geometry(path, variant):
    """Refuses, in one line naming `path`, an architecture no model has: a width, depth, head
    count, patch or MLP width below one (a config's zero would divide by zero later), or
    heads that do not divide the width."""
    _check_positive_sizes(path, variant)
    _check_heads_divide(path, variant)


def _check_positive_sizes(path, variant):
    sizes = {"width": variant.width, "depth": variant.depth, "heads": variant.heads,
             "patch_size": variant.patch_size, "mlp_dim": variant.mlp_dim}
    for name, value in sizes.items():
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise CheckpointError(f"{path} describes a model of {name} {value!r}; a positive "
                                  "integer is needed.")


def _check_heads_divide(path, variant):
    if variant.width % variant.heads:
        raise CheckpointError(f"{path} describes {variant.heads} attention heads, which do not "
                              f"divide its width {variant.width}.")


def check_architecture(path, variant, image_size=None, classes=None):
    """Refuses, in one line naming `path`, the architecture a config describes when it
    cannot fit in this machine's memory (keras_vit/memory.py) or no model has it
    (check_geometry), before anything is built."""
    from keras_vit.memory import check_fits

    _check_positive_sizes(path, variant)
    try:
        check_fits(variant, image_size, classes)
    except SizeError as error:
        raise CheckpointError(f"{path} describes a model this machine cannot hold: "
                              f"{error}") from None
    _check_heads_divide(path, variant)
