"""The one strict loader: checkpoint arrays into a model, all or nothing.

Every key and shape is checked, and every array read and transformed, before
any variable is assigned: a failed load leaves the model as it was. Loading
only a hybrid's ResNet trunk is the same load with the rows filtered.
"""

import os
import warnings

import numpy as np

from keras_vit.checkpoints.errors import CheckpointError
from keras_vit.checkpoints.formats import open_checkpoint
from keras_vit.checkpoints.formats.base import ArraysReader, CheckpointReader, Resizes
from keras_vit.checkpoints.formats.npz import PICKLE_PROBLEM
from keras_vit.checkpoints.formats.npz_metadata import VARIANT_ATTRIBUTE
from keras_vit.checkpoints.formats.rows import AttentionHeads
from keras_vit.checkpoints.layout import (
    BIT_ROOT_KEY,
    DROPPABLE_PREFIXES,
    EMBEDDING_KERNEL,
    POOLING_PREFIXES,
    POS_EMBED_KEY,
    describe_architecture,
    fits,
    is_bit_model,
    is_head_key,
    is_trunk_key,
    layout,
    square_grid,
)
from keras_vit.layer_names import (
    EMBEDDING,
    MAP_POOL,
    POSEMBED_INPUT,
    PREPROCESSING,
    RESNET,
    block_name,
)
from keras_vit.layers.patching import resample_patch_embedding
from keras_vit.layers.tokens import resize_position_embedding
from keras_vit.normalization import (
    OFFICIAL_NORMALIZATION,
    describe_normalization,
    input_normalization,
)

__all__ = ["load_weights", "load_resnet_weights"]


def load_weights(model, checkpoint, resample_patches=False):
    """Loads a checkpoint (a path, an open `CheckpointReader`, or a dict of official-key
    arrays) into `model`.

    A path is an official `.npz`, a timm `.safetensors`, a transformers
    `save_pretrained` directory (ViT or ViTHybrid) or a keras-hub preset directory
    (`keras_vit.checkpoints.formats` lists them); it is opened once, and every check and
    array goes through that one open file.

    Raises `CheckpointError` naming every missing key, unexpected key and
    mismatched shape; on any error no variable has changed. The head is
    zero-initialised when the checkpoint's class count differs from the
    model's, or the checkpoint has none; `pre_logits` is dropped when the model
    has none; the position embedding is resized when the grids differ. With
    `resample_patches=True` a patch-embedding kernel of another patch size is moved to
    the model's by `resample_patch_embedding` (FlexiViT's resize; without it, a shape
    mismatch). Warns when the checkpoint's source normalises pixels otherwise than the
    model's input.
    """
    return _load(model, checkpoint, trunk_only=False, resample_patches=resample_patches)


def load_resnet_weights(model, checkpoint):
    """Loads the trunk arrays of a hybrid checkpoint (path, reader or dict) into `model`.

    `model` has a "resnet" layer (a `ResNetV2` model or a hybrid ViT). The
    transformer's arrays are ignored; every trunk key must be present with its
    shape (GroupNorm parameters as (C,) or (1, 1, 1, C)), and no trunk key may
    be left over. Raises `CheckpointError` naming the problems; on error no
    variable has changed.
    """
    return _load(model, checkpoint, trunk_only=True)


def _load(model, checkpoint, trunk_only, resample_patches=False):
    if isinstance(checkpoint, CheckpointReader):  # the caller opened it, and closes it
        return _load_from(model, checkpoint, trunk_only, resample_patches)
    if isinstance(checkpoint, (str, os.PathLike)):
        with open_checkpoint(checkpoint) as reader:
            return _load_from(model, reader, trunk_only, resample_patches)
    return _load_from(model, ArraysReader(dict(checkpoint)), trunk_only, resample_patches)


