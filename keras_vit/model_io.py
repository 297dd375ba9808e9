"""What a built model takes and gives, as every path that feeds it reads it: the pixels' map to
its input (`model_input`) and whether its head returns probabilities (`has_softmax_head`).
Export, quantised export, prediction and evaluation share these; here rather than in
export.py so that the quantised export does not import the exporter that calls it."""

import keras

from keras_vit.layer_names import HEAD, PREPROCESSING
from keras_vit.normalization import OFFICIAL_NORMALIZATION, input_normalization, normalize_pixels
from keras_vit.preprocessing import preprocess_input

__all__ = ["has_softmax_head", "model_input"]


def has_softmax_head(model):
    """Whether `model`'s "head" layer ends in a softmax (it returns probabilities, not logits)."""
    try:
        head = model.get_layer(HEAD)
    except ValueError:
        return False
    return getattr(head, "activation", None) is keras.activations.softmax


def model_input(model):
    """What turns [0, 255] pixels into `model`'s input: nothing for a model built with
    `include_preprocessing=True` (its "preprocessing" layer does it), else the normalisation
    its weights expect (keras_vit.normalization: [-1, 1] unless its source said otherwise)."""
    try:
        layer = model.get_layer(PREPROCESSING)
    except ValueError:
        layer = None
    if isinstance(layer, keras.layers.Rescaling):
        return lambda pixels: pixels
    normalization = input_normalization(model)
    if normalization == OFFICIAL_NORMALIZATION:
        return preprocess_input
    return lambda pixels: normalize_pixels(pixels, normalization)
