"""keras_vit's own record inside the `.npz` files `save_npz` writes.

The official layout records weights only: not the GELU form or LayerNorm epsilon
the weights were trained with, nor the patch grid of a non-square position
embedding. `save_npz` adds one member, `keras_vit/metadata` (a uint8 array of
UTF-8 JSON: {"approximate_gelu", "layer_norm_epsilon", "grid": [rows, cols],
"normalization": [mean, std], "variant": {the Variant's fields}}),
which the official code and timm's npz loader never look up, and keras_vit reads
back: a model reloads with the numerics it was saved with, and a grid laid out
the other way round is refused instead of loaded transposed, and a model whose
weights expect other pixels than [-1, 1] keeps its normalisation, and
`keras_vit.from_pretrained` builds the architecture the file records.
"""

import dataclasses
import json
import math

import numpy as np

from keras_vit._support.json_files import parse_json
from keras_vit.checkpoints.errors import CheckpointError
from keras_vit.checkpoints.formats.base import normalization_from
from keras_vit.checkpoints.formats.config_values import MAX_PIXELS
from keras_vit.checkpoints.layout import is_bit_model
from keras_vit.layer_names import ENCODER_NORM, POSEMBED_INPUT, is_block
from keras_vit.normalization import input_normalization
from keras_vit.variants import Variant, table_variant
from keras_vit.variants.table import FIELD_CHOICES

# The attribute keras_vit.ViT sets on the models it builds: the `Variant` built.
VARIANT_ATTRIBUTE = "_keras_vit_variant"

__all__ = ["METADATA_KEY", "metadata_array", "parse_metadata", "model_metadata"]

METADATA_KEY = "keras_vit/metadata"
MAX_METADATA_BYTES = 64 * 2 ** 10  # save_npz writes about 300 bytes


def model_metadata(model):
    """What `save_npz` records of `model`: its numerics and its position embedding's grid;
    of a BiT ResNetV2, which has neither GELU, LayerNorm nor a grid, its normalisation."""
    normalization = [list(part) for part in input_normalization(model)]
    if is_bit_model(model):
        return {"normalization": normalization}
    block = next(layer for layer in model.layers if is_block(layer.name))
    names = {layer.name for layer in model.layers}
    # The final norm's epsilon, the blocks' where the model ends without one (EVA-02's tokens);
    # the grid only where there is a position embedding (DINOv3 has RoPE alone).
    epsilon = model.get_layer(ENCODER_NORM).epsilon if ENCODER_NORM in names \
        else block.layer_norm_epsilon
    record = {"approximate_gelu": bool(block.mlp.approximate_gelu),
              "layer_norm_epsilon": float(epsilon), "normalization": normalization}
    if POSEMBED_INPUT in names:
        record["grid"] = list(model.get_layer(POSEMBED_INPUT).grid_size)
    variant = getattr(model, VARIANT_ATTRIBUTE, None)  # a model keras_vit.ViT built (not reloaded)
    if variant is not None:
        record["variant"] = dataclasses.asdict(variant)
    return record


def metadata_array(metadata):
    return np.frombuffer(json.dumps(metadata, sort_keys=True).encode(), dtype=np.uint8)


def parse_metadata(path, array):
    """The record, checked: {"approximate_gelu": bool, "layer_norm_epsilon": float,
    "grid": (rows, cols), "normalization": (mean, std)}, each key optional."""
    try:
        if array.dtype != np.uint8 or array.ndim != 1:
            raise ValueError(f"a {array.dtype} array of shape {array.shape}")
        if array.size > MAX_METADATA_BYTES:
            raise ValueError(f"{array.size} bytes, where keras_vit writes a few hundred")
        record = parse_json(array.tobytes(), "its JSON", ValueError)
        if not isinstance(record, dict):
            raise ValueError(f"a JSON {type(record).__name__}")
    except ValueError as error:
        raise CheckpointError(f"{path}: its {METADATA_KEY} member is not keras_vit's record "
                              f"({error}).") from None
    out = {}
    if "approximate_gelu" in record:
        if not isinstance(record["approximate_gelu"], bool):
            raise CheckpointError(f"{path}: {METADATA_KEY} approximate_gelu is "
                                  f"{record['approximate_gelu']!r}, not true or false.")
        out["approximate_gelu"] = record["approximate_gelu"]
    if "layer_norm_epsilon" in record:
        epsilon = record["layer_norm_epsilon"]
        if (isinstance(epsilon, bool) or not isinstance(epsilon, (int, float))
                or not math.isfinite(epsilon) or not 0 < epsilon < 1):
            raise CheckpointError(f"{path}: {METADATA_KEY} layer_norm_epsilon is {epsilon!r}; a "
                                  "LayerNorm epsilon is a finite number between 0 and 1.")
        out["layer_norm_epsilon"] = float(epsilon)
    if "grid" in record:
        grid = record["grid"]
        if (not isinstance(grid, list) or len(grid) != 2
                or not all(isinstance(n, int) and not isinstance(n, bool) and 0 < n <= MAX_PIXELS
                           for n in grid)):
            raise CheckpointError(f"{path}: {METADATA_KEY} grid is {str(grid)[:80]}, not [rows, "
                                  f"cols] of positive integers up to {MAX_PIXELS:,}.")
        out["grid"] = tuple(grid)
    if "normalization" in record:
        pair = record["normalization"]
        if not isinstance(pair, list) or len(pair) != 2:
            raise CheckpointError(f"{path}: {METADATA_KEY} normalization is {str(pair)[:80]}, not "
                                  "[mean, std].")
        out["normalization"] = normalization_from(f"{path} ({METADATA_KEY})", *pair)
    if "variant" in record:
        out["variant"] = _variant(path, record["variant"])
    return out


