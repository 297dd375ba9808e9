"""Converters as tables: a format's keys are rows of (source template, official template(s),
transform), and one function applies the rows in either direction.

A template names one array per block: "{i}" an encoder block, "{s}"/"{u}" a trunk stage and
unit, numbered as the official keys number them; a source that counts otherwise says so in
its own template ("stages.{s-1}", "transformer_block_{i+1}"). A transform holds a forward
(source array -> official array, or arrays when one source array fuses several) and its
inverse, side by side, so reading a format and writing it cannot drift apart. A second row
for the same official keys is an alternative spelling the reader accepts and the writer never
uses (`read_only`).
"""

import dataclasses
import re
from collections.abc import Callable
from typing import NamedTuple

import numpy as np

from keras_vit.checkpoints.layout import CLS_KEY, MAP, POS_EMBED_KEY, REG_TOKEN_KEY
from keras_vit.errors import ArgumentError

__all__ = ["Transform", "KeyRow", "AttentionHeads", "heads_of", "to_official", "from_official",
           "COPY", "LINEAR", "CONV",
           "HEADS_IN", "HEADS_BIAS", "HEADS_OUT", "KERAS_HEADS_IN", "KERAS_HEADS_OUT",
           "FUSED_QKV", "FUSED_QKV_BIAS",
           "ADD_BATCH_AXIS", "FUSED_KV", "FUSED_KV_BIAS", "TOKEN_VECTOR", "bias_free",
           "renamed", "fold_class_position"]


@dataclasses.dataclass(frozen=True)
class Transform:
    """How one source array becomes its official array(s), and back."""

    name: str
    forward: Callable  # (source array, heads or None) -> official array (a list for fused rows)
    inverse: Callable  # official array (a list for fused rows) -> source array


@dataclasses.dataclass(frozen=True)
class KeyRow:
    """One source array and the official key(s) it holds."""

    source: str  # "blocks.{i}.attn.qkv.weight"
    official: tuple  # ("Transformer/encoderblock_{i}/.../query/kernel", ...): one key, or the parts
    transform: Transform = None  # None: copied as it is
    read_only: bool = False  # an alternative spelling: read, never written

    def __post_init__(self):
        if isinstance(self.official, str):
            object.__setattr__(self, "official", (self.official,))
        if self.transform is None:
            object.__setattr__(self, "transform", COPY)


class AttentionHeads(NamedTuple):
    """The heads a fused attention kernel is split into where the MAP head has its own count:
    the encoder blocks' and the MAP head's (`Variant.map_heads`)."""

    encoder: int
    pooling: int


def heads_of(heads, official_key):
    """The head count that splits `official_key`'s array: `heads` itself (an int or None), or
    the MAP head's or the encoder's of an `AttentionHeads`."""
    if not isinstance(heads, AttentionHeads):
        return heads
    return heads.pooling if official_key.startswith(MAP + "/") else heads.encoder


