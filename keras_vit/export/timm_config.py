"""timm's config.json for a keras_vit ViT: the architecture timm registers for it, the
create_model arguments that make it this model, and pretrained_cfg's preprocessing.

timm builds a Hub folder's model from `architecture` and `model_args` (timm's
load_model_config_from_path), so a model of a table row is that row's registered name, and
one of other sizes (the digits demo, a small family model) is the registered name of a row
with the same structure, its sizes given as model_args. keras_vit's timm reader
(checkpoints/formats/timm.py) reads both back.
"""

import dataclasses

from keras_vit.checkpoints.formats.npz_metadata import VARIANT_ATTRIBUTE, model_metadata
from keras_vit.checkpoints.formats.timm import SWIGLU_ACT_LAYER, built_by_eva, mlp_ratio_halves
from keras_vit.checkpoints.layout import QUERY_KERNEL
from keras_vit.checkpoints.shape_check import fitting_variants, shape_features, variant_fits_shapes
from keras_vit.errors import ArgumentError
from keras_vit.models.image_size import image_size, refuse_naflex
from keras_vit.normalization import input_normalization
from keras_vit.variants import FAMILIES, VARIANTS, Variant, timm_variant
from keras_vit.variants.timm_names import TIMM_ARCHITECTURES

__all__ = ["has_head", "model_variant", "registered_name", "timm_architecture", "timm_config",
           "TIMM_ACTIVATIONS"]

# timm's act_layer names (timm.layers.create_act) for the MLP activations keras_vit builds:
# (activation, approximate_gelu) -> name. The erf GELU is what every timm ViT uses unless told.
TIMM_ACTIVATIONS = {("gelu", False): "gelu", ("gelu", True): "gelu_tanh",
                    ("quick_gelu", False): "quick_gelu", ("quick_gelu", True): "quick_gelu"}
# The fields timm_architecture hands timm as model_args (the sizes), or that timm_config sets or
# checks on its own (LayerScale's presence, the activation, the epsilon, the image size and the
# normalisation of pretrained_cfg). Every other field must be the registered row's: a field added
# to Variant is checked so until it is named here, so a switch timm's config cannot set is refused,
# not dropped (a MAP head of its own head count was written as timm's, which pools with the
# encoder's heads: the same weights, another function).
_CONFIGURED = frozenset({"name", "width", "depth", "heads", "patch_size", "mlp_dim", "layer_scale",
                         "activation", "approximate_gelu", "layer_norm_epsilon", "image_size",
                         "normalization"})
_STRUCTURE = tuple(field.name for field in dataclasses.fields(Variant)
                   if field.name not in _CONFIGURED)
# timm's LayerNorm epsilon where the table's row leaves it to the weights' source.
_TIMM_EPSILON = 1e-6


def _mlp_fields(model):
    """The Variant fields of the MLP `model`'s blocks compute: the activation, or SwiGLU."""
    from keras_vit.layer_names import is_block

    activation = next(layer for layer in model.layers if is_block(layer.name)).mlp.activation
    if activation == "swiglu":
        return {"feed_forward": "swiglu"}
    return {"feed_forward": "mlp", "activation": activation}


def registered_name(base):
    """timm's registered name of a table base name: DINOv2's, DINOv3's, FlexiViT's and NaFlex's
    are registered as they are, every other at its row's resolution (224 pixels, PE-core's own)
    (tests/checkpoints/formats/test_timm_names.py)."""
    unsized = base.endswith(("_dinov2", "_dinov3", "_dinov3_qkvb")) \
        or base.startswith(("flexivit", "naflexvit"))
    return base if unsized else f"{base}_{timm_variant(base).image_size}"


def model_variant(model):
    """The `Variant` of a built keras_vit ViT: the one keras_vit.ViT recorded, else (a model
    reloaded from a .keras file) the table row its weights' shapes fit, else that row's
    structure at the model's own sizes."""
    from keras_vit.checkpoints.layout import official_arrays

    recorded = getattr(model, VARIANT_ATTRIBUTE, None)
    if recorded is not None:
        return recorded
    shapes = {key: array.shape for key, array in official_arrays(model).items()}
    fit = fitting_variants(shapes)
    if fit:  # the paper's row where several fit; the MLP as the model computes it
        return dataclasses.replace(min(fit, key=lambda row: row.family != "ViT"),
                                   **_mlp_fields(model))
    features = shape_features(shapes)
    query = shapes[QUERY_KERNEL.format(i=0)]
    sizes = {"width": features["width"], "depth": features["depth"], "mlp_dim": features["mlp_dim"],
             "heads": query[1], "patch_size": features["patch_size"]}
    for row in [*VARIANTS.values(), *FAMILIES.values()]:
        candidate = dataclasses.replace(row, **sizes)
        if variant_fits_shapes(candidate, shapes):
            return dataclasses.replace(candidate, name=f"{row.family}-{sizes['width']}x{sizes['depth']}",
                                       **_mlp_fields(model))
    raise ArgumentError(f"{model.name}: its weights fit no architecture of keras_vit's tables "
                        "at any size; save it with save_npz.")