def _load_from(model, reader, trunk_only, resample_patches=False):
    # Checked first from the headers alone (shape, dtype), then only the arrays the model
    # uses are read: an unused or lying npz member costs nothing, and is never allocated.
    source, heads = reader.path, _heads(model)
    headers = reader.headers(heads)
    _check_family(model, reader, headers)
    metadata = getattr(reader, "metadata", {})
    rows = layout(model)
    if trunk_only:
        rows = [r for r in rows if is_trunk_key(r.keys[0])]
        considered = {k for k in headers if is_trunk_key(k)}
        subject = f"the ResNet trunk of model {model.name!r}"
    else:
        considered = set(headers)
        subject = f"model {model.name!r}"
    head_rows = [r for r in rows if is_head_key(r.keys[0])]
    refusal = reader.info().head_refusal if head_rows and not trunk_only else None
    if refusal:
        raise CheckpointError(f"{source}: {refusal} No weights were changed.")
    new_head = bool(head_rows) and _replaces_head(headers, head_rows)
    if new_head:  # classes differ, or a headless file: the head starts at zero, below
        rows = [r for r in rows if r not in head_rows]
    num_prefix = _num_prefix_tokens(model)
    resizes = _resizes(model, reader)

    missing, mismatched = [], []
    for row in rows:
        for key, shape in zip(row.keys, row.shapes):
            if key not in headers:
                missing.append(key)
            elif headers[key].problem:
                continue  # reported below, with what is wrong with the member
            elif key == POS_EMBED_KEY:
                found = headers[key].shape
                if metadata.get("grid") is None and len(found) == 3 and found[2] == shape[2]:
                    _file_grid(found[1] - num_prefix, None, model, source)  # one line if ambiguous
                problem = _posembed_problem(headers[key].shape, shape, num_prefix,
                                            metadata.get("grid"), model)
                if problem:
                    mismatched.append(f"{key}: expected {shape}, found {headers[key].shape} "
                                      f"({problem})")
            elif resample_patches and key == EMBEDDING_KERNEL \
                    and _other_patch_size(headers[key].shape, shape):
                continue  # resampled to the model's patch size, below
            elif not fits(headers[key].shape, tuple(shape)):
                mismatched.append(f"{key}: expected {tuple(shape)}, found {headers[key].shape}")
    used = {k for row in rows for k in row.keys}
    unused = DROPPABLE_PREFIXES + POOLING_PREFIXES
    unexpected = sorted(k for k in considered if k not in used and not k.startswith(unused))
    present = sorted(used & set(headers))
    problems = {
        "missing keys": missing, "unexpected keys": unexpected,
        "shape mismatches": mismatched,
        "unreadable members": [f"{k}: {headers[k].problem}" for k in sorted(considered)
                               if headers[k].problem],
        PICKLE_PROBLEM: [k for k in present if headers[k].dtype.hasobject],
        "non-float arrays": [f"{k}: {headers[k].dtype} (the weights are floating point)"
                             for k in present if not headers[k].problem
                             and not headers[k].dtype.hasobject
                             and not np.issubdtype(headers[k].dtype, np.floating)],
    }
    if any(problems.values()):
        raise CheckpointError(_report(f"{source} does not fit {subject}:", problems, headers,
                                      missing, unexpected))

    if getattr(reader, "reads_in_parts", False):
        # Two passes, one row's arrays at a time: the first checks every value, the second
        # assigns. A large file (DINOv2-g: 4.5 GB) is never in memory whole beside the model,
        # and still no variable is touched before every array is known good.
        non_finite = []
        for row in rows:
            arrays = reader.read(row.keys, heads)
            non_finite += [f"{k}: {_non_finite(a)}" for k, a in arrays.items() if _non_finite(a)]
            if row.keys[0] in (POS_EMBED_KEY, EMBEDDING_KERNEL):  # the rows that are resized
                _row_value(model, reader, row, arrays, num_prefix, metadata, resample_patches,
                           resizes)
            del arrays
        _refuse_non_finite(sorted(non_finite), source, subject, headers)
        for row in rows:
            value = _row_value(model, reader, row, reader.read(row.keys, heads), num_prefix,
                               metadata, resample_patches, resizes)
            row.variable.assign(value.astype(row.variable.dtype, copy=False))
            del value
        values = []
    else:
        arrays = reader.read(present, heads)
        _refuse_non_finite([f"{k}: {_non_finite(arrays[k])}" for k in present
                            if _non_finite(arrays[k])], source, subject, headers)
        values = [(row.variable, _row_value(model, reader, row, arrays, num_prefix, metadata,
                                            resample_patches, resizes)) for row in rows]
    if new_head:
        values += [(row.variable, np.zeros(row.variable.shape)) for row in head_rows]
    for variable, value in values:  # only now, with every value in hand, touch the model
        # copy=False: float32 arrays go to the variable as they are, without a
        # second host copy of the weights.
        variable.assign(value.astype(variable.dtype, copy=False))
    if not trunk_only:
        if POSEMBED_INPUT in {layer.name for layer in model.layers}:
            # The model resizes at run time as the weights' library does, and keeps it in its
            # config: a saved model goes on resizing so.
            model.get_layer(POSEMBED_INPUT).resize = resizes.dynamic
        _warn_if_normalized_otherwise(model, reader)
    _warn_if_computed_otherwise(model, reader)
    return model


