"""The one check of an argument that counts something: a positive integer."""

import numbers

import numpy as np

from keras_vit.errors import ArgumentError

__all__ = ["positive_int"]


def positive_int(value, name, error=ArgumentError, what="a positive int"):
    """`value` as an int (NumPy integers too); a bool, a float or a value below 1 raises
    `error("{name} must be {what}, got {value!r}.")`, each caller keeping its wording."""
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, numbers.Integral) \
            or value <= 0:
        raise error(f"{name} must be {what}, got {value!r}.")
    return int(value)
