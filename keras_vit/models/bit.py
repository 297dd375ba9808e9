"""BiT ResNetV2 (Kolesnikov et al., "Big Transfer"), the paper's CNN baseline, and its
per-size constructors (made from `keras_vit.variants.BIT_VARIANTS`)."""

import contextlib
import inspect

import keras

from keras_vit import layer_names as names
from keras_vit._support.checks import positive_int
from keras_vit.checkpoints import load_weights, resolve_weights
from keras_vit.errors import ArgumentError
from keras_vit.layers.resnet import PreActBottleneckUnit, bit_conv, bit_group_norm
from keras_vit.memory import check_fits
from keras_vit.models.arguments import (
    classes_argument,
    flag_argument,
    input_arguments,
    name_argument,
    size_argument,
)
from keras_vit.normalization import OFFICIAL_NORMALIZATION, rescaling_arguments
from keras_vit.variants import BIT_VARIANTS, bit_constructor_names, get_bit_variant

__all__ = ["BiT", *bit_constructor_names()]

_POOLINGS = ("avg", "max", None)


def BiT(variant, weights=None, image_size=None, include_top=True, classes=None, pooling=None,
        classifier_activation=None, channels=3, name=None, input_shape=None, input_tensor=None,
        include_preprocessing=False):
    """Builds a BiT ResNetV2 and optionally loads big_transfer's weights.

    Pre-activation bottleneck units with weight-standardised convolutions and
    GroupNorm (32 groups); stem 7x7/2 conv, zero pad 1, 3x3/2 max pool; then
    GroupNorm, ReLU, global mean and the head. Where it differs from the
    hybrids' trunk: `keras_vit.layers.resnet`'s table.

    Args:
        variant: "BiT-R50x1", "R50x1", ..., or timm's "resnetv2_50x1_bit";
            sizes R50x1, R50x3, R101x1, R101x3, R152x2, R152x4
            (`keras_vit.BIT_VARIANTS`).
        weights: None (random), "bit-m" (ImageNet-21k), "bit-s"
            (ImageNet-1k), "bit-m-ilsvrc2012" (ImageNet-21k, fine-tuned on
            ImageNet-1k; also weights="imagenet"), or the path of a big_transfer
            `.npz` (BiT-M-R50x1.npz, ...).
        image_size: int or (height, width), 224 by default; any size works
            (every stride-2 step gives ceil(size / 2): /32 overall).
        include_top: whether to end with the classification head.
        classes: head size. Defaults to the checkpoint's class count, else
            1000. A head whose size differs from the checkpoint's starts at zero.
        pooling: with include_top=False, None (the feature map
            `(batch, ceil(H / 32), ceil(W / 32), 2048 * width)`), "avg" or
            "max" (`(batch, 2048 * width)`), as keras.applications. The head
            always reads the global mean ("avg"), as BiT's.
        classifier_activation: activation of the head, e.g. "softmax"; None
            returns logits.
        channels: input channels.
        name: model name; defaults to the variant's ("BiT-R50x1").
        input_shape: `(height, width, channels)`, as keras.applications.
        input_tensor: a Keras tensor to build the model on, as keras.applications.
        include_preprocessing: start with a `Rescaling` layer ("preprocessing")
            mapping [0, 255] pixels to BiT's [-1, 1].

    Returns:
        A `keras.Model` mapping images `(batch, height, width, channels)` in
        [-1, 1] (see `keras_vit.preprocess_input`) to logits `(batch, classes)`
        or features.
    """
    image_size, channels = input_arguments(input_shape, input_tensor, image_size, channels)
    flag_argument("include_preprocessing", include_preprocessing)
    flag_argument("include_top", include_top)
    name_argument(name)
    variant = get_bit_variant(variant)
    image_size = size_argument(image_size) or (224, 224)
    channels = positive_int(channels, "channels")
    if pooling not in _POOLINGS:
        raise ArgumentError(f'pooling must be "avg", "max" or None, got {pooling!r}.')
    if include_top and pooling == "max":
        raise ArgumentError('pooling="max" gives features (include_top=False); BiT\'s head reads '
                            'the global mean ("avg").')
    if not include_top and classifier_activation is not None:
        raise ArgumentError("classifier_activation applies to the head; it needs include_top=True.")
    classes = classes_argument(classes, include_top)
    check_fits(variant, image_size, classes)  # before any weights are read or arrays made
    source = resolve_weights(variant, weights, image_size)
    with contextlib.closing(source) if source is not None else contextlib.nullcontext():
        if classes is None:
            classes = source.classes if source and source.classes else 1000
        model = _build(variant, image_size, channels, include_top, classes,
                       "avg" if include_top else pooling, classifier_activation,
                       name or variant.name, input_tensor, include_preprocessing)
        if source is not None:
            with contextlib.closing(source.open()) as reader:
                load_weights(model, reader)
    return model