def _refuse_non_finite(non_finite, source, subject, headers):
    if non_finite:
        raise CheckpointError(_report(f"{source} does not fit {subject}:",
                                      {"arrays with non-finite values": non_finite}, headers))


def _row_value(model, reader, row, arrays, num_prefix, metadata, resample_patches, resizes):
    """The value of `row`'s variable from the checkpoint's `arrays`: position embeddings
    moved to the model's grid, a patch embedding resampled where asked, each as `resizes`."""
    source = reader.path
    value = row.value(arrays)
    if row.keys[0] == POS_EMBED_KEY:
        posembed = model.get_layer(POSEMBED_INPUT)
        grid = _file_grid(value.shape[1] - num_prefix, metadata.get("grid"), model, source)
        if value.shape != tuple(row.variable.shape) or tuple(grid) != tuple(posembed.grid_size):
            value = resize_position_embedding(value, grid, posembed.grid_size, num_prefix,
                                              method=resizes.load)
    elif resample_patches and row.keys[0] == EMBEDDING_KERNEL \
            and _other_patch_size(value.shape, row.variable.shape):
        value = resample_patch_embedding(value, tuple(row.variable.shape[:2]),
                                         method=resizes.patch)
    return np.asarray(value).reshape(row.variable.shape)


def _warn_if_computed_otherwise(model, reader):
    """Warns when the checkpoint's source computes the hybrid trunk with other numerics than
    `model`'s trunk (transformers' GroupNorm epsilon loaded into an official-numerics trunk):
    a model built with the weights (`keras_vit.ViT(..., weights=path)`) computes the source's."""
    expected = reader.info().trunk_numerics
    if not expected or RESNET not in {layer.name for layer in model.layers}:
        return
    config = model.get_layer(RESNET).get_config()
    given = {k: config.get(k) for k in expected}
    if given != expected:
        warnings.warn(f"{reader.path} was computed with the ResNet numerics {expected}; this "
                      f"model's trunk computes {given}. Build the model with the weights "
                      "(keras_vit.ViT(..., weights=path) or keras_vit.ResNetV2(..., "
                      "weights=path)), which computes the source's.", stacklevel=3)


def _check_family(model, reader, headers):
    """Refuses, in one line, a BiT file for a ViT and a ViT (or other) file for a BiT: the
    key-by-key report would list every key of both, and say less."""
    format_name = reader.format.name if reader.format else None
    file_is_bit = format_name == "bit" or (format_name is None and BIT_ROOT_KEY in headers)
    if is_bit_model(model) == file_is_bit:
        return
    what = describe_architecture(headers)
    if file_is_bit:
        raise CheckpointError(f"{reader.path} is a BiT ResNetV2 checkpoint ({what}), not weights "
                              f"for model {model.name!r}; build it with keras_vit.BiT(..., "
                              "weights=path). No weights were changed.")
    kind = f"a {format_name} checkpoint" if format_name else "a checkpoint"
    raise CheckpointError(f"{reader.path} is {kind} of {what or 'another architecture'}, not a BiT "
                          f"ResNetV2 one (no {BIT_ROOT_KEY}), so it cannot fill model "
                          f"{model.name!r}. No weights were changed.")