def timm_architecture(variant):
    """(timm's registered architecture, the model_args that make it `variant`'s sizes)."""
    rows = {base: timm_variant(registered_name(base)) for base in TIMM_ARCHITECTURES}
    for base, row in rows.items():
        if row is not None and dataclasses.replace(row, name=variant.name) == variant:
            return registered_name(base), _eva_args(variant)
    nearest = None  # the fewest fields in which a row of the model's family differs, for the refusal
    for base, row in rows.items():
        if row is None:
            continue
        differing = [field for field in _STRUCTURE if getattr(row, field) != getattr(variant, field)]
        if row.family == variant.family and (nearest is None or len(differing) < len(nearest)):
            nearest = differing
        if differing or (row.layer_scale is None) != (variant.layer_scale is None):
            continue
        args = {"embed_dim": variant.width, "depth": variant.depth, "num_heads": variant.heads,
                "patch_size": variant.patch_size, **_eva_args(variant)}
        if variant.mlp_dim != row.mlp_dim or variant.width != row.width:
            halves = 2 if mlp_ratio_halves(variant) else 1
            args["mlp_ratio"] = variant.mlp_dim / halves / variant.width
        return registered_name(base), args
    because = f": its {', '.join(nearest)} differ from every {variant.family} row's" if nearest else ""
    raise ArgumentError(f"timm registers no architecture built as {variant.name} is "
                        f"(its pooling, tokens and norms){because}; save it with save_npz.")


def _activation_args(variant, approximate_gelu, architecture):
    """The MLP activation as model_args: VisionTransformer's act_layer (SiLU inside a SwiGLU);
    timm's Eva takes none (SiLU in its SwiGLU, erf GELU in its MLP), so a tanh-GELU model of
    an Eva row is refused."""
    if variant.feed_forward != "mlp":
        return {} if built_by_eva(variant) else {"act_layer": SWIGLU_ACT_LAYER}
    if not built_by_eva(variant):
        return {"act_layer": TIMM_ACTIVATIONS[(variant.activation, approximate_gelu)]}
    if approximate_gelu or variant.activation != "gelu":
        raise ArgumentError(f"timm's {architecture} computes the erf GELU, which its config "
                            f"cannot change; this model computes the "
                            f"{'tanh ' if approximate_gelu else ''}{variant.activation}.")
    return {}


def _eva_args(variant):
    """The model_args timm's Eva class (the RoPE rows) needs to load what save_safetensors
    writes: query, key and value fused (EVA-02 B and L have them separate in timm's own)."""
    return {"qkv_fused": True} if built_by_eva(variant) else {}


def timm_config(model, labels=None, extra=None):
    """The config.json timm's `create_model('local-dir:' + folder, pretrained=True)` reads."""
    variant = model_variant(model)
    if variant.is_hybrid:
        raise ArgumentError(f"{variant.name} is a hybrid: timm's hybrids load the official .npz "
                            "layout only; save it with save_npz.")
    architecture, args = timm_architecture(variant)
    metadata = model_metadata(model)
    row_epsilon = timm_variant(architecture).layer_norm_epsilon or _TIMM_EPSILON
    if abs(metadata["layer_norm_epsilon"] - row_epsilon) > 1e-12:
        raise ArgumentError(f"timm's {architecture} normalises with LayerNorm epsilon "
                            f"{row_epsilon:g}; this model uses {metadata['layer_norm_epsilon']:g}, "
                            "which timm's config cannot set.")
    args.update(_activation_args(variant, metadata["approximate_gelu"], architecture))
    refuse_naflex(model, "timm's config (one square image size)")
    height, width = image_size(model)
    if height is None or height != width:
        raise ArgumentError(f"{model.name} takes {height}x{width} images; timm's config records "
                            "one square size.")
    if height != timm_variant(architecture).image_size:
        args["img_size"] = height
    classes = model.output_shape[-1] if has_head(model) else 0
    if labels is not None and len(labels) != classes:
        raise ArgumentError(f"{len(labels)} label names for a head of {classes} classes.")
    mean, std = input_normalization(model)
    pool = {"token": "token", "gap": "avg", "map": "map"}[variant.classifier]
    pretrained_cfg = {"input_size": [3, height, height], "fixed_input_size": True,
                      # keras_vit resizes the whole image, bilinearly, to the model's size
                      "interpolation": "bilinear", "crop_pct": 1.0, "crop_mode": "center",
                      "mean": list(mean), "std": list(std), "num_classes": classes,
                      "first_conv": "patch_embed.proj", "classifier": "head", **(extra or {})}
    config = {"architecture": architecture, "num_classes": classes, "num_features": variant.width,
              "global_pool": pool, "model_args": args, "pretrained_cfg": pretrained_cfg}
    if labels is not None:
        config["label_names"] = list(labels)
    return config


def has_head(model):
    """Whether `model` ends in a classifier head (include_top)."""
    from keras_vit.layer_names import HEAD

    return any(layer.name == HEAD for layer in model.layers)
