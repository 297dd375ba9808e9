"""The one strict loader: checkpoint arrays into a model, all or nothing.

Every key and shape is checked, and every array read and transformed, before
any variable is assigned: a failed load leaves the model as it was. Loading
only a hybrid's ResNet trunk is the same load with the rows filtered.
"""

import os

import numpy as np

from keras_vit.checkpoints.errors import CheckpointError
from keras_vit.checkpoints.formats import detect_format, read_checkpoint
from keras_vit.checkpoints.formats.npz import (
    PICKLE_PROBLEM,
    ArrayHeader,
    pop_metadata,
    read_npz,
    read_npz_headers,
)
from keras_vit.checkpoints.layout import (
    DROPPABLE_PREFIXES,
    POS_EMBED_KEY,
    describe_architecture,
    fits,
    is_head_key,
    is_trunk_key,
    layout,
    normalize_keys,
    square_grid,
)
from keras_vit.layers.tokens import resize_position_embedding

__all__ = ["load_weights", "load_resnet_weights"]


def load_weights(model, checkpoint):
    """Loads a checkpoint (a path or a dict of official-key arrays) into `model`.

    A path is an official `.npz`, a timm `.safetensors`, a transformers
    `save_pretrained` directory or a keras-hub preset directory; each is read
    into the official keys first (`keras_vit.checkpoints.formats`).

    Raises `CheckpointError` naming every missing key, unexpected key and
    mismatched shape; on any error no variable has changed. The head is
    zero-initialised when the checkpoint's class count differs from the
    model's, or the checkpoint has none; `pre_logits` is dropped when the model
    has none; the position embedding is resized when the grids differ.
    """
    return _load(model, checkpoint, trunk_only=False)


def load_resnet_weights(model, checkpoint):
    """Loads the trunk arrays of an official hybrid `.npz` (path or dict) into `model`.

    `model` has a "resnet" layer (a `ResNetV2` model or a hybrid ViT). The
    transformer's arrays are ignored; every trunk key must be present with its
    shape (GroupNorm parameters as (C,) or (1, 1, 1, C)), and no trunk key may
    be left over. Raises `CheckpointError` naming the problems; on error no
    variable has changed.
    """
    return _load(model, checkpoint, trunk_only=True)


def _load(model, checkpoint, trunk_only):
    is_path = isinstance(checkpoint, (str, os.PathLike))
    source = os.fspath(checkpoint) if is_path else "the checkpoint"
    # Checked first from the headers alone (shape, dtype), then only the arrays the model
    # uses are read: an unused or lying member costs nothing, and is never allocated. The
    # other formats (safetensors, directories) are read whole into the official keys.
    metadata = {}
    if is_path and detect_format(source) == "npz":
        given = None
        headers = read_npz_headers(source)
        metadata = pop_metadata(source, headers)
    else:
        given = read_checkpoint(source, heads=_heads(model)) if is_path else dict(checkpoint)
        given = {k: np.asarray(v) for k, v in given.items()}
        headers = {k: ArrayHeader(tuple(v.shape), v.dtype) for k, v in given.items()}
    try:
        stored = normalize_keys({k: k for k in headers})  # official key -> key as stored
    except CheckpointError as error:
        raise CheckpointError(f"{source}: {error}") from None
    headers = {key: headers[name] for key, name in stored.items()}
    rows = layout(model)
    if trunk_only:
        rows = [r for r in rows if is_trunk_key(r.keys[0])]
        considered = {k for k in headers if is_trunk_key(k)}
        subject = f"the ResNet trunk of model {model.name!r}"
    else:
        considered = set(headers)
        subject = f"model {model.name!r}"
    head_rows = [r for r in rows if is_head_key(r.keys[0])]
    new_head = bool(head_rows) and _replaces_head(headers, head_rows)
    if new_head:  # classes differ, or a headless file: the head starts at zero, below
        rows = [r for r in rows if r not in head_rows]
    num_prefix = _num_prefix_tokens(model)

    missing, mismatched = [], []
    for row in rows:
        for key, shape in zip(row.keys, row.shapes):
            if key not in headers:
                missing.append(key)
            elif headers[key].problem:
                continue  # reported below, with what is wrong with the member
            elif key == POS_EMBED_KEY:
                problem = _posembed_problem(headers[key].shape, shape, num_prefix,
                                            metadata.get("grid"), model)
                if problem:
                    mismatched.append(f"{key}: expected {shape}, found {headers[key].shape} "
                                      f"({problem})")
            elif not fits(headers[key].shape, tuple(shape)):
                mismatched.append(f"{key}: expected {tuple(shape)}, found {headers[key].shape}")
    used = {k for row in rows for k in row.keys}
    unexpected = sorted(k for k in considered if k not in used and not k.startswith(DROPPABLE_PREFIXES))
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

    wanted = [stored[k] for k in present]
    read = read_npz(source, wanted) if given is None else {k: given[k] for k in wanted}
    arrays = {key: read[stored[key]] for key in present}
    non_finite = [f"{k}: {_non_finite(arrays[k])}" for k in present if _non_finite(arrays[k])]
    if non_finite:
        raise CheckpointError(_report(f"{source} does not fit {subject}:",
                                      {"arrays with non-finite values": non_finite}, headers))

    values = []
    for row in rows:
        value = row.value(arrays)
        if row.keys[0] == POS_EMBED_KEY:
            posembed = model.get_layer("posembed_input")
            grid = metadata.get("grid") or square_grid(value.shape[1] - num_prefix)
            if value.shape != tuple(row.variable.shape) or tuple(grid) != tuple(posembed.grid_size):
                value = resize_position_embedding(value, grid, posembed.grid_size, num_prefix)
        values.append((row.variable, np.asarray(value).reshape(row.variable.shape)))
    if new_head:
        values += [(row.variable, np.zeros(row.variable.shape)) for row in head_rows]
    for variable, value in values:  # only now, with every value in hand, touch the model
        # copy=False: float32 arrays go to the variable as they are, without a
        # second host copy of the weights.
        variable.assign(value.astype(variable.dtype, copy=False))
    return model


def _heads(model):
    """The attention heads of `model`'s blocks (None without blocks): formats that store
    (D, D) attention kernels are split into the official (D, heads, head_dim)."""
    names = {layer.name for layer in model.layers}
    return model.get_layer("encoderblock_0").num_heads if "encoderblock_0" in names else None


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


def _num_prefix_tokens(model):
    names = {layer.name for layer in model.layers}
    return model.get_layer("posembed_input").num_prefix_tokens if "posembed_input" in names else 0


def _head_fits(arrays, head_rows):
    return all(k in arrays and tuple(arrays[k].shape) == tuple(s)
               for row in head_rows for k, s in zip(row.keys, row.shapes))


def _posembed_problem(found, expected, num_prefix, file_grid, model):
    if len(found) != 3 or found[0] != 1 or found[2] != expected[2]:
        return "width differs"
    model_grid = tuple(model.get_layer("posembed_input").grid_size)
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
    rows, cols = model.get_layer("posembed_input").grid_size
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
