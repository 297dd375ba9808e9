"""from_pretrained: a model built from a source that records its own architecture.

What each source records, read through its checkpoint format (`CheckpointInfo.variant`):
a timm Hub folder's config.json (`architecture`, with its `model_args`), a DINOv2 release
file's shapes (the sizes DINOv2 released), a transformers folder's config.json (ViT,
ViTHybrid, DeiT, DINOv2, SigLIP, CLIP), a keras-hub ViT, SigLIP, CLIP or DINOv2 preset's
config.json, an OpenCLIP Hub folder's open_clip_config.json, a keras_vit `.npz` (its
metadata's variant), a catalogue entry (its variant).
A source that records none (a bare state dict, an official `.npz`) is refused, naming the
variants whose shapes fit and every setting that changes the outputs and that neither its
shapes nor a config give (the heads a torch state dict fuses, the MLP activation, the GELU
form, the epsilon): the route it names, `keras_vit.ViT(...)` with them spelled out, is exact
once they are the file's model's.

A file or folder is opened once: the reader the variant is read from is the reader `ViT` loads
(an `OpenedCheckpoint`), so nothing is parsed twice and a keras-hub preset is built by
keras-hub once.
"""

import contextlib
import os

from keras_vit.checkpoints import catalogue
from keras_vit.checkpoints.cache import hub_address, hub_snapshot
from keras_vit.checkpoints.catalogue import OpenedCheckpoint, opened_checkpoint
from keras_vit.checkpoints.errors import CheckpointError
from keras_vit.checkpoints.formats import is_checkpoint_path, open_checkpoint
from keras_vit.checkpoints.layout import MAP_PROBE, MAP_QUERY_KERNEL, QUERY_KERNEL
from keras_vit.checkpoints.shape_check import fitting_variants
from keras_vit.errors import ArgumentError, ArgumentTypeError
from keras_vit.models.vit import ViT
from keras_vit.variants import get_variant

__all__ = ["from_pretrained", "recorded_variant", "fitting_variants"]


def from_pretrained(source, **kwargs):
    """Builds the architecture `source` records and loads its weights, as
    `timm.create_model(name, pretrained=True)` and keras-hub's `from_preset` do.

    Args:
        source: a timm Hub folder (config.json names the architecture), a transformers
            `save_pretrained` folder (ViT, DeiT, DINOv2 with or without registers, SigLIP or
            CLIP vision model), a keras-hub ViT, SigLIP, CLIP or DINOv2 preset, an OpenCLIP
            Hub folder (open_clip_config.json beside open_clip_model.safetensors),
            "hf://owner/name[@revision]" (one of those, fetched through huggingface_hub),
            DINOv2's own release `.pth` (its sizes record their row), a keras_vit `.npz`
            written by `save_npz`,
            or a catalogue tag that names one weight set ("keras-vit info" lists them).
        **kwargs: `keras_vit.ViT`'s arguments (image_size, include_top, classes, ...), except
            `variant` and `weights`, which the source gives.

    With `include_top=False` the model gives the family's features: DINOv2's class token after
    the final norm, SigLIP's MAP head output, CLIP's pooled class token, projected (the file's
    `visual_projection` as the head) when the file has the projection.

    Raises `CheckpointError` in one line for a source that does not record its architecture
    (a bare `.safetensors`, an official `.npz`), naming the variants whose shapes fit.
    """
    for name in ("variant", "weights"):
        if name in kwargs:
            raise ArgumentError(f"from_pretrained takes the {name} from the source; to choose it, "
                                "use keras_vit.ViT(variant, weights=source).")
    variant, weights, projection = _resolve(source)
    # An opened file is closed however ViT ends, a refused argument included.
    opened = weights if isinstance(weights, OpenedCheckpoint) else None
    with contextlib.closing(opened) if opened is not None else contextlib.nullcontext():
        if projection and variant.family == "CLIP" and kwargs.get("include_top") is False:
            # CLIP's features are the projected embedding: the projection is the file's head.
            kwargs = {**kwargs, "include_top": True}
        return ViT(variant, weights=weights, **kwargs)


