"""open_clip's `open_clip_config.json`: the architecture of an OpenCLIP Hub folder.

open_clip publishes a model on the Hugging Face Hub as a folder (`push_to_hf_hub`,
`save_for_hf`): `open_clip_model.safetensors` (the state dict, read by open_clip.py's rows)
beside `open_clip_config.json`, `{"model_cfg": {...}, "preprocess_cfg": {...}}`. `model_cfg`
is the model's config as open_clip builds it (`create_model("hf-hub:...")`): `embed_dim` (the
projection's width), `vision_cfg` (`CLIPVisionCfg`: `image_size`, `layers`, `width`,
`patch_size`, `head_width` 64, `mlp_ratio` 4.0) and `quick_gelu` (QuickGELU where true, else
torch's erf GELU: the "-quickgelu" model names set it, OpenAI's weights need it); LayerNorm
epsilon is torch's 1e-5 unless `norm_kwargs` sets `eps`. `preprocess_cfg` holds the pixels'
`mean` and `std`.

The config names a CLIP row (`CLIP-B/32`, ...; a LAION GELU tower is the row with "-gelu",
another size the CLIP row resized), or a timm trunk (`timm_model_name`: open_clip's SigLIP
towers) that is a timm VisionTransformer keras_vit has a row for, pooled as that row pools,
with open_clip's linear projection or none (another is refused naming the field). What
open_clip builds otherwise, keras_vit does not: a ModifiedResNet (`layers` a list), the attentional pooler,
another `pool_type`, no `ln_pre`, sin-cos positions, a LayerNorm after the pooling, LayerScale,
the custom attention block's norms and scales, or activation arguments are each refused in
one line naming the field.
"""

import dataclasses
import os

from keras_vit.checkpoints.errors import CheckpointError
from keras_vit.checkpoints.formats import config_values as checks
from keras_vit.checkpoints.formats.base import normalization_from
from keras_vit.checkpoints.formats.config_variant import match_or_name
from keras_vit.checkpoints.formats.preprocess_configs import open_clip_preprocessing
from keras_vit.variants import FAMILIES, timm_variant

__all__ = ["CONFIG_NAME", "WEIGHTS_NAME", "PICKLED_WEIGHTS_NAME", "read_open_clip_config"]

CONFIG_NAME, WEIGHTS_NAME = "open_clip_config.json", "open_clip_model.safetensors"
PICKLED_WEIGHTS_NAME = "open_clip_pytorch_model.bin"  # read where no safetensors file is

_MODEL_FIELDS = {"embed_dim": checks.WIDTH, "vision_cfg": checks.mapping, "quick_gelu": checks.flag}
_VISION_FIELDS = {"width": checks.WIDTH, "head_width": checks.WIDTH,
                  "mlp_ratio": checks.number(0, checks.MAX_WIDTH), "patch_size": checks.PIXELS,
                  "norm_kwargs": checks.mapping}

# CLIPVisionCfg's fields that build another tower than OpenAI's: the values that keep
# OpenAI's (open_clip's default first), and what another value builds.
_UNREAD = {
    "attentional_pool": ((False,), "the attentional pooler"),
    "pool_type": (("tok",), "another pooling than the class token"),
    "no_ln_pre": ((False,), "a tower without ln_pre"),
    "pos_embed_type": (("learnable",), "fixed sin-cos positions"),
    "final_ln_after_pool": ((False,), "the LayerNorm after the pooling"),
    "ls_init_value": ((None,), "LayerScale"),
    "block_type": ((None, "default"), "the custom attention block"),
    "qk_norm": ((False,), "query and key norms"),
    "scaled_cosine_attn": ((False,), "scaled cosine attention"),
    "scale_heads": ((False,), "per-head attention scales"),
    "scale_attn_inner": ((False,), "a norm inside the attention"),
    "scale_attn": ((False,), "a norm after the attention"),
    "scale_fc": ((False,), "a norm in the MLP"),
    "act_kwargs": ((None, {}), "activation arguments"),
}


def _image_size(path, vision):
    size = vision.get("image_size", 224)
    sides = size if isinstance(size, list) else [size]
    checks.check_fields(path, {"image_size": sides}, {"image_size": checks.counts(checks.MAX_PIXELS, 2)},
                 prefix="model_cfg.vision_cfg.")
    if len(set(sides)) != 1:
        raise CheckpointError(f"{path}: model_cfg.vision_cfg.image_size {size} is not square; "
                              "keras_vit reads square CLIP towers.")
    return sides[0]


def _check_tower(path, vision):
    layers = vision.get("layers", 12)
    if isinstance(layers, list):
        raise CheckpointError(f"{path}: model_cfg.vision_cfg.layers {layers} builds open_clip's "
                              "ModifiedResNet, which keras_vit does not read.")
    checks.check_fields(path, {"layers": layers}, {"layers": checks.LAYERS},
                 prefix="model_cfg.vision_cfg.")
    for field, (kept, builds) in _UNREAD.items():
        if vision.get(field, kept[0]) not in kept:
            raise CheckpointError(f"{path}: model_cfg.vision_cfg.{field} is "
                                  f"{repr(vision[field])[:60]}, which builds {builds}; keras_vit "
                                  "reads OpenAI's CLIP tower only.")
    norm = vision.get("norm_kwargs") or {}
    if set(norm) - {"eps"}:
        raise CheckpointError(f"{path}: model_cfg.vision_cfg.norm_kwargs sets "
                              f"{', '.join(sorted(set(norm) - {'eps'}))}; keras_vit reads eps only.")
    if "eps" in norm:
        checks.check_fields(path, norm, {"eps": checks.epsilon}, prefix="model_cfg.vision_cfg.norm_kwargs.")
    return layers, norm.get("eps", 1e-5)


