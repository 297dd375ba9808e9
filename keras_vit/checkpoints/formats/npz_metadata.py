"""keras_vit's own record inside the `.npz` files `save_npz` writes.

The official layout records weights only: not the GELU form or LayerNorm epsilon
the weights were trained with, nor the patch grid of a non-square position
embedding. `save_npz` adds one member, `keras_vit/metadata` (a uint8 array of
UTF-8 JSON: {"approximate_gelu", "layer_norm_epsilon", "grid": [rows, cols],
"normalization": [mean, std]}),
which the official code and timm's npz loader never look up, and keras_vit reads
back: a model reloads with the numerics it was saved with, and a grid laid out
the other way round is refused instead of loaded transposed, and a model whose
weights expect other pixels than [-1, 1] keeps its normalisation.
"""

import json
import math

import numpy as np

from keras_vit._support.json_files import parse_json
from keras_vit.checkpoints.errors import CheckpointError
from keras_vit.checkpoints.formats.base import normalization_from
from keras_vit.checkpoints.formats.config_values import MAX_PIXELS
from keras_vit.checkpoints.layout import is_bit_model
from keras_vit.normalization import input_normalization

__all__ = ["METADATA_KEY", "metadata_array", "parse_metadata", "model_metadata"]

METADATA_KEY = "keras_vit/metadata"
MAX_METADATA_BYTES = 64 * 2 ** 10  # save_npz writes about 300 bytes


def model_metadata(model):
    """What `save_npz` records of `model`: its numerics and its position embedding's grid;
    of a BiT ResNetV2, which has neither GELU, LayerNorm nor a grid, its normalisation."""
    normalization = [list(part) for part in input_normalization(model)]
    if is_bit_model(model):
        return {"normalization": normalization}
    block = next(layer for layer in model.layers if layer.name.startswith("encoderblock_"))
    return {"approximate_gelu": bool(block.mlp.approximate_gelu),
            "layer_norm_epsilon": float(model.get_layer("encoder_norm").epsilon),
            "grid": list(model.get_layer("posembed_input").grid_size),
            "normalization": normalization}


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
    return out
