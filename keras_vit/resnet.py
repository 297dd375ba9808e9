"""The hybrids' ResNetV2 trunk on its own: a feature extractor returning every stage."""

import keras
import numpy as np

from keras_vit import checkpoints
from keras_vit.layers.resnet import ResNetStem
from keras_vit.variants import get_variant
from keras_vit.weight_mapping import CheckpointError, _fits, normalize_keys, read_npz

__all__ = ["ResNetV2", "load_resnet_weights"]

_TRUNK_PREFIXES = ("conv_root/", "gn_root/", "block")


def ResNetV2(variant="R50+ViT-B_16", weights=None, image_size=None, channels=3, name=None):
    """The BiT ResNetV2 trunk of a hybrid variant, returning every stage's output.

    Args:
        variant: a hybrid name ("R50+B/16", "R26+ViT-S_32", "R+Ti/16", ...).
        weights: None (random), a catalogue tag of that variant (e.g.
            "imagenet21k"), or the path of an official hybrid `.npz`; only the
            trunk's arrays are read.
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
        raise ValueError(f"{variant.short_name} has no ResNet; use a hybrid variant such as "
                         '"R50+B/16", "R26+S/32" or "R+Ti/16".')
    if isinstance(image_size, int):
        image_size = (image_size, image_size)
    shape = (None, None) if image_size is None else tuple(image_size)
    images = keras.Input((*shape, channels), name="images")
    trunk = ResNetStem(variant.resnet_stages, variant.resnet_width, name="resnet")
    features = trunk(images, return_stages=True)
    prefix = variant.name.split("+")[0]
    model = keras.Model(images, features, name=name or f"{prefix}_resnet")
    source = checkpoints.resolve_weights(variant, weights)
    if source is not None:
        load_resnet_weights(model, source.path())
    return model


def load_resnet_weights(model, checkpoint):
    """Loads the trunk arrays of an official hybrid `.npz` (path or dict) into `model`.

    `model` has a "resnet" layer (a `ResNetV2` model or a hybrid ViT). The
    transformer's arrays are ignored; every trunk key must be present with its
    shape (GroupNorm parameters as (C,) or (1, 1, 1, C)), and no trunk key may
    be left over. Raises `CheckpointError` naming the problems; on error no
    variable has changed.
    """
    source = checkpoint if isinstance(checkpoint, str) else "the checkpoint"
    arrays = read_npz(checkpoint) if isinstance(checkpoint, str) else dict(checkpoint)
    arrays = normalize_keys(arrays)
    rows = model.get_layer("resnet").checkpoint_rows()
    expected = {row.keys[0]: row.variable for row in rows}
    missing = [k for k in expected if k not in arrays]
    mismatched = [f"{k}: expected {tuple(v.shape)}, found {tuple(arrays[k].shape)}"
                  for k, v in expected.items()
                  if k in arrays and not _fits(tuple(arrays[k].shape), tuple(v.shape))]
    unexpected = sorted(k for k in arrays if k.startswith(_TRUNK_PREFIXES) and k not in expected)
    if missing or mismatched or unexpected:
        lines = [f"{source} does not fit the ResNet trunk of {model.name!r}:"]
        for title, items in (("missing keys", missing), ("unexpected keys", unexpected),
                             ("shape mismatches", mismatched)):
            if items:
                lines.append(f"  {len(items)} {title}:\n    " + "\n    ".join(items[:12]))
        lines.append("  No weights were changed.")
        raise CheckpointError("\n".join(lines))
    values = [(v, np.asarray(arrays[k]).reshape(v.shape)) for k, v in expected.items()]
    for variable, value in values:
        variable.assign(value.astype(variable.dtype))
    return model
