"""keras-hub presets of the families (keras_vit/variants/table.py FAMILIES), one row table per
keras-hub class, chosen by config.json's `class_name` (and `registered_name`):

    SigLIPVisionEncoder   SigLIP's image tower (its MAP head is `head/...`)
    SigLIPBackbone        both SigLIP towers: the image tower is its `vision_encoder`
    CLIPVisionEncoder     CLIP's image tower (QuickGELU, LayerNorm epsilon 1e-5 fixed)
    CLIPBackbone          both CLIP towers: the image tower, and `vision_projection` (bias
                          free) as the head, so the features are CLIP's image embedding
    DINOV2Backbone        DINOv2, with or without registers, MLP or SwiGLU (erf GELU and
                          LayerNorm epsilon 1e-6 fixed)
    DINOV3Backbone        DINOv3 (RoPE, no position table), its MLP plain (erf GELU) or gated
                          (SiLU: the split SwiGLU), query/key/value biases as its config says

A preset's Keras weights are read by keras-hub itself (only it knows how its layers nest),
then renamed by path through the class's rows; a two-tower backbone's text tower is left.
The config sets the architecture and the numerics (`intermediate_activation`:
"gelu_approximate" is tanh GELU, "gelu" erf, "quick_gelu" CLIP's; `layer_norm_epsilon`); `preprocessor.json`,
where saved, the normalisation. keras-hub's DINOv2 keeps its position embedding at
`position_embedding_shape` and resizes it with `keras.ops.image.resize` (bicubic,
antialiased as `antialias_in_interpolation` says) to the `image_shape` it is built at: keras_vit
reads the stored table and resizes it the same way (layers/tokens.py "keras_bicubic"), so the
preset's model, or the preset at any other size, computes what keras-hub's `from_preset(...,
image_shape=...)` computes. keras-hub's ViT presets are `keras_hub.py`'s: a preset of a
class neither table knows is refused there, in one line.
"""

import dataclasses
import os
import re
from collections.abc import Callable

import numpy as np

from keras_vit.checkpoints.errors import CheckpointError
from keras_vit.checkpoints.formats import config_values as checks
from keras_vit.checkpoints.formats import groups as g
from keras_vit.checkpoints.formats.base import ArraysReader, CheckpointFormat, CheckpointInfo
from keras_vit.checkpoints.formats.config_variant import (
    DinoV3Spelling,
    check_dinov3,
    dinov3_fields,
    match_or_name,
    swiglu_mlp_dim,
)
from keras_vit.checkpoints.formats.keras_hub_presets import (
    check_stored_shapes,
    import_keras_hub,
    preset_normalization,
    preset_preprocessing,
    read_preset_json,
)
from keras_vit.checkpoints.formats.rows import (
    ADD_BATCH_AXIS,
    COPY,
    KERAS_HEADS_IN,
    KERAS_HEADS_OUT,
    TOKEN_VECTOR,
    KeyRow,
    bias_free,
    fold_class_position,
    to_official,
)
from keras_vit.variants import FAMILIES

__all__ = ["FORMAT", "PRESET_FAMILIES", "preset_family_to_official", "preset_family_variant"]


def _keras_attention(prefix, keys=g.ATTENTION):
    """keras.layers.MultiHeadAttention's variables, (D, H, hd) as the official layout's."""
    return g.attention(prefix + "/", ("query", "key", "value", "attention_output"), keys,
                       (COPY, COPY), g.KERAS)


def _keras_norm(prefix, keys):
    return g.norm(prefix, keys, g.KERAS_NORM)


def _keras_dense(prefix, keys):
    return g.dense(prefix, keys, COPY, g.KERAS)


