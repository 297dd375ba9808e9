"""Checks of the numbers a source's config.json gives, before a model is built from them.

A NaN epsilon builds a model whose every output is NaN; a head count given as a string
fails deep inside Keras. Each bad value is refused here, naming the file and the field.
"""

import math

from keras_vit.checkpoints.errors import CheckpointError

__all__ = ["check_object", "check_config_values"]


def check_object(path, config):
    """`config`, if it is a JSON object; else a one-line refusal naming `path`."""
    if not isinstance(config, dict):
        raise CheckpointError(f"{path} holds a JSON {type(config).__name__}, not the object a "
                              "config is.")
    return config


def check_config_values(path, config, counts=(), epsilons=()):
    """Refuses a field of `counts` that is not a positive integer, or of `epsilons` that is
    not a finite positive number below 1 (a LayerNorm epsilon); absent fields are left to
    the reader's defaults."""
    for field in counts:
        value = config.get(field)
        if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 1):
            raise CheckpointError(f"{path}: {field} is {value!r}; a positive integer was expected.")
    for field in epsilons:
        value = config.get(field)
        if value is None:
            continue
        if (isinstance(value, bool) or not isinstance(value, (int, float))
                or not math.isfinite(value) or not 0 < value < 1):
            raise CheckpointError(f"{path}: {field} is {value!r}; a LayerNorm epsilon is a finite "
                                  "number between 0 and 1.")
