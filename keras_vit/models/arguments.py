"""The argument checks every model constructor shares (`ViT`, `BiT`, `ResNetV2`): one wording
for one mistake, whichever model is built."""

import numbers

import keras
import numpy as np

from keras_vit._support.checks import positive_int
from keras_vit.errors import ArgumentError

__all__ = ["input_arguments", "size_argument", "flag_argument", "classes_argument", "name_argument"]


def size_argument(image_size):
    """None, or `image_size` as (height, width) of ints; 32.0 or (32, "32") is an error."""
    if image_size is None:
        return None
    pair = (image_size, image_size) if not isinstance(image_size, (tuple, list)) else image_size
    if len(pair) != 2 or any(isinstance(s, (bool, np.bool_)) or not isinstance(s, numbers.Integral)
                             or s <= 0 for s in pair):
        raise ArgumentError(f"image_size must be a positive int or (height, width) of ints, got "
                            f"{image_size!r}.")
    return tuple(int(s) for s in pair)


def flag_argument(name, value):
    """`value`, which must be True or False (not 1, "yes" or None)."""
    if not isinstance(value, bool):
        raise ArgumentError(f"{name} must be True or False, got {value!r}.")
    return value


def classes_argument(classes, include_top):
    """None, or `classes` as a positive int; a head size without the head is an error."""
    if classes is None:
        return None
    if not include_top:
        raise ArgumentError(f"classes={classes!r} sets the size of the head, which "
                            "include_top=False leaves out; drop classes, or keep the top.")
    return positive_int(classes, "classes")


def name_argument(name):
    """None, or a model name: a non-empty str."""
    if name is not None and (not isinstance(name, str) or not name):
        raise ArgumentError(f"name must be a non-empty str, got {name!r}.")
    return name


def input_arguments(input_shape, input_tensor, image_size, channels):
    """keras.applications' input_shape and input_tensor as (image_size, channels)."""
    if input_tensor is not None:
        if not keras.backend.is_keras_tensor(input_tensor):
            raise ArgumentError("input_tensor must be a Keras tensor (keras.Input(...) or a layer's "
                                f"output), got {type(input_tensor).__name__}.")
        tensor_shape = tuple(input_tensor.shape[1:])
        if input_shape is not None and tuple(input_shape) != tensor_shape:
            raise ArgumentError(f"input_shape {tuple(input_shape)} differs from input_tensor's "
                                f"shape {tensor_shape}; give one of them.")
        input_shape = tensor_shape
    if input_shape is None:
        return image_size, channels
    if (isinstance(input_shape, str) or not hasattr(input_shape, "__len__") or len(input_shape) != 3
            or not all(isinstance(s, int) and not isinstance(s, bool) and s > 0 for s in input_shape)):
        raise ArgumentError("input_shape must be (height, width, channels) with fixed positive sizes "
                            f"(a ViT's position embeddings are per patch), got {input_shape!r}.")
    height, width, depth = input_shape
    if image_size is not None:
        size = (image_size, image_size) if isinstance(image_size, int) else tuple(image_size)
        if size != (height, width):
            raise ArgumentError(f"image_size {image_size!r} differs from input_shape {tuple(input_shape)}; "
                                "give one of them.")
    if channels not in (3, depth):  # 3 is the default: input_shape decides
        raise ArgumentError(f"channels={channels} differs from input_shape {tuple(input_shape)}; "
                            "give one of them.")
    return (height, width), depth