# keras-hub's layer names (its towers' first path parts; two are spelled like official keys'
# first parts, so they are named here once).
_EMBEDDING, _HEAD = "embedding", "head"
_POSITIONS = f"{_EMBEDDING}/position_embedding/embeddings"
_POSITION_IDS = f"{_EMBEDDING}/position_ids"
# keras-hub's SigLIP image tower (SigLIPVisionEncoder), by variable path.
SIGLIP_ROWS = (
    *_keras_dense(f"{_EMBEDDING}/patch_embedding", g.PATCH),
    KeyRow(_POSITIONS, g.POSITIONS, ADD_BATCH_AXIS),
    *_keras_attention("encoder_block_{i}/self_attn"),
    *_keras_norm("encoder_block_{i}/layer_norm1", g.NORM1),
    *_keras_dense("encoder_block_{i}/mlp/fc1", g.MLP_IN),
    *_keras_dense("encoder_block_{i}/mlp/fc2", g.MLP_OUT),
    *_keras_norm("encoder_block_{i}/layer_norm2", g.NORM2),
    *_keras_norm("post_layer_norm", g.ENCODER_NORM),
    # The MAP head (SigLIPMultiHeadAttentionPooling); its probe is an unnamed weight, read
    # by attribute (PresetFamily.attributes).
    KeyRow(f"{_HEAD}/probe", g.MAP_PROBE),
    *_keras_attention(f"{_HEAD}/attention", g.MAP_ATTENTION),
    *_keras_norm(f"{_HEAD}/layernorm", g.MAP_NORM),
    *_keras_dense(f"{_HEAD}/mlp/fc1", g.MAP_MLP_IN),
    *_keras_dense(f"{_HEAD}/mlp/fc2", g.MAP_MLP_OUT),
)

# keras-hub's CLIP image tower (CLIPVisionEncoder): no patch bias, a LayerNorm before the
# encoder; a CLIPBackbone's `vision_projection` (bias-free) is the head.
CLIP_ROWS = (
    KeyRow(f"{_EMBEDDING}/patch_embedding/kernel", g.PATCH.kernel),
    KeyRow(f"{_EMBEDDING}/class_embedding", g.CLS, TOKEN_VECTOR),  # (D,), as OpenCLIP's
    KeyRow(_POSITIONS, g.POSITIONS, ADD_BATCH_AXIS),
    *_keras_norm("pre_layer_norm", g.PRE_NORM),
    *_keras_norm("encoder_block_{i}/layer_norm_1", g.NORM1),
    *_keras_attention("encoder_block_{i}/attention"),
    *_keras_norm("encoder_block_{i}/layer_norm_2", g.NORM2),
    *_keras_dense("encoder_block_{i}/dense_1", g.MLP_IN),
    *_keras_dense("encoder_block_{i}/dense_2", g.MLP_OUT),
    # keras-hub norms every token; its pooler then takes the class token, as keras_vit's.
    *_keras_norm("layer_norm", g.ENCODER_NORM),
    # Bias-free, as OpenCLIP's: the head with a zero bias.
    KeyRow("vision_projection/kernel", g.HEAD, bias_free(COPY)),
)

# keras-hub's DINOv2 (DINOV2Backbone), by variable path: the tokens and the position embedding
# (1 + grid, the class token's position first, registers or not) as DINOv2's own; a SwiGLU's
# `weights_in` packs both halves (silu(first) * second), as DINOv2's w12.
_DINOV2_BLOCK = "encoder/layers_{i}"
DINOV2_ROWS = (
    *_keras_dense("embeddings/patch_embeddings/projection", g.PATCH),
    KeyRow("embeddings/cls_token", g.CLS),
    KeyRow("embeddings/register_tokens", g.REGISTERS),
    KeyRow("embeddings/position_embeddings", g.POSITIONS),
    *_keras_norm(f"{_DINOV2_BLOCK}/norm1", g.NORM1),
    *_keras_attention(f"{_DINOV2_BLOCK}/attention/attention"),
    KeyRow(f"{_DINOV2_BLOCK}/layer_scale1/lambda1", g.LAYER_SCALE1),
    *_keras_norm(f"{_DINOV2_BLOCK}/norm2", g.NORM2),
    *_keras_dense(f"{_DINOV2_BLOCK}/mlp/fc1", g.MLP_IN),
    *_keras_dense(f"{_DINOV2_BLOCK}/mlp/fc2", g.MLP_OUT),
    *_keras_dense(f"{_DINOV2_BLOCK}/mlp/weights_in", g.MLP_IN),
    *_keras_dense(f"{_DINOV2_BLOCK}/mlp/weights_out", g.MLP_OUT),
    KeyRow(f"{_DINOV2_BLOCK}/layer_scale2/lambda1", g.LAYER_SCALE2),
    *_keras_norm("layernorm", g.ENCODER_NORM),
)
# Not read: the masked-image-modelling token (training only), and the table keras-hub resizes
# from `position_embeddings` at build time (keras_vit resizes that one as keras-hub does).
_DINOV2_LEFT = ("embeddings/mask_token", "embeddings/interpolated_position_embeddings")

