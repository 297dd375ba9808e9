"""What a checkpoint's official-key shapes say of its architecture, read from headers before
anything is built: the features a file shows (`shape_features`), whether a variant fits them
and where it does not (`variant_fits_shapes`, `shape_mismatches`), where a file's config and
its arrays disagree (`config_mismatches`), the rows they fit (`fitting_variants`). The keys
are `layout`'s."""

import dataclasses

from keras_vit.checkpoints.layout import (
    CLS_KEY,
    DIST_TOKEN_KEY,
    EMBEDDING_KERNEL,
    ENCODER_NORM_SCALE,
    KEY_BIAS,
    LN0_BIAS,
    LN0_SCALE,
    MAP_PROBE,
    MAP_QUERY_KERNEL,
    MLP0_KERNEL,
    MLP_NORM_SCALE,
    MLP_VALUE_KERNEL,
    OUT_BIAS,
    POS_EMBED_KEY,
    PRE_NORM_SCALE,
    QUERY_BIAS,
    QUERY_KERNEL,
    REG_TOKEN_KEY,
    is_trunk_key,
    part_keys,
)
from keras_vit.layer_names import EMBEDDING_NORM
from keras_vit.variants import FAMILIES, VARIANTS

__all__ = ["shape_features", "variant_fits_shapes", "shape_mismatches", "config_mismatches",
           "fitting_variants"]


def _qkv_biases(shapes):
    return ("qkv" if KEY_BIAS.format(i=0) in shapes
            else "qv" if QUERY_BIAS.format(i=0) in shapes else "none")


def _has(key):
    return lambda shapes: key in shapes


# What a file's keys show of a row's switches, one line each: {feature: (what the arrays say,
# what a row says)}. Keywords, not strings: the features are Variant's fields, and some of
# them are also layers' names, which keras_vit/layer_names.py alone spells. A new switch that
# changes which keys a file has is one line here.
_SWITCHES = dict(
    split_gate=(_has(MLP_VALUE_KERNEL.format(i=0)),  # a split SwiGLU: Dense_0 is half of it
                lambda v: v.feed_forward == "swiglu_split"),
    mlp_norm=(_has(MLP_NORM_SCALE.format(i=0)), lambda v: v.mlp_norm),
    qkv_bias=(_qkv_biases, lambda v: v.qkv_bias),
    # RMSNorm: a scale without a bias; AIMv2's projections without biases
    norm=(lambda s: "layer" if LN0_BIAS.format(i=0) in s else "rms", lambda v: v.norm),
    proj_bias=(_has(OUT_BIAS.format(i=0)), lambda v: v.proj_bias),
    # a part outside the blocks: its keys are its layer's name (layout.part_keys)
    embedding_norm=(_has(part_keys(EMBEDDING_NORM)["scale"]), lambda v: v.embedding_norm),
    position_embedding=(_has(POS_EMBED_KEY), lambda v: v.position_embedding),
    has_class_token=(_has(CLS_KEY), lambda v: v.has_class_token),
    distilled=(_has(DIST_TOKEN_KEY), lambda v: v.distilled),
    register_tokens=(lambda s: s.get(REG_TOKEN_KEY, (0, 0))[1], lambda v: v.register_tokens),
    pre_norm=(_has(PRE_NORM_SCALE), lambda v: v.pre_norm),
    final_norm=(_has(ENCODER_NORM_SCALE), lambda v: v.final_norm),
    map=(_has(MAP_PROBE), lambda v: v.classifier == "map"),
    layer_scale=(lambda s: any("LayerScale" in k for k in s), lambda v: v.layer_scale is not None),
    hybrid=(lambda s: any(is_trunk_key(k) for k in s), lambda v: v.is_hybrid),
)


def shape_features(shapes):
    """What official-key shapes say of an architecture, in `Variant`'s terms (None: no ViT)."""
    kernel = shapes.get(EMBEDDING_KERNEL)
    if kernel is None or len(kernel) != 4:
        return None
    depth = 0
    while LN0_SCALE.format(i=depth) in shapes:
        depth += 1
    split = MLP_VALUE_KERNEL.format(i=0) in shapes  # a split SwiGLU: Dense_0 is half of it
    first = shapes.get(MLP0_KERNEL.format(i=0), (None,))[-1]
    return dict(width=kernel[-1], patch_size=kernel[0], depth=depth,
                mlp_dim=2 * first if split and first else first,
                **{feature: shown(shapes) for feature, (shown, _) in _SWITCHES.items()})


def variant_fits_shapes(variant, shapes, features=None):
    """Whether a checkpoint of these official-key shapes can be `variant`'s: width, patch,
    depth, MLP width, heads and the MAP head's (where the file splits them), the tokens before the patches,
    LayerScale, the pre-norm, the final norm and the MAP head."""
    return shape_mismatches(variant, shapes, features) == {}


def shape_mismatches(variant, shapes, features=None):
    """{field: (`variant`'s value, the arrays')} where a checkpoint's official-key shapes
    cannot be `variant`'s (the fields of `variant_fits_shapes`); None when the shapes are no
    ViT's. Read from headers, before anything is built."""
    found = shape_features(shapes) if features is None else dict(features)
    if found is None:
        return None
    v = variant
    expected = dict(width=v.width, patch_size=v.patch_size, depth=v.depth, mlp_dim=v.mlp_dim,
                    **{feature: row(v) for feature, (_, row) in _SWITCHES.items()})
    found = dict(found)
    for field, key, value in (("heads", QUERY_KERNEL.format(i=0), v.heads),
                              ("map_heads", MAP_QUERY_KERNEL, v.pooling_heads)):
        split = shapes.get(key, ())
        if len(split) == 3:  # (D, heads, head_dim): the heads show
            found[field], expected[field] = split[1], value
    return {field: (value, found.get(field)) for field, value in expected.items()
            if found.get(field) != value}


def config_mismatches(variant, shapes):
    """["field: the config's value, the file's"] where the architecture a file's config
    describes (`variant`) and its arrays' official-key shapes disagree on a size: width,
    patch, depth, MLP width, the tokens before the patches. Read from headers, so a config
    that would build a model far larger than its arrays (an edited MLP ratio) is refused
    before anything is built; [] when they agree or the shapes are no ViT's."""
    found = shape_features(shapes)
    if found is None:
        return []
    query = shapes.get(QUERY_KERNEL.format(i=0), ())
    expected = dict(width=variant.width, patch_size=variant.patch_size, depth=variant.depth,
                    mlp_dim=variant.mlp_dim, distilled=variant.distilled,
                    register_tokens=variant.register_tokens)
    if len(query) == 3:  # split (D, heads, head_dim): the heads show
        found["heads"], expected["heads"] = query[1], variant.heads
    return [f"{field}: {value} in the config, {found[field]} in the arrays"
            for field, value in expected.items()
            if found.get(field) is not None and found[field] != value]


def fitting_variants(shapes, **fields):
    """The variants of `VARIANTS` and `FAMILIES` (with `fields` replaced, their names kept) whose
    arrays have these official-key shapes (`variant_fits_shapes`)."""
    features = shape_features(shapes)
    rows = [*VARIANTS.values(), *FAMILIES.values()]
    if fields:
        rows = [dataclasses.replace(v, **fields) for v in rows]
    return [v for v in rows if variant_fits_shapes(v, shapes, features)]