def _build(variant, image_size, channels, include_top, classes, pooling, activation, name,
           input_tensor, include_preprocessing):
    if input_tensor is None:
        images = x = keras.Input((*image_size, channels), name=names.IMAGES)
    else:  # as keras.applications: the model starts at the tensor's own inputs
        images, x = keras.utils.get_source_inputs(input_tensor), input_tensor
    if include_preprocessing:
        scale, offset = rescaling_arguments(OFFICIAL_NORMALIZATION)
        x = keras.layers.Rescaling(scale, offset=offset, name=names.PREPROCESSING)(x)
    root = 64 * variant.width
    # BiT's stem pads symmetrically, as PyTorch (layers/resnet.py's table).
    x = keras.layers.ZeroPadding2D(3, name=names.ROOT_PAD)(x)
    x = bit_conv(root, 7, strides=2, name=names.ROOT_BLOCK)(x)
    x = keras.layers.ZeroPadding2D(1, name=names.ROOT_POOL_PAD)(x)
    x = keras.layers.MaxPooling2D(3, strides=2, name=names.ROOT_POOL)(x)
    for s, count in enumerate(variant.units, start=1):
        for u in range(1, count + 1):
            stride = 2 if s > 1 and u == 1 else 1
            x = PreActBottleneckUnit(root * 2 ** (s - 1), stride, name=names.BIT_UNIT.format(s=s, u=u))(x)
    x = bit_group_norm(names.GROUP_NORM)(x)
    x = keras.layers.ReLU(name=names.POST_RELU)(x)  # keras.applications' ResNetV2 name
    if pooling == "avg":
        x = keras.layers.GlobalAveragePooling2D(name=names.AVG_POOL)(x)
    elif pooling == "max":
        x = keras.layers.GlobalMaxPooling2D(name=names.MAX_POOL)(x)
    if include_top:
        # BiT's 1x1 conv on the pooled features, as a Dense: zero-initialised and float32
        # under mixed precision, as the ViTs' head (big_transfer also starts it at zero).
        x = keras.layers.Dense(classes, kernel_initializer="zeros", activation=activation,
                               dtype="float32", name=names.HEAD)(x)
    return keras.Model(images, x, name=name)


def _named(variant):
    """`BiT` with the variant fixed, under its own name, showing BiT's full signature."""
    def constructor(weights=None, **kwargs):
        return BiT(variant.name, weights=weights, **kwargs)

    constructor.__name__ = constructor.__qualname__ = variant.constructor_name
    constructor.__doc__ = (f"Builds {variant.name} (depth {variant.depth}, width x{variant.width}). "
                           "Arguments as in `keras_vit.BiT`, e.g. `weights=\"bit-m\"`, "
                           "`classes=5`.")
    constructor.__signature__ = inspect.Signature(list(inspect.signature(BiT).parameters.values())[1:])
    return constructor


# Made from the table, as the ViT constructors (tests/models/test_bit.py checks them, both `__all__`s
# and docs/api.md against BIT_VARIANTS).
for _variant in BIT_VARIANTS.values():
    globals()[_variant.constructor_name] = _named(_variant)
del _variant