def _variant(vision, layers, image_size, activation):
    """The CLIP row the tower is, else the row resized; a row's tower with GELU for its
    QuickGELU is that row named "-gelu" (LAION's)."""
    width, head_width = vision.get("width", 768), vision.get("head_width", 64)
    if width % head_width:
        return None
    variant = dataclasses.replace(
        FAMILIES["CLIP-B/16"], width=width, depth=layers, heads=width // head_width,
        mlp_dim=int(width * vision.get("mlp_ratio", 4.0)), patch_size=vision.get("patch_size", 16),
        image_size=image_size, activation=activation)
    found = match_or_name(variant, family="CLIP", ignore=("activation",))
    if found.activation == activation:
        return found
    return dataclasses.replace(found, name=f"{found.name}-{activation}", activation=activation)


# A timm trunk's fields (open_clip's TimmModel): timm's global_pool names as Variant.classifier.
_TIMM_FIELDS = {"timm_model_name": checks.string, "timm_pool": checks.string,
                "timm_proj": checks.string, "timm_proj_bias": checks.flag}
_TIMM_POOLS = {"token": "token", "avg": "gap", "map": "map"}


def timm_trunk(path, vision):
    """(the `Variant`, whether a projection follows) of a timm trunk (vision_cfg's
    timm_model_name: open_clip's TimmModel, the timm model under visual.trunk., a bias-free
    Linear under visual.head.proj where timm_proj is "linear"); refused in one line naming the
    field where keras_vit has no row for the model or does not pool or project as it says."""
    from keras_vit.checkpoints.formats.timm import gelu_clip_variant  # timm.py: the CLIP names

    vision = checks.check_fields(path, vision, _TIMM_FIELDS, prefix="model_cfg.vision_cfg.")
    name = vision["timm_model_name"]
    variant = timm_variant(name) or gelu_clip_variant(name)
    if variant is None or variant.is_hybrid:
        raise CheckpointError(f"{path}: model_cfg.vision_cfg.timm_model_name {name[:80]!r} is "
                              "no timm VisionTransformer keras_vit has a row for, so its trunk "
                              "is not read.")
    pool = vision.get("timm_pool", "avg")
    if _TIMM_POOLS.get(pool) != variant.classifier:
        raise CheckpointError(f"{path}: model_cfg.vision_cfg.timm_pool {pool[:40]!r} is not how "
                              f"{variant.name} pools ({variant.classifier}); keras_vit reads "
                              "a timm trunk pooled as its architecture pools.")
    projection = vision.get("timm_proj", "linear")
    if projection not in ("linear", "none", ""):
        raise CheckpointError(f"{path}: model_cfg.vision_cfg.timm_proj {projection[:40]!r} builds "
                              "a projection keras_vit does not read (it reads \"linear\" and "
                              "\"none\").")
    return variant, projection == "linear"


def read_open_clip_config(source):
    """(the `Variant`, LayerNorm epsilon, normalisation, the timm trunk's projection: None
    for OpenAI's tower, else whether one follows, preprocessing) an OpenCLIP Hub folder's
    open_clip_config.json records (`source`: the folder's `base.Source`); a one-line
    `CheckpointError` for a config that is not one, or builds a tower keras_vit does not read."""
    path = os.path.join(source.path, CONFIG_NAME)
    config = checks.check_object(path, source.json(CONFIG_NAME))
    model = config.get("model_cfg")
    if model is None:
        raise CheckpointError(f"{path}: model_cfg is missing; open_clip's config holds the "
                              "model's under it.")
    model = checks.check_fields(path, checks.check_object(f"{path} (its model_cfg)", model), _MODEL_FIELDS,
                         prefix="model_cfg.", required=("vision_cfg",))
    vision = checks.check_fields(path, model["vision_cfg"], _VISION_FIELDS, prefix="model_cfg.vision_cfg.")
    projection = None
    if vision.get("timm_model_name") not in (None, ""):  # timm's own model, its own numerics
        variant, projection = timm_trunk(path, vision)
        layer_norm_epsilon = variant.layer_norm_epsilon or 1e-6
    else:
        layers, layer_norm_epsilon = _check_tower(path, vision)
        activation = "quick_gelu" if model.get("quick_gelu", False) else "gelu"
        variant = _variant(vision, layers, _image_size(path, vision), activation)
        if variant is None:
            raise CheckpointError(f"{path}: model_cfg.vision_cfg.width "
                                  f"{vision.get('width', 768)} is not a multiple of head_width "
                                  f"{vision.get('head_width', 64)}.")
    checks.check_architecture(path, variant, variant.image_size)  # before anything is built
    preprocess = config.get("preprocess_cfg") or {}
    preprocess = checks.check_object(f"{path} (its preprocess_cfg)", preprocess)
    normalization = (normalization_from(path, preprocess["mean"], preprocess["std"])
                     if "mean" in preprocess and "std" in preprocess else None)
    return (variant, layer_norm_epsilon, normalization, projection,
            open_clip_preprocessing(path, preprocess))