# keras-hub's DINOv3 (DINOV3Backbone), by variable path: Dense q/k/v/o projections (the key's
# bias absent where the config has none), a plain (up, down) or gated (gate, up, down) MLP.
_DINOV3_BLOCK = "encoder/layers_{i}"
_DINOV3_COMMON = (
    *_keras_dense("embeddings/patch_embeddings/projection", g.PATCH),
    KeyRow("embeddings/cls_token", g.CLS),
    KeyRow("embeddings/register_tokens", g.REGISTERS),
    *_keras_norm(f"{_DINOV3_BLOCK}/norm1", g.NORM1),
    *g.attention(f"{_DINOV3_BLOCK}/attention/", ("q_proj", "k_proj", "v_proj", "o_proj"),
                 transforms=(KERAS_HEADS_IN, KERAS_HEADS_OUT), suffixes=g.KERAS),
    KeyRow(f"{_DINOV3_BLOCK}/layer_scale1/lambda1", g.LAYER_SCALE1),
    *_keras_norm(f"{_DINOV3_BLOCK}/norm2", g.NORM2),
    *_keras_dense(f"{_DINOV3_BLOCK}/mlp/down_proj", g.MLP_OUT),
    KeyRow(f"{_DINOV3_BLOCK}/layer_scale2/lambda1", g.LAYER_SCALE2),
    *_keras_norm("layernorm", g.ENCODER_NORM),
)
DINOV3_ROWS = (*_DINOV3_COMMON, *_keras_dense(f"{_DINOV3_BLOCK}/mlp/up_proj", g.MLP_IN))
DINOV3_GATED_ROWS = (*_DINOV3_COMMON, *_keras_dense(f"{_DINOV3_BLOCK}/mlp/gate_proj", g.MLP_IN),
                     *_keras_dense(f"{_DINOV3_BLOCK}/mlp/up_proj", g.MLP_VALUE))

# The numbers read from an image tower's config, checked before keras-hub builds anything.
_FIELDS = {
    "patch_size": checks.PIXELS, "hidden_dim": checks.WIDTH,
    "num_layers": checks.LAYERS, "num_heads": checks.HEADS,
    "intermediate_dim": checks.WIDTH, "image_shape": checks.counts(checks.MAX_PIXELS, 3, least=3),
    "layer_norm_epsilon": checks.optional(checks.epsilon),
    "intermediate_activation": checks.optional(checks.string),
    # DINOv2's
    "num_register_tokens": checks.count(checks.MAX_WIDTH, low=0), "use_swiglu_ffn": checks.flag,
    "position_embedding_shape": checks.counts(checks.MAX_PIXELS, 3, least=2),
    "antialias_in_interpolation": checks.flag,
    # DINOv3's
    "use_gated_mlp": checks.flag, "use_query_bias": checks.flag, "use_key_bias": checks.flag,
    "use_value_bias": checks.flag, "use_proj_bias": checks.flag, "use_mlp_bias": checks.flag,
    "rope_theta": checks.number(0, 1e9),
}
# keras-hub's DINOv3 spells two shared fields its own way: (its name, the shared one).
_DINOV3_RENAMES = (("hidden_activation", "intermediate_activation"),
                   ("layer_norm_eps", "layer_norm_epsilon"))
_REQUIRED = ("patch_size", "hidden_dim", "num_layers", "num_heads", "intermediate_dim",
             "image_shape")


