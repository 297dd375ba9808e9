"""Strict loading of official `.npz` checkpoints into keras_vit models.

The mapping is a table of rows (npz keys -> one Keras variable, and how the
arrays combine), generated from the model's own layer names, which follow the
checkpoint's. Every key and shape is checked, and every array read and
transformed, before any variable is assigned: a failed load leaves the model
as it was.
"""

import dataclasses
import math
import os
import re
import zipfile

import numpy as np

from keras_vit.layers.tokens import resize_position_embedding

__all__ = ["CheckpointError", "load_weights", "inspect_npz", "read_npz", "normalize_keys"]

POS_EMBED_KEY = "Transformer/posembed_input/pos_embedding"
# Keys a model may leave unused: a fine-tuned model drops the pre-training head.
DROPPABLE_PREFIXES = ("pre_logits/", "head/")


class CheckpointError(ValueError):
    """A checkpoint file that does not fit the model, or cannot be read."""


@dataclasses.dataclass
class Row:
    """npz keys whose arrays, combined, become one Keras variable."""

    keys: tuple
    variable: object
    combine: object = None  # arrays -> array; None means a single key copied as is
    shapes: tuple = None  # the npz shape each key must have

    def value(self, arrays):
        parts = [arrays[k] for k in self.keys]
        return self.combine(parts) if self.combine else parts[0]


def read_npz(path):
    """Reads every array of an `.npz` file (no pickle), with readable errors."""
    if not zipfile.is_zipfile(path):
        raise CheckpointError(f"{path} is not a readable .npz checkpoint: not a zip archive "
                              "(an .npz is one). Truncated download, or another kind of file?")
    try:
        with np.load(path, allow_pickle=False) as data:
            return {key: data[key] for key in data.files}
    except ValueError as error:
        if "allow_pickle" in str(error):
            raise CheckpointError(f"{path} holds object arrays, which need pickle to load; "
                                  "official checkpoints hold plain numeric arrays, and keras_vit "
                                  "never unpickles (it can run code).") from error
        raise CheckpointError(f"{path} is not a readable .npz checkpoint: {error}") from error
    except (zipfile.BadZipFile, EOFError, OSError, KeyError) as error:
        raise CheckpointError(f"{path} is not a readable .npz checkpoint (truncated or corrupt "
                              f"file? {type(error).__name__}: {error}). Delete it and download "
                              "it again.") from error


def normalize_keys(arrays):
    """Maps the accepted layouts onto the released pre-Linen one.

    Accepted: `opt/target/` (old optimizer dumps) and `params/` (big_vision)
    prefixes; Linen block names (MultiHeadDotProductAttention_0, LayerNorm_1,
    MlpBlock_0); big_vision's top-level `pos_embedding`.
    """
    out = {}
    for key, value in arrays.items():
        for prefix in ("opt/target/", "params/"):
            if key.startswith(prefix):
                key = key[len(prefix):]
        if key == "pos_embedding":
            key = POS_EMBED_KEY
        key = re.sub(r"(encoderblock_\d+)/MultiHeadDotProductAttention_0/", r"\1/MultiHeadDotProductAttention_1/", key)
        key = re.sub(r"(encoderblock_\d+)/LayerNorm_1/", r"\1/LayerNorm_2/", key)
        key = re.sub(r"(encoderblock_\d+)/MlpBlock_0/", r"\1/MlpBlock_3/", key)
        out[key] = value
    return out


def layout(model):
    """The rows that fill `model` from a checkpoint, in the official key names."""
    rows = []
    names = {layer.name for layer in model.layers}

    def dense(prefix, layer):
        rows.append(Row((f"{prefix}/kernel",), layer.kernel))
        rows.append(Row((f"{prefix}/bias",), layer.bias))

    def norm(prefix, layer):
        rows.append(Row((f"{prefix}/scale",), layer.gamma))
        rows.append(Row((f"{prefix}/bias",), layer.beta))

    if "resnet" in names:
        rows += model.get_layer("resnet").checkpoint_rows()
    dense("embedding", model.get_layer("embedding"))
    if "cls" in names:
        rows.append(Row(("cls",), model.get_layer("cls").cls))
    rows.append(Row((POS_EMBED_KEY,), model.get_layer("posembed_input").pos_embedding))
    block = 0
    while f"encoderblock_{block}" in names:
        layer = model.get_layer(f"encoderblock_{block}")
        prefix = f"Transformer/encoderblock_{block}"
        norm(f"{prefix}/LayerNorm_0", layer.norm_0)
        rows += _attention_rows(f"{prefix}/MultiHeadDotProductAttention_1", layer.attention)
        norm(f"{prefix}/LayerNorm_2", layer.norm_2)
        dense(f"{prefix}/MlpBlock_3/Dense_0", layer.mlp.dense_0)
        dense(f"{prefix}/MlpBlock_3/Dense_1", layer.mlp.dense_1)
        block += 1
    norm("Transformer/encoder_norm", model.get_layer("encoder_norm"))
    for name in ("pre_logits", "head"):
        if name in names:
            dense(name, model.get_layer(name))
    for row in rows:
        if row.shapes is None:
            row.shapes = (tuple(row.variable.shape),)
    return rows


