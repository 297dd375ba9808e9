"""How pixels in [0, 255] become a model's input: the official [-1, 1], or the mean/std
its weights' source recorded (DeiT, DINO and other timm/transformers checkpoints use
ImageNet's).

A normalisation is ((mean,) * 3, (std,) * 3) on pixels in [0, 1], the way timm and
transformers write it: input = (pixels / 255 - mean) / std. A model carries its own:
the "preprocessing" layer of a model built with `include_preprocessing=True`, else the
patch embedding's `input_normalization` record (None: the official one). Export,
predict and the training pipeline normalise by it.
"""

import numpy as np

from keras_vit.layer_names import EMBEDDING, PREPROCESSING

__all__ = ["OFFICIAL_NORMALIZATION", "IMAGENET_MEAN_STD", "rescaling_arguments",
           "normalization_problem", "input_normalization", "describe_normalization",
           "normalize_pixels", "official_input", "model_input"]

# The official code feeds pixels in [-1, 1]: (x / 255 - 0.5) / 0.5.
OFFICIAL_NORMALIZATION = ((0.5, 0.5, 0.5), (0.5, 0.5, 0.5))
# ImageNet's mean/std, which timm, transformers and the families (variants/table.py) record.
IMAGENET_MEAN_STD = ((0.485, 0.456, 0.406), (0.229, 0.224, 0.225))


def rescaling_arguments(normalization):
    """(scale, offset) of the `keras.layers.Rescaling` computing `normalization` on [0, 255]
    pixels: x * scale + offset; plain floats where the three channels agree."""
    mean, std = (np.asarray(v, dtype=np.float64) for v in normalization)
    scale, offset = 1.0 / (255.0 * std), -mean / std
    if np.all(scale == scale[0]) and np.all(offset == offset[0]):
        return float(scale[0]), float(offset[0])
    return [float(v) for v in scale], [float(v) for v in offset]


def normalization_problem(normalization):
    """What makes `normalization` unusable, or None: the model computes x * scale + offset in
    float32 (`rescaling_arguments`), so the std, the scale and the offset must each be finite
    there, the std positive, and the std and scale normal (a subnormal or zero std, or one so
    large that the scale underflows, turns every input into zeros, infinities or NaN)."""
    mean, std = (np.asarray(v, dtype=np.float64) for v in normalization)
    with np.errstate(all="ignore"):
        scale, offset = 1.0 / (255.0 * std), -mean / std
    limits = np.finfo(np.float32)
    if not np.all(np.isfinite(mean)) or not np.all(np.isfinite(std)) or np.any(std <= 0):
        return f"mean {_short(mean)} and std {_short(std)} are not finite with a positive std"
    for name, values in (("std", std), ("scale 1 / (255 std)", scale)):
        if np.any(np.abs(values) < limits.tiny) or np.any(np.abs(values) > limits.max):
            return f"the {name} {_short(values)} is outside float32's normal numbers"
    if not np.all(np.abs(offset) <= limits.max):
        return f"the offset -mean / std {_short(offset)} overflows float32"
    return None


def _short(values):
    return "(" + ", ".join(f"{v:.3g}" for v in np.ravel(values)) + ")"


def _from_rescaling(layer):
    scale = np.broadcast_to(np.asarray(layer.scale, dtype=np.float64), (3,))
    offset = np.broadcast_to(np.asarray(layer.offset, dtype=np.float64), (3,))
    std = 1.0 / (255.0 * scale)
    return tuple(float(v) for v in -offset * std), tuple(float(v) for v in std)


def input_normalization(model):
    """The normalisation `model`'s weights expect: its "preprocessing" layer's, else its patch
    embedding's record, else the official one."""
    preprocessing, embedding = _layer(model, PREPROCESSING), _layer(model, EMBEDDING)
    if preprocessing is not None:
        return _from_rescaling(preprocessing)
    recorded = getattr(embedding, "input_normalization", None)
    if recorded is not None:
        return tuple(tuple(float(v) for v in part) for part in recorded)
    return OFFICIAL_NORMALIZATION


def _layer(model, name):
    try:
        return model.get_layer(name)
    except ValueError:  # Keras' answer for a name the model does not have
        return None


def describe_normalization(normalization):
    """"mean (0.485, 0.456, 0.406), std (0.229, 0.224, 0.225) on pixels in [0, 1]"."""
    if np.allclose(normalization, OFFICIAL_NORMALIZATION):
        return "[-1, 1] (mean 0.5, std 0.5 on pixels in [0, 1])"
    mean, std = (tuple(round(v, 6) for v in part) for part in normalization)
    return f"mean {mean}, std {std} on pixels in [0, 1]"


def normalize_pixels(pixels, normalization):
    """Pixels in [0, 255] (NumPy, or a TensorFlow tensor, as `preprocess_input`) -> the input
    of a model expecting `normalization`."""
    scale, offset = rescaling_arguments(normalization)
    if isinstance(pixels, (np.ndarray, list, tuple, int, float)):
        return (np.asarray(pixels, dtype=np.float32) * np.float32(scale)
                + np.float32(offset)).astype(np.float32)
    import tensorflow as tf

    return tf.cast(pixels, tf.float32) * tf.constant(scale, tf.float32) + tf.constant(offset, tf.float32)


def official_input(images):
    """Pixels in [0, 255] -> [-1, 1] float32 (keras_vit.preprocess_input without a model):
    NumPy stays NumPy, a TensorFlow tensor stays one whatever the Keras backend."""
    if isinstance(images, (np.ndarray, list, tuple, int, float)):
        return np.asarray(images, dtype=np.float32) / 127.5 - 1.0
    if type(images).__module__.startswith("tensorflow"):
        import tensorflow as tf

        return tf.cast(images, tf.float32) / 127.5 - 1.0
    # Imported here: the command line reads keras_vit.preprocessing's constants (MAX_PIXELS,
    # IMAGE_FORMATS) while parsing, before Keras or TensorFlow is loaded.
    from keras import ops

    return ops.cast(images, "float32") / 127.5 - 1.0


def model_input(model):
    """What turns [0, 255] pixels into `model`'s input: nothing for a model built with
    `include_preprocessing=True` (its "preprocessing" layer does it), else the normalisation
    its weights expect ([-1, 1] unless its source said otherwise). Export, prediction,
    evaluation and the quantised exports feed a model through it."""
    import keras

    try:
        layer = model.get_layer(PREPROCESSING)
    except ValueError:
        layer = None
    if isinstance(layer, keras.layers.Rescaling):
        return lambda pixels: pixels
    normalization = input_normalization(model)
    if normalization == OFFICIAL_NORMALIZATION:
        return official_input
    return lambda pixels: normalize_pixels(pixels, normalization)