@dataclasses.dataclass(frozen=True)
class PresetFamily:
    """One keras-hub class: the rows of its image tower, the FAMILIES row its config resizes,
    the tower's attribute in a two-tower backbone (None: the preset is the tower), its
    activations (keras-hub's name -> the Variant's activation and whether GELU is tanh) and
    its default epsilon."""

    rows: tuple
    base: str
    tower: str | None = None
    activations: tuple = (("gelu_approximate", ("gelu", True)), ("gelu", ("gelu", False)))
    default_activation: str = "gelu_approximate"
    default_epsilon: float = 1e-6
    # (the tower's attribute, dotted, the path its rows read it under) for weights keras-hub
    # leaves unnamed, whose paths carry a process-wide counter ("head/variable_2").
    attributes: tuple = ()
    # The same for weights of the two-tower backbone outside the image tower (CLIP's
    # projection).
    backbone_attributes: tuple = ()
    # The Variant's fields a checked config sets beyond the sizes (config -> dict): its
    # feed-forward and tokens, where the class has more than one form.
    fields: Callable = lambda config: dict(mlp_dim=config["intermediate_dim"])
    left: tuple = ()  # variable paths not read (training-only weights, derived tables)
    finish: Callable = lambda arrays: arrays  # official-key arrays -> the model's layout
    # (config -> `CheckpointFormat.position_resize`): how keras-hub moves the position
    # embedding to another grid, where it does (None: the format's own).
    position_resize: Callable = lambda config: None
    # (config -> the image size keras-hub builds the model at, where it is not the position
    # embedding's); None: the position embedding's.
    image_size: Callable = lambda config: None
    renames: tuple = ()  # (the class's config field, the shared name it is read as)
    # (path, checked config) -> None, or a one-line CheckpointError for a setting the class
    # can take and keras_vit's row does not compute
    check: Callable = lambda path, config: None
    gated_rows: tuple = None  # the rows where the MLP is gated (a gate_proj is stored)


_SIGLIP = PresetFamily(SIGLIP_ROWS, "SigLIP-B/16",
                       attributes=((f"{_HEAD}.probe", f"{_HEAD}/probe"),))
# keras-hub's CLIP fixes every LayerNorm epsilon at 1e-5 (no config field).
_CLIP = PresetFamily(CLIP_ROWS, "CLIP-B/16",
                     activations=(("quick_gelu", ("quick_gelu", False)), ("gelu", ("gelu", False))),
                     default_activation="quick_gelu", default_epsilon=1e-5)


def _dinov2_fields(config):
    """A DINOv2 preset's feed-forward and tokens: keras-hub's DINOV2SwiGLUFFN narrows
    `intermediate_dim` to 2/3, rounded up to a multiple of 8, each of its two packed halves;
    with registers, the class token's position is folded into the token (fold_class_position)."""
    registers = config.get("num_register_tokens", 0)
    fields = dict(mlp_dim=config["intermediate_dim"], register_tokens=registers,
                  embed_prefix_tokens=not registers)
    if config.get("use_swiglu_ffn", False):
        fields.update(mlp_dim=swiglu_mlp_dim(config["intermediate_dim"]), feed_forward="swiglu")
    return fields


def _dinov2_image_size(config):
    # keras-hub's own default, (518, 518), where the config leaves it out.
    stored = config.get("position_embedding_shape", [518, 518])[0]
    return None if config["image_shape"][0] == stored else config["image_shape"][0]


_DINOV2 = PresetFamily(
    DINOV2_ROWS, "DINOv2-S/14", activations=(("gelu", ("gelu", False)),),
    default_activation="gelu", fields=_dinov2_fields, left=_DINOV2_LEFT,
    finish=fold_class_position, image_size=_dinov2_image_size,
    position_resize=lambda config: ("keras_bicubic_antialias"
                                    if config.get("antialias_in_interpolation") else
                                    "keras_bicubic"))