def _attention_rows(prefix, attention):
    width, heads = attention.qkv_kernel.shape[0], attention.num_heads
    head_dim = width // heads
    qkv = ("query", "key", "value")
    return [
        Row(tuple(f"{prefix}/{n}/kernel" for n in qkv), attention.qkv_kernel,
            lambda a: np.concatenate([x.reshape(width, width) for x in a], axis=1),
            ((width, heads, head_dim),) * 3),
        Row(tuple(f"{prefix}/{n}/bias" for n in qkv), attention.qkv_bias,
            lambda a: np.concatenate([x.reshape(width) for x in a]), ((heads, head_dim),) * 3),
        Row((f"{prefix}/out/kernel",), attention.out_kernel,
            lambda a: a[0].reshape(width, width), ((heads, head_dim, width),)),
        Row((f"{prefix}/out/bias",), attention.out_bias),
    ]


def _fits(found, expected):
    # GroupNorm parameters are stored as (1, 1, 1, C) in released hybrid files.
    return found == expected or (len(expected) == 1 and found == (1, 1, 1, expected[0]))


def load_weights(model, checkpoint):
    """Loads an official-layout checkpoint (a path or a dict of arrays) into `model`.

    Raises `CheckpointError` naming every missing key, unexpected key and
    mismatched shape; on any error no variable has changed. The head is
    zero-initialised when the checkpoint's class count differs from the
    model's, or the checkpoint has none; `pre_logits` is dropped when the model
    has none; the position embedding is resized when the grids differ.
    """
    is_path = isinstance(checkpoint, (str, os.PathLike))
    source = os.fspath(checkpoint) if is_path else "the checkpoint"
    arrays = read_npz(source) if is_path else dict(checkpoint)
    arrays = normalize_keys(arrays)
    rows = layout(model)
    head_rows = [r for r in rows if r.keys[0].startswith("head/")]
    new_head = bool(head_rows) and not _head_fits(arrays, head_rows)
    if new_head:  # classes differ, or a headless file: the head starts at zero, below
        rows = [r for r in rows if r not in head_rows]
    posembed = model.get_layer("posembed_input")

    missing, mismatched = [], []
    for row in rows:
        for key, shape in zip(row.keys, row.shapes):
            if key not in arrays:
                missing.append(key)
            elif key == POS_EMBED_KEY:
                problem = _posembed_problem(arrays[key].shape, shape, posembed.num_prefix_tokens)
                if problem:
                    mismatched.append(f"{key}: expected {shape}, found {arrays[key].shape} ({problem})")
            elif not _fits(tuple(arrays[key].shape), tuple(shape)):
                mismatched.append(f"{key}: expected {tuple(shape)}, found {tuple(arrays[key].shape)}")
    used = {k for row in rows for k in row.keys}
    unexpected = sorted(k for k in arrays if k not in used and not k.startswith(DROPPABLE_PREFIXES))
    non_numeric = sorted(k for k in used & set(arrays) if not np.issubdtype(arrays[k].dtype, np.number))
    if missing or unexpected or mismatched or non_numeric:
        raise CheckpointError(_report(source, model, arrays, missing, unexpected, mismatched,
                                      non_numeric))

    values = []
    for row in rows:
        value = row.value(arrays)
        if row.keys[0] == POS_EMBED_KEY and value.shape != tuple(row.variable.shape):
            value = resize_position_embedding(
                value, _square_grid(value.shape[1] - posembed.num_prefix_tokens),
                posembed.grid_size, posembed.num_prefix_tokens)
        values.append((row.variable, np.asarray(value).reshape(row.variable.shape)))
    if new_head:
        values += [(row.variable, np.zeros(row.variable.shape)) for row in head_rows]
    for variable, value in values:  # only now, with every value in hand, touch the model
        # copy=False: float32 arrays go to the variable as they are, without a
        # second host copy of the weights.
        variable.assign(value.astype(variable.dtype, copy=False))
    return model


