"""A config's description of an architecture -> the `Variant` it is.

Every format that reads a config (timm's, transformers', keras-hub's, open_clip's) describes
the model as a `Variant` and asks `match_or_name` for it: the row of VARIANTS or FAMILIES it
is under another name (google/vit-base-patch16-224 is ViT-B_16), else the description itself
named after its sizes, in one scheme (`sized_name`).
"""

import dataclasses

from keras_vit.checkpoints.errors import CheckpointError
from keras_vit.variants import FAMILIES, VARIANTS

__all__ = ["match_or_name", "sized_name", "swiglu_mlp_dim", "DinoV3Spelling", "check_dinov3",
           "dinov3_fields"]


def match_or_name(variant, family=None, ignore=()):
    """The row of VARIANTS or FAMILIES (of `family` only, where given) that `variant` is, its
    fields in `ignore` aside (the row's own kept); else `variant` named `sized_name(variant)`."""
    for row in [*VARIANTS.values(), *FAMILIES.values()]:
        if family is not None and row.family != family:
            continue
        kept = {field: getattr(row, field) for field in ignore}
        if dataclasses.replace(variant, name=row.name, **kept) == row:
            return row
    return dataclasses.replace(variant, name=sized_name(variant))


def sized_name(variant):
    """A name after the sizes, for an architecture no table names: "DINOv2-384x12/14-reg4",
    "ViT-256x6/16", "R3-4-9+ViT-768x12" (a hybrid's patch is on the trunk's features)."""
    trunk = f"R{'-'.join(map(str, variant.resnet_stages))}+" if variant.is_hybrid else ""
    patch = "" if variant.is_hybrid else f"/{variant.patch_size}"
    registers = f"-reg{variant.register_tokens}" if variant.register_tokens else ""
    distilled = "-distilled" if variant.distilled else ""
    return f"{trunk}{variant.family}-{variant.width}x{variant.depth}{patch}{registers}{distilled}"


def swiglu_mlp_dim(hidden):
    """The packed width of DINOv2's SwiGLU for an MLP of `hidden` features (transformers' and
    keras-hub's): each half 2/3 of it, rounded up to a multiple of 8."""
    return 2 * ((int(hidden * 2 / 3) + 7) // 8 * 8)


@dataclasses.dataclass(frozen=True)
class DinoV3Spelling:
    """How a library's DINOv3 config names its settings (transformers' DINOv3ViTConfig,
    keras-hub's DINOV3Backbone), and the query/key/value bias defaults it gives them."""

    biases: tuple  # ((field, default), ...) for the query, key and value projections
    proj_bias: str
    mlp_bias: str
    activation: str
    gated: str = "use_gated_mlp"
    rope_theta: str = "rope_theta"


# (query, key, value biases) -> Variant.qkv_bias
_QKV_BIASES = {(True, True, True): "qkv", (True, False, True): "qv", (False, False, False): "none"}


def _biases(config, spelling):
    return tuple(bool(config.get(field, default)) for field, default in spelling.biases)


def check_dinov3(path, config, spelling):
    """A one-line CheckpointError for a DINOv3 setting keras_vit's row computes one way only:
    RoPE's period 100, biased projection and MLP, the biases of all, query and value, or none
    of q/k/v, and the activation of the MLP's kind (GELU; SiLU where gated)."""
    for field, value in ((spelling.rope_theta, 100.0), (spelling.proj_bias, True),
                         (spelling.mlp_bias, True)):
        if config.get(field, value) != value:
            raise CheckpointError(f"{path}: {field} {config[field]!r} is not DINOv3's {value!r}, "
                                  "the only one keras_vit computes.")
    if _biases(config, spelling) not in _QKV_BIASES:
        raise CheckpointError(f"{path}: query, key and value biases {_biases(config, spelling)} "
                              "are none of keras_vit's (all, query and value, or none).")
    gated = bool(config.get(spelling.gated))
    wanted = "silu" if gated else "gelu"
    if config.get(spelling.activation, "gelu") != wanted:
        raise CheckpointError(f"{path}: {spelling.activation} {config[spelling.activation]!r} "
                              f"with {spelling.gated} {gated} is not DINOv3's ({wanted}).")


def dinov3_fields(config, spelling, intermediate):
    """The Variant fields of a checked DINOv3 config: its q/k/v biases and MLP (a gated MLP of
    `intermediate` per half is the split SwiGLU of 2 x `intermediate`)."""
    gated = bool(config.get(spelling.gated))
    return dict(qkv_bias=_QKV_BIASES[_biases(config, spelling)],
                feed_forward="swiglu_split" if gated else "mlp",
                mlp_dim=(2 if gated else 1) * intermediate)