# How DINOV3Backbone names DINOv3's settings.
_DINOV3_SPELLING = DinoV3Spelling(
    biases=(("use_query_bias", True), ("use_key_bias", True), ("use_value_bias", True)),
    proj_bias="use_proj_bias", mlp_bias="use_mlp_bias", activation="hidden_activation")


def _dinov3_fields(config):
    return dict(register_tokens=config.get("num_register_tokens", 4),
                layer_norm_epsilon=config.get("layer_norm_epsilon", 1e-5),
                **dinov3_fields(config, _DINOV3_SPELLING, config["intermediate_dim"]))


_DINOV3 = PresetFamily(
    DINOV3_ROWS, "DINOv3-S/16", activations=(("gelu", ("gelu", False)), ("silu", ("gelu", False))),
    default_activation="gelu", default_epsilon=1e-5, fields=_dinov3_fields,
    left=("embeddings/mask_token",), renames=_DINOV3_RENAMES,
    check=lambda path, config: check_dinov3(path, config, _DINOV3_SPELLING),
    gated_rows=DINOV3_GATED_ROWS)
PRESET_FAMILIES = {
    "SigLIPVisionEncoder": _SIGLIP,
    "SigLIPBackbone": dataclasses.replace(_SIGLIP, tower="vision_encoder"),
    "CLIPVisionEncoder": _CLIP,
    "CLIPBackbone": dataclasses.replace(
        _CLIP, tower="vision_encoder",
        backbone_attributes=(("vision_projection.kernel", "vision_projection/kernel"),)),
    "DINOV2Backbone": _DINOV2,
    "DINOV3Backbone": _DINOV3,
}


def _class_of(config):
    """The keras-hub class a preset config names, where it is one of the table's (the
    registered name too: a class of the same name from another package is not keras-hub's)."""
    if not isinstance(config, dict):
        return None
    name = config.get("class_name")
    registered = config.get("registered_name", f"keras_hub>{name}")
    return name if name in PRESET_FAMILIES and registered == f"keras_hub>{name}" else None


def _recognises(source):
    if not source.is_dir or not os.path.exists(os.path.join(source.path, "config.json")):
        return False
    return _class_of(source.json("config.json")) is not None


def _tower_config(path, config, family):
    """The image tower's checked config: the preset's own, or a backbone's vision encoder's."""
    config = checks.check_object(f'{path} (its "config")', config.get("config"))
    if family.tower is not None:
        tower = checks.check_object(f'{path} (its "{family.tower}")', config.get(family.tower))
        config = checks.check_object(f'{path} (its "{family.tower}" config)', tower.get("config"))
    config = {**config, **{shared: config[own] for own, shared in family.renames if own in config}}
    config = checks.check_fields(path, config, _FIELDS, required=_REQUIRED)
    activation = config.get("intermediate_activation", family.default_activation)
    if activation not in dict(family.activations):
        known = ", ".join(a for a, _ in family.activations)
        raise CheckpointError(f"{path}: intermediate_activation {activation!r} is none of the "
                              f"activations keras_vit computes here ({known}).")
    family.check(path, config)
    return config


def _activation(config, family):
    """(the Variant's activation, whether its GELU is tanh) of a checked config."""
    return dict(family.activations)[config.get("intermediate_activation",
                                               family.default_activation)]


def preset_family_variant(config, family):
    """The `Variant` a checked image-tower config describes: the row of FAMILIES it is, else
    the family's row resized and named after its sizes."""
    fields = dict(width=config["hidden_dim"], depth=config["num_layers"],
                  heads=config["num_heads"], patch_size=config["patch_size"],
                  image_size=config["image_shape"][0],
                  activation=_activation(config, family)[0], **family.fields(config))
    base = FAMILIES[family.base]
    return match_or_name(dataclasses.replace(base, **fields), family=base.family)


def _root(path, roots, prefix):
    """A variable's path from the row's first part on: keras-hub names a tower's layers after
    the tower (`prefix`, "<name>_"), and a tower nested in a backbone may put its own name
    before them."""
    parts = path.split("/")
    for i, part in enumerate(parts):
        part = part[len(prefix):] if prefix and part.startswith(prefix) else part
        if any(re.fullmatch(root, part) for root in roots):
            return "/".join([part, *parts[i + 1:]])
    return path