def split_heads(a, heads, axis):
    """(.., D, ..) -> (.., heads, D // heads, ..) at `axis`: the official attention shapes.
    `heads` None (a header check that needs no heads) or not dividing D: kept, and the loader
    names the shape mismatch."""
    if heads is None or a.ndim <= axis or a.shape[axis] % heads:
        return a
    shape = list(a.shape)
    shape[axis:axis + 1] = [heads, shape[axis] // heads]
    return a.reshape(shape)


def _from_conv(a, heads):
    # torch (out, in, kh, kw) -> (kh, kw, in, out); another rank is passed on for the loader to
    # name its shape.
    return a.transpose(2, 3, 1, 0) if a.ndim == 4 else a


def _fused_parts(a, count=3):
    """`count` equal parts along the first axis; an array that has none (a scalar, rows left
    over) is passed whole as each part, whose shape the loader names: never truncated."""
    if a.ndim == 0 or a.shape[0] % count:
        return [a] * count
    part = a.shape[0] // count
    return [a[j * part:(j + 1) * part] for j in range(count)]


COPY = Transform("copy", lambda a, heads: a, lambda a: a)
# torch Linear (out, in) <-> a Dense kernel (in, out).
LINEAR = Transform("linear", lambda a, heads: a.T, lambda a: a.T)
CONV = Transform("conv", _from_conv, lambda a: a.transpose(3, 2, 0, 1))
# A torch query/key/value Linear (D, D) <-> the official (D, heads, head_dim) kernel.
HEADS_IN = Transform("heads_in", lambda a, heads: split_heads(a.T, heads, axis=1),
                     lambda a: a.reshape(a.shape[0], -1).T)
HEADS_BIAS = Transform("heads_bias", lambda a, heads: split_heads(a, heads, axis=0),
                       lambda a: a.reshape(-1))
# The output projection (D, D) <-> the official (heads, head_dim, D).
HEADS_OUT = Transform("heads_out", lambda a, heads: split_heads(a.T, heads, axis=0),
                      lambda a: a.reshape(-1, a.shape[-1]).T)
# The same two for a Keras Dense kernel (D, D), stored (in, out) (keras-hub's DINOv3).
KERAS_HEADS_IN = Transform("keras_heads_in", lambda a, heads: split_heads(a, heads, axis=1),
                           lambda a: a.reshape(a.shape[0], -1))
KERAS_HEADS_OUT = Transform("keras_heads_out", lambda a, heads: split_heads(a, heads, axis=0),
                            lambda a: a.reshape(-1, a.shape[-1]))
# timm's fused qkv Linear (3D, D) <-> the official query, key and value kernels.
FUSED_QKV = Transform(
    "fused_qkv", lambda a, heads: [HEADS_IN.forward(p, heads) for p in _fused_parts(a)],
    lambda parts: np.concatenate([HEADS_IN.inverse(p) for p in parts]))
FUSED_QKV_BIAS = Transform(
    "fused_qkv_bias", lambda a, heads: [HEADS_BIAS.forward(p, heads) for p in _fused_parts(a)],
    lambda parts: np.concatenate([HEADS_BIAS.inverse(p) for p in parts]))
# timm's attention pooling fuses key and value alone, (2D, D) <-> the official key and value.
FUSED_KV = Transform(
    "fused_kv", lambda a, heads: [HEADS_IN.forward(p, heads) for p in _fused_parts(a, 2)],
    lambda parts: np.concatenate([HEADS_IN.inverse(p) for p in parts]))
FUSED_KV_BIAS = Transform(
    "fused_kv_bias", lambda a, heads: [HEADS_BIAS.forward(p, heads) for p in _fused_parts(a, 2)],
    lambda parts: np.concatenate([HEADS_BIAS.inverse(p) for p in parts]))
# keras-hub's position embedding (tokens, D) <-> the official (1, tokens, D).
ADD_BATCH_AXIS = Transform("add_batch_axis", lambda a, heads: a[None] if a.ndim == 2 else a,
                           lambda a: a[0])
# CLIP's class embedding (D,) <-> the official class token (1, 1, D).
TOKEN_VECTOR = Transform("token_vector",
                         lambda a, heads: a.reshape(1, 1, -1) if a.ndim == 1 else a,
                         lambda a: a.reshape(-1))


def bias_free(transform):
    """CLIP's projection, a kernel without bias, as the official head: the kernel through
    `transform` and a zero bias; written back only while the bias is zero."""
    def forward(a, heads):
        kernel = transform.forward(a, heads)
        return [kernel, np.zeros(kernel.shape[-1:], kernel.dtype)]

    def inverse(parts):
        kernel, bias = parts
        if np.any(bias):
            raise ArgumentError("CLIP's projection has no bias; this head's bias is not zero. "
                                "Save the model with save_npz or save_safetensors.")
        return transform.inverse(kernel)

    return Transform(f"bias_free_{transform.name}", forward, inverse)


def renamed(table, renames):
    """`table`'s rows with the source templates `renames` names spelled another way: a library
    that stores another's layout under a few names of its own (DINOv2's release, timm's)."""
    return tuple(dataclasses.replace(row, source=renames.get(row.source, row.source))
                 for row in table)


def fold_class_position(out):
    """Where the position embedding covers the class token but the registers come after the
    sum (DINOv2 with registers), the class token's position is added to it alone: folded into
    the token, exactly (timm's _convert_dinov2), the embedding left on the patches.
    Official-key arrays, in place."""
    if REG_TOKEN_KEY in out and POS_EMBED_KEY in out and CLS_KEY in out:
        pos = out[POS_EMBED_KEY]
        out[CLS_KEY] = out[CLS_KEY] + pos[:, :1]
        out[POS_EMBED_KEY] = pos[:, 1:]
    return out


_FIELD = re.compile(r"\{(\w+)([+-]\d+)?\}")


@dataclasses.dataclass(frozen=True)
class _Template:
    """A key template compiled once: matched against keys, and filled in."""

    text: str
    pattern: re.Pattern
    offsets: dict  # field -> what the template adds to the official number

    @classmethod
    def of(cls, text):
        parts, offsets, at = [], {}, 0
        for m in _FIELD.finditer(text):
            parts.append(re.escape(text[at:m.start()]))
            name = m.group(1)
            parts.append(f"(?P={name})" if name in offsets else f"(?P<{name}>\\d+)")
            offsets[name] = int(m.group(2) or 0)
            at = m.end()
        parts.append(re.escape(text[at:]))
        return cls(text, re.compile("".join(parts)), offsets)

    def match(self, key):
        """The official numbering of `key`'s fields ({"i": 3}), or None when it is not one."""
        m = self.pattern.fullmatch(key)
        if m is None:
            return None
        fields = {name: int(m.group(name)) - offset for name, offset in self.offsets.items()}
        return fields if all(v >= 0 for v in fields.values()) else None

    def fill(self, fields):
        return _FIELD.sub(lambda m: str(fields[m.group(1)] + int(m.group(2) or 0)), self.text)


def _compiled(table):
    return [(row, _Template.of(row.source), [_Template.of(k) for k in row.official])
            for row in table]


def to_official(table, arrays, heads=None, unknown_prefix="source:"):
    """{source key: array} -> {official key: array} through `table`'s rows. `heads` splits
    the attention arrays of formats that fuse heads (None keeps them (D, D): enough for a
    check of which keys are there; an `AttentionHeads` splits the MAP head's by its own count).
    A key no row takes passes through as `unknown_prefix` + key, for the strict loader to name
    as unexpected."""
    compiled = _compiled(table)
    out = {}
    for key, array in arrays.items():
        for row, source, officials in compiled:
            fields = source.match(key)
            if fields is not None:
                targets = [t.fill(fields) for t in officials]
                if any(t in out for t in targets):
                    # Two spellings of one weight (timm's norm and Eva's fc_norm): neither is
                    # chosen silently; the second is named as unexpected.
                    out[unknown_prefix + key] = array
                    break
                values = row.transform.forward(array, heads_of(heads, officials[0].text))
                values = values if len(officials) > 1 else [values]
                out.update(zip(targets, values))
                break
        else:
            out[unknown_prefix + key] = array
    return out


def from_official(table, arrays, format_name):
    """{official key: array} -> {source key: array} through `table`'s written rows (the inverse
    of `to_official`). An official key no row writes is refused: the format has no place for it."""
    compiled = [c for c in _compiled(table) if not c[0].read_only]
    out, used = {}, set()
    for key in arrays:
        if key in used:
            continue
        problem = f"The weight {key} has no place in the {format_name} layout."
        for row, source, officials in compiled:
            # `key` may be any part of a fused row: its fields name the whole row.
            fields = next((f for t in officials if (f := t.match(key)) is not None), None)
            if fields is None:
                continue
            keys = [t.fill(fields) for t in officials]
            absent = [k for k in keys if k not in arrays]
            if absent:  # a later row may store the key alone (a query bias without a key's)
                problem = (f"{format_name} stores {', '.join(keys)} as one array; "
                           f"{', '.join(absent)} is missing.")
                continue
            parts = [arrays[k] for k in keys]
            out[source.fill(fields)] = row.transform.inverse(parts if len(keys) > 1 else parts[0])
            used.update(keys)
            break
        else:
            raise ArgumentError(problem)
    return out