def _warn_if_normalized_otherwise(model, reader):
    """Warns (once per message) when the weights' source normalises pixels otherwise than
    what `model` is fed: its "preprocessing" layer, or keras_vit.preprocess_input's [-1, 1]."""
    expected = reader.info().normalization
    if expected is None:  # the source does not record it
        return
    has_layer = PREPROCESSING in {layer.name for layer in model.layers}
    given = input_normalization(model) if has_layer else OFFICIAL_NORMALIZATION
    if np.allclose(given, expected, rtol=1e-6, atol=1e-7):
        return
    fed = "its preprocessing layer gives" if has_layer else "keras_vit.preprocess_input gives"
    warnings.warn(f"{reader.path} expects pixels normalised as {describe_normalization(expected)}; "
                  f"{fed} {describe_normalization(given)}. Build the model with the weights "
                  "(keras_vit.ViT(..., weights=path, include_preprocessing=True) takes [0, 255] "
                  "pixels and normalises as the weights expect), or normalise so yourself.",
                  stacklevel=3)


def _heads(model):
    """The attention heads of `model`'s blocks (None without blocks): formats that store
    (D, D) attention kernels are split into the official (D, heads, head_dim); an
    `AttentionHeads` where the MAP head has a count of its own."""
    names = {layer.name for layer in model.layers}
    first = block_name(0)
    if first not in names:
        return None
    heads = model.get_layer(first).num_heads
    pooling = model.get_layer(MAP_POOL).num_heads if MAP_POOL in names else heads
    return heads if pooling == heads else AttentionHeads(heads, pooling)


def _non_finite(array):
    """"3 NaN, 1 Inf values" for an array holding NaN or Inf, else ""."""
    if np.isfinite(array).all():
        return ""
    nan, inf = int(np.isnan(array).sum()), int(np.isinf(array).sum())
    return ", ".join(f"{n} {what}" for n, what in ((nan, "NaN"), (inf, "Inf")) if n) + " values"


def _replaces_head(headers, head_rows):
    """Whether the model's head starts at zero instead of loading the file's.

    Only when the file has no head at all, or a whole head for another class
    count (every head array present, of the model's ranks, all with one class
    count). A half-present or mis-shaped head is an
    error, reported as missing keys or shape mismatches: never silently a zero head.
    """
    expected = {k: tuple(s) for row in head_rows for k, s in zip(row.keys, row.shapes)}
    if not any(k in headers for k in expected):
        return True
    if not all(k in headers and not headers[k].problem for k in expected):
        return False
    found = {k: headers[k].shape for k in expected}
    if found == expected:
        return False
    # Its input width may differ too: a model that drops the file's pre_logits feeds the
    # head the encoder's width, as official fine-tuning does.
    classes = {shape[-1:] for shape in found.values()}
    return len(classes) == 1 and all(len(found[k]) == len(s) for k, s in expected.items())


def _prefix_hint(missing, unexpected):
    """When most unexpected keys are missing keys under one extra prefix ("model/"), says so."""
    if not missing or not unexpected:
        return None
    missing_set = set(missing)
    prefixes = {}
    for key in unexpected:
        for i, char in enumerate(key):
            if char == "/" and key[i + 1:] in missing_set:
                prefixes[key[:i + 1]] = prefixes.get(key[:i + 1], 0) + 1
                break
    if not prefixes:
        return None
    prefix, count = max(prefixes.items(), key=lambda item: item[1])
    if count * 2 < len(unexpected):
        return None
    return (f"{count} unexpected keys are missing keys under the prefix {prefix!r}: the file "
            f"nests the parameters one level deeper. Save them without {prefix!r} (e.g. "
            f"{{k.removeprefix({prefix!r}): v for k, v in arrays.items()}}) and load that.")