def _head_fits(arrays, head_rows):
    return all(k in arrays and tuple(arrays[k].shape) == tuple(s)
               for row in head_rows for k, s in zip(row.keys, row.shapes))


def _posembed_problem(found, expected, num_prefix):
    if len(found) != 3 or found[0] != 1 or found[2] != expected[2]:
        return "width differs"
    if found[1] == expected[1]:
        return None
    if _square_grid(found[1] - num_prefix) is None:
        return ("token count is not a class token plus a square grid, so it cannot be resized"
                if num_prefix else "token count is not a square grid, so it cannot be resized")
    return None


def _square_grid(count):
    side = math.isqrt(max(count, 0))
    return (side, side) if side * side == count and side > 0 else None


def _report(source, model, arrays, missing, unexpected, mismatched, non_numeric):
    lines = [f"{source} does not fit model {model.name!r}:"]
    for title, items in (("missing keys", missing), ("unexpected keys", unexpected),
                         ("shape mismatches", mismatched), ("non-numeric arrays", non_numeric)):
        if items:
            shown = "\n    ".join(items[:12])
            more = f"\n    ... and {len(items) - 12} more" if len(items) > 12 else ""
            lines.append(f"  {len(items)} {title}:\n    {shown}{more}")
    guess = describe_architecture(arrays)
    if guess:
        lines.append(f"  The file looks like {guess}.")
    lines.append("  No weights were changed.")
    return "\n".join(lines)


def describe_architecture(arrays):
    """A human description of the architecture an npz's arrays belong to."""
    kernel = arrays.get("embedding/kernel")
    if kernel is None or kernel.ndim != 4:
        return None
    depth = len({m.group(1) for k in arrays if (m := re.match(r"Transformer/encoderblock_(\d+)/", k))})
    from keras_vit.variants import VARIANTS  # noqa: PLC0415  (avoid an import cycle)
    hybrid = "conv_root/kernel" in arrays
    for v in VARIANTS.values():
        if (v.width, v.depth, v.patch_size, v.is_hybrid) == (kernel.shape[3], depth, kernel.shape[0], hybrid) \
                and (v.classifier == "token") == ("cls" in arrays) \
                and (not hybrid or kernel.shape[2] == _trunk_channels(v)):
            return f"{v.name} (width {v.width}, depth {depth}, patch {kernel.shape[0]})"
    return f"a ViT of width {kernel.shape[3]}, depth {depth}, patch {kernel.shape[0]}"


def _trunk_channels(variant):
    # What the ResNet hands the patch embedding: R26+B/32 (2048) vs R50+B/16 (1024).
    stages = variant.resnet_stages
    return 64 * variant.resnet_width * (4 * 2 ** (len(stages) - 1) if stages else 1)


@dataclasses.dataclass
class NpzInfo:
    """What an npz file's headers say, read without loading its arrays."""

    shapes: dict

    @property
    def classes(self):
        head = self.shapes.get("head/kernel")
        return head[-1] if head else None

    @property
    def representation_size(self):
        pre = self.shapes.get("pre_logits/kernel")
        return pre[-1] if pre else None

    def resolution(self, variant):
        pos = self.shapes.get(POS_EMBED_KEY)
        if not pos:
            return None
        grid = _square_grid(pos[1] - (1 if variant.classifier == "token" else 0))
        return grid[0] * variant.total_stride if grid else None


def inspect_npz(path):
    """Reads array shapes from an `.npz` file's headers (cheap for large files)."""
    shapes = {}
    try:
        with zipfile.ZipFile(path) as archive:
            for name in archive.namelist():
                with archive.open(name) as f:
                    version = np.lib.format.read_magic(f)
                    if version == (1, 0):
                        shape, _, _ = np.lib.format.read_array_header_1_0(f)
                    else:
                        shape, _, _ = np.lib.format.read_array_header_2_0(f)
                shapes[name.removesuffix(".npy")] = tuple(shape)
    except (zipfile.BadZipFile, ValueError, OSError, EOFError) as error:
        raise CheckpointError(f"{path} is not a readable .npz checkpoint ({type(error).__name__}: "
                              f"{error}).") from error
    return NpzInfo(normalize_keys(shapes))