def preset_family_to_official(family, arrays, prefix="", heads=None):
    """{keras-hub variable path: array} of an image tower (whose layer names start with
    `prefix`) -> official-key arrays, Dense attention kernels split into `heads`; a path no
    row takes passes through ("keras_hub:" + path) for the strict loader to name."""
    rows = family.rows
    if family.gated_rows is not None and any("/mlp/gate_proj/" in p for p in arrays):
        rows = family.gated_rows
    roots = {re.escape(row.source.split("/", 1)[0]).replace(re.escape("{i}"), r"\d+")
             for row in rows}
    named = {_root(p, roots, prefix): a for p, a in arrays.items()}
    for path in family.left:
        named.pop(path, None)
    ids = named.pop(_POSITION_IDS, None)
    if ids is not None and _POSITIONS in named:
        # keras-hub looks each token's position up by these stored indices (its converted
        # presets hold 0, 1, 2, ...; a freshly built CLIP holds zeros): the model's table.
        named[_POSITIONS] = named[_POSITIONS][np.asarray(ids).reshape(-1)]
    return family.finish(to_official(rows, named, heads, unknown_prefix="keras_hub:"))


def _by_attribute(model, attributes):
    """{id(variable): path} of the variables `attributes` name on `model`."""
    found = {}
    for attribute, path in attributes:
        variable = model
        for name in attribute.split("."):
            variable = getattr(variable, name)
        found[id(variable)] = path
    return found


def _read(directory, family, heads):
    keras_hub = import_keras_hub(directory)
    model = keras_hub.models.Backbone.from_preset(directory)
    tower = getattr(model, family.tower) if family.tower else model
    named = _by_attribute(tower, family.attributes)
    arrays = {named.get(id(v), v.path): np.asarray(v.numpy()) for v in tower.weights}
    for variable_id, path in _by_attribute(model, family.backbone_attributes).items():
        arrays[path] = next(np.asarray(v.numpy()) for v in model.weights if id(v) == variable_id)
    return preset_family_to_official(family, arrays, f"{tower.name}_", heads)


def _depth_config(preset, family):
    """The dict of a preset's config that holds the image tower's num_layers."""
    config = preset["config"]
    return config[family.tower]["config"] if family.tower is not None else config


def _open(source):
    directory = source.path
    path = os.path.join(directory, "config.json")
    preset = checks.check_object(path, read_preset_json(path))
    family = PRESET_FAMILIES[_class_of(preset)]
    config = _tower_config(path, preset, family)
    variant = preset_family_variant(config, family)
    checks.check_architecture(path, variant, tuple(config["image_shape"][:2]))  # before keras-hub builds
    check_stored_shapes(directory, preset, lambda preset: _depth_config(preset, family))
    arrays = _read(directory, family, config["num_heads"])
    resize = family.position_resize(config)
    info = CheckpointInfo({k: a.shape for k, a in arrays.items()}, format=FORMAT.name,
                          image_size=family.image_size(config),
                          heads=config["num_heads"],
                          layer_norm_epsilon=config.get("layer_norm_epsilon",
                                                        family.default_epsilon),
                          approximate_gelu=_activation(config, family)[1],
                          normalization=preset_normalization(directory),
                          preprocessing=preset_preprocessing(directory),
                          variant=variant)
    # The format as this preset's class resizes its position embedding (keras-hub's DINOv2:
    # its own bicubic; the others never resize).
    found = FORMAT if resize is None else dataclasses.replace(FORMAT, position_resize=resize)
    return ArraysReader(arrays, path=directory, source=source, format=found, info=info)


FORMAT = CheckpointFormat(
    name="keras_hub_families",
    description="keras-hub preset folder of a family's image tower (save_to_preset: "
                "SigLIPVisionEncoder, SigLIPBackbone, CLIPVisionEncoder, CLIPBackbone, "
                "DINOV2Backbone or DINOV3Backbone)",
    recognises=_recognises, open=_open, numerics=(True, 1e-6))