_COUNTS = ("width", "depth", "mlp_dim", "heads", "patch_size", "resnet_width", "register_tokens",
           "image_size")
# Every true-or-false field of Variant, read from its defaults (a new switch is checked as one).
_FLAGS = tuple(f.name for f in dataclasses.fields(Variant) if isinstance(f.default, bool))
# Every plain number field of Variant (RoPE's grid offset), read from its type: a new one is
# checked as one.
_NUMBERS = tuple(f.name for f in dataclasses.fields(Variant) if f.type is float)
# Counts that may be None (the MAP head's heads and MLP width, RoPE's trained grid), read from
# their type: a new one is checked as one.
_OPTIONAL_COUNTS = tuple(f.name for f in dataclasses.fields(Variant) if f.type == int | None)


def _field_problem(name, value):
    """Why `value` cannot be the recorded Variant field `name`, or None."""
    def is_int(v):
        return isinstance(v, int) and not isinstance(v, bool)
    if name in _COUNTS:
        return None if is_int(value) and 0 <= value <= MAX_PIXELS * 16 else "not a count"
    if name in _OPTIONAL_COUNTS:
        return None if value is None or (is_int(value) and 0 < value <= MAX_PIXELS * 16) \
            else "not a count"
    if name in _FLAGS or name == "class_token":
        ok = isinstance(value, bool) or (value is None and name == "class_token")
        return None if ok else "not true or false"
    if name in FIELD_CHOICES:
        optional = value is None and getattr(Variant, name, "") is None
        return None if optional or value in FIELD_CHOICES[name] else \
            f"not one of {', '.join(FIELD_CHOICES[name])}"
    if name in ("name", "family"):
        return None if isinstance(value, str) and 0 < len(value) <= 100 else "not a short name"
    if name in ("layer_scale", "layer_norm_epsilon"):
        ok = value is None or (isinstance(value, (int, float)) and not isinstance(value, bool)
                               and math.isfinite(value) and 0 < value < 1e3)
        return None if ok else "not a positive number"
    if name in _NUMBERS:
        ok = isinstance(value, (int, float)) and not isinstance(value, bool) \
            and math.isfinite(value) and abs(value) <= MAX_PIXELS
        return None if ok else "not a finite number"
    if name == "resnet_stages":
        ok = value is None or (isinstance(value, list) and len(value) <= 8
                               and all(is_int(v) and 0 < v <= 256 for v in value))
        return None if ok else "not a list of unit counts"
    if name == "normalization":
        return None if value is None or (isinstance(value, list) and len(value) == 2) \
            else "not [mean, std]"
    return "not a field of keras_vit's Variant"


def _variant(path, fields):
    """The recorded `Variant` (the table's row where it is one), checked field by field."""
    if not isinstance(fields, dict):
        raise CheckpointError(f"{path}: {METADATA_KEY} variant is {str(fields)[:80]}, not the "
                              "object of a Variant's fields.")
    for name, value in fields.items():
        problem = _field_problem(name, value)
        if problem:
            raise CheckpointError(f"{path}: {METADATA_KEY} variant {str(name)[:40]} is "
                                  f"{str(value)[:60]}: {problem}.")
    fields = dict(fields)
    if fields.get("resnet_stages") is not None:
        fields["resnet_stages"] = tuple(fields["resnet_stages"])
    if fields.get("normalization") is not None:
        fields["normalization"] = normalization_from(f"{path} ({METADATA_KEY} variant)",
                                                     *fields["normalization"])
    try:
        variant = Variant(**fields)
    except TypeError as error:  # a field missing
        raise CheckpointError(f"{path}: {METADATA_KEY} variant is incomplete ({error}).") from None
    return table_variant(variant)
