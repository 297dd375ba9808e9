"""The hybrids' ResNetV2 trunk on its own: a feature extractor returning every stage."""

import contextlib

import keras

from keras_vit import layer_names as names
from keras_vit._support.checks import positive_int
from keras_vit.checkpoints import load_resnet_weights, resolve_weights
from keras_vit.errors import ArgumentError
from keras_vit.layers import ResNetTrunk
from keras_vit.models.arguments import name_argument, size_argument
from keras_vit.variants import get_variant

__all__ = ["ResNetV2"]


def ResNetV2(variant="R50+ViT-B_16", weights=None, image_size=None, channels=3, name=None):
    """The BiT ResNetV2 trunk of a hybrid variant, returning every stage's output.

    Args:
        variant: a hybrid name ("R50+B/16", "R26+ViT-S_32", "R+Ti/16", ...).
        weights: None (random), a catalogue tag of that variant (e.g.
            "imagenet21k"), or the path of an official hybrid `.npz` or a
            transformers ViTHybrid folder; only the trunk's arrays are read (and
            the trunk computes its source's numerics).
        image_size: None (any size: the trunk is fully convolutional), an int
            or (height, width).
        channels: input channels.
        name: model name; defaults to e.g. "R50_resnet".

    Returns:
        A `keras.Model` mapping images `(batch, H, W, channels)` in [-1, 1] to
        a dict of feature maps: "stem" `(batch, ceil(H/4), ceil(W/4), 64)`,
        then "block1".."blockN" with 256 * 2**(s-1) channels, block1 at /4 and
        every later block at half the previous resolution (SAME padding).
    """
    variant = get_variant(variant)
    if not variant.is_hybrid:
        raise ArgumentError(f"{variant.short_name} has no ResNet; use a hybrid variant such as "
                            '"R50+B/16", "R26+S/32" or "R+Ti/16".')
    image_size = size_argument(image_size)
    channels = positive_int(channels, "channels")
    name_argument(name)
    shape = (None, None) if image_size is None else image_size
    images = keras.Input((*shape, channels), name=names.IMAGES)
    source = resolve_weights(variant, weights)
    with contextlib.closing(source) if source is not None else contextlib.nullcontext():
        # The trunk computes what its weights' library computes (ResNetTrunk saves it).
        numerics = (source.trunk_numerics if source is not None else None) or {}
        trunk = ResNetTrunk(variant.resnet_stages, variant.resnet_width, **numerics,
                            name=names.RESNET)
        features = trunk(images, return_stages=True)
        prefix = variant.name.split("+")[0]
        model = keras.Model(images, features, name=name or f"{prefix}_resnet")
        if source is not None:
            with contextlib.closing(source.open()) as reader:
                load_resnet_weights(model, reader)
    return model