def _other_patch_size(found, expected):
    """Whether an embedding kernel of shape `found` is the model's `expected` one at another
    patch size (same channels and width): FlexiViT's resize moves it there."""
    found, expected = tuple(found), tuple(expected)
    return len(found) == len(expected) == 4 and found[2:] == expected[2:] \
        and found[:2] != expected[:2]


def _resizes(model, reader):
    """How the checkpoint's own library resizes its weights: its format records it, per family
    of the model's row; arrays passed as a dict are in the official layout, so the official
    linear zoom and FlexiViT's bilinear resize."""
    if reader.format is None:
        return Resizes("linear", "linear", "bilinear")
    variant = getattr(model, VARIANT_ATTRIBUTE, None)
    return reader.format.resizes(getattr(variant, "family", None))


def _num_prefix_tokens(model):
    names = {layer.name for layer in model.layers}
    return model.get_layer(POSEMBED_INPUT).num_prefix_tokens if POSEMBED_INPUT in names else 0


def _file_grid(tokens, recorded, model, source):
    """The (rows, cols) of a file's `tokens` grid tokens: the grid the file records; else the
    model's own grid when its token count is the file's (no resize then); else the square grid.
    A non-square count that the model's grid does not fit could be several grids: one line."""
    if recorded is not None:
        return tuple(recorded)
    model_grid = tuple(model.get_layer(POSEMBED_INPUT).grid_size)
    if model_grid[0] * model_grid[1] == tokens:
        return model_grid
    square = square_grid(tokens)
    if square is None:
        raise CheckpointError(
            f"{source} has {tokens} position-embedding grid tokens, not a square and not this "
            f"model's {model_grid[0]} x {model_grid[1]} grid, and does not record its grid: "
            "pass image_size=(height, width) giving the file's own grid")
    return square


def _posembed_problem(found, expected, num_prefix, file_grid, model):
    if len(found) != 3 or found[0] != 1 or found[2] != expected[2]:
        return "width differs"
    model_grid = tuple(model.get_layer(POSEMBED_INPUT).grid_size)
    if file_grid is not None:  # recorded by save_npz
        rows, cols = file_grid
        if rows * cols + num_prefix != found[1]:
            return f"the file records a {rows} x {cols} grid, which is not its token count"
        if rows != cols and model_grid == (cols, rows):
            size = _image_size_for(model, file_grid)
            return (f"the file's grid is {rows} x {cols} tokens (rows x columns) and this model's "
                    f"image size gives {cols} x {rows}: pass image_size={size}")
        return None
    if found[1] == expected[1]:
        return None
    if square_grid(found[1] - num_prefix) is None:
        what = "a class token plus a square grid" if num_prefix else "a square grid"
        return (f"token count is not {what} and the file does not record its grid, so it cannot "
                "be resized: pass image_size=(height, width) giving the file's own grid")
    return None


def _image_size_for(model, grid):
    """The (height, width) in pixels at which `model` has `grid` tokens."""
    height, width = model.input_shape[1:3]
    if height is None or width is None:  # dynamic_image_size: sized by its stored grid
        patch = model.get_layer(EMBEDDING).patch_size
        return (grid[0] * patch, grid[1] * patch)
    rows, cols = model.get_layer(POSEMBED_INPUT).grid_size
    return (grid[0] * height // rows, grid[1] * width // cols)


def _report(title, problems, headers, missing=(), unexpected=()):
    """`title`, then each kind of problem with its first 12 keys, a guess at what the file
    is, and the promise that nothing changed."""
    lines = [title]
    for kind, items in problems.items():
        if items:
            shown = "\n    ".join(items[:12])
            more = f"\n    ... and {len(items) - 12} more" if len(items) > 12 else ""
            lines.append(f"  {len(items)} {kind}:\n    {shown}{more}")
    hint = _prefix_hint(missing, unexpected)
    if hint:
        lines.append(f"  {hint}")
    guess = describe_architecture(headers)
    if guess:
        lines.append(f"  The file looks like {guess}.")
    lines.append("  No weights were changed.")
    return "\n".join(lines)
