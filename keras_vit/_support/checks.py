"""The checks of a numeric argument: a positive integer that counts something, and a finite
real number in a range (a rate, an alpha, a temperature)."""

import math
import numbers

import numpy as np

from keras_vit.errors import ArgumentError

__all__ = ["positive_int", "int_in", "real_in"]


def positive_int(value, name, error=ArgumentError, what="a positive int"):
    """`value` as an int (NumPy integers too); a bool, a float or a value below 1 raises
    `error("{name} must be {what}, got {value!r}.")`, each caller keeping its wording."""
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, numbers.Integral) \
            or value <= 0:
        raise error(f"{name} must be {what}, got {value!r}.")
    return int(value)


def int_in(value, name, low, high, error=ArgumentError):
    """`value` as an int when it is an integer in [low, high]; else one line naming `name`."""
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, numbers.Integral) \
            or not low <= value <= high:
        raise error(f"{name} must be an integer in [{low:,}, {high:,}], got {value!r}.")
    return int(value)


def real_in(value, name, low, high, low_open=False, high_open=False, error=ArgumentError,
            what=None):
    """`value` as a float when it is a finite real number in the interval from `low` to
    `high` (each end closed unless said open); else one line naming `name` and `what` it
    must be (default: a finite number in the interval)."""
    ok = not isinstance(value, (bool, np.bool_)) and isinstance(value, numbers.Real) \
        and math.isfinite(value) and (low < value if low_open else low <= value) \
        and (value < high if high_open else value <= high)
    if not ok:
        interval = f"{'(' if low_open else '['}{low:g}, {high:g}{')' if high_open else ']'}"
        raise error(f"{name} must be {what or 'a finite number in ' + interval}, got {value!r}.")
    return float(value)