def _resolve(source):
    """(variant, weights for ViT, whether the file has a head) of a source: a file or folder's
    weights are its `OpenedCheckpoint`, which the caller closes."""
    if not isinstance(source, (str, os.PathLike)):
        raise ArgumentTypeError("from_pretrained takes a path, an hf:// address or a catalogue "
                                f"tag, got {type(source).__name__}.")
    source = os.fspath(source)
    if source.startswith("hf://"):
        repo, revision = hub_address(source)
        entries = [c for c in catalogue() if c.hub == repo]
        if len({c.variant for c in entries}) == 1:
            return get_variant(entries[0].variant), source, bool(entries[0].classes)
        # Not catalogued: fetched (or found in huggingface_hub's cache), then read as a folder.
        source = hub_snapshot(repo, revision, source)
    if is_checkpoint_path(source) or os.path.exists(source):
        reader = open_checkpoint(source)
        try:
            variant, has_head = _recorded(reader)
        except BaseException:
            reader.close()
            raise
        return variant, opened_checkpoint(variant, reader), has_head
    entries = [c for c in catalogue() if c.tag == source and not c.hub]
    variants = sorted({c.variant for c in entries})
    if len(variants) == 1:
        return get_variant(variants[0]), source, bool(entries[0].classes)
    if variants:
        raise ArgumentError(f"The catalogue tag {source!r} names weights of {len(variants)} "
                            f"architectures ({', '.join(variants)}); name one: "
                            f"keras_vit.ViT({variants[0]!r}, weights={source!r}).")
    raise ArgumentError(f"{source!r} is no file, folder, hf:// address or catalogue tag; "
                        "`keras-vit info` lists the catalogue.")


def recorded_variant(path):
    """(the `Variant` a checkpoint records, whether it has a head); a one-line
    `CheckpointError` naming the variants whose shapes fit where it records none."""
    with contextlib.closing(open_checkpoint(path)) as reader:
        return _recorded(reader)


def _recorded(reader):
    """`recorded_variant` of an open reader."""
    info, path = reader.info(), reader.path
    if info.variant is not None:
        return info.variant, info.classes is not None
    fit, inferred = fitting_variants(info.shapes), {}
    if not fit:  # a MAP head whose split arrays show a head count of its own
        inferred = shape_fields(info.shapes)
        fit = fitting_variants(info.shapes, **inferred) if inferred else []
    names = ", ".join(f'"{v.name}"' for v in fit) or "none of keras_vit's variants"
    shown = "".join(f" with {k}={v}" for k, v in inferred.items())
    what = f"{path} does not record its architecture ({info.format} weights alone)"
    if not fit:
        raise CheckpointError(f"{what}; the variants whose shapes fit: {names}. Build one with "
                              f"keras_vit.ViT('a variant', weights={path!r}).")
    settings = unrecorded_settings(reader.format, info.shapes)
    if not settings:  # the shapes say everything the row does not: the row is exact
        route = (_route(fit[0], [], reader.format, path, inferred) if inferred
                 else f"keras_vit.ViT({fit[0].name!r}, weights={path!r})")
        raise CheckpointError(f"{what}; the variants whose shapes fit{shown}: {names}. Build "
                              f"one with {route}.")
    described = ", ".join(_SETTING_NAMES[s] for s in settings)
    raise CheckpointError(f"{what}, and neither its shapes nor a config give its {described}; "
                          f"the variants whose shapes fit{shown}: {names}. Build it with its "
                          f"model's own values, e.g. "
                          f"{_route(fit[0], settings, reader.format, path, inferred)}.")


# How a refusal names each setting a file leaves out.
_SETTING_NAMES = {"heads": "attention heads", "map_heads": "MAP head's attention heads",
                  "activation": "MLP activation", "approximate_gelu": "GELU form (tanh or erf)",
                  "layer_norm_epsilon": "LayerNorm epsilon"}


def unrecorded_settings(checkpoint_format, shapes):
    """The settings that change a model's outputs and that a file of these official-key shapes
    does not record: the heads where its shapes fuse them, then what its format leaves out."""
    settings = []
    if len(shapes.get(QUERY_KERNEL.format(i=0), (0, 0, 0))) != 3:
        settings.append("heads")
    if MAP_PROBE in shapes and len(shapes.get(MAP_QUERY_KERNEL, (0, 0, 0))) != 3:
        settings.append("map_heads")
    return settings + list(checkpoint_format.unrecorded if checkpoint_format else ())


def shape_fields(shapes):
    """The `Variant` fields that official-key shapes set exactly where a row may differ: the
    MAP head's heads, where its query kernel is split (D, heads, head_dim)."""
    query = shapes.get(MAP_QUERY_KERNEL, ())
    return {"map_heads": query[1]} if len(query) == 3 else {}


def _route(variant, settings, checkpoint_format, path, inferred=None):
    """The call that builds `variant` with what the shapes showed (`inferred`) and every one of
    `settings` given, `variant`'s own values spelled out: exact once they are the file's
    model's."""
    default_gelu, default_epsilon = checkpoint_format.numerics
    values = {"heads": variant.heads, "map_heads": variant.pooling_heads,
              "activation": variant.activation,
              "layer_norm_epsilon": variant.layer_norm_epsilon or default_epsilon}
    given = {**(inferred or {}), **{s: values[s] for s in settings if s in values}}
    fields = ", ".join(f"{s}={v!r}" for s, v in given.items())
    gelu = f"approximate_gelu={default_gelu!r}, " if "approximate_gelu" in settings else ""
    return (f"keras_vit.ViT(dataclasses.replace(keras_vit.get_variant({variant.name!r}), "
            f"{fields}), {gelu}weights={path!r})")
