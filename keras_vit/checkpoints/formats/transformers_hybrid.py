"""transformers' ViTHybrid (`ViTHybridModel` / `ViTHybridForImageClassification`) -> official layout.

The R50+ViT-B/16 hybrid as transformers 4.x saves it (google/vit-hybrid-base-bit-384;
transformers 5 removed the model): a `save_pretrained` folder whose `config.json` has
`model_type` "vit-hybrid" and a BiT `backbone_config`. The trunk's keys live under
`vit.embeddings.patch_embeddings.backbone.bit.` (`embedder.convolution`, `embedder.norm`,
`encoder.stages.S.layers.U.{conv1,norm1,conv2,norm2,conv3,norm3,downsample.conv,
downsample.norm}`); the projection on the trunk's features is the patch embedding
(`patch_embeddings.projection`); the rest is transformers' plain ViT layout (transformers.py).

Numerics, read from transformers 4.57's modeling_bit.py and configuration files:
GroupNorm epsilon 1e-5 and weight standardisation by sqrt(var + 1e-8)
(`TRUNK_NUMERICS`, which a model built from such a folder records in its
ResNetTrunk); TF "SAME" padding in every convolution and the stem's max-pool
(transformers pads the pool with zeros, after a ReLU: the same maximum as Keras'
-inf); the ViT's LayerNorm epsilon from `layer_norm_eps` (1e-12 by default) and
exact erf GELU for `hidden_act` "gelu". A config describing anything else (a
pre-activation or dilated trunk, other padding, another group count) is refused.
"""


from keras_vit.checkpoints.errors import CheckpointError
from keras_vit.checkpoints.formats import config_values as checks
from keras_vit.checkpoints.formats.base import CheckpointFormat, RowTableReader
from keras_vit.checkpoints.formats.config_variant import match_or_name
from keras_vit.checkpoints.formats.rows import CONV, KeyRow, to_official
from keras_vit.checkpoints.formats.timm import open_weights
from keras_vit.checkpoints.formats.transformers import (
    TRANSFORMERS_FIELDS,
    TRANSFORMERS_ROWS,
    folder_config,
    folder_info,
    transformers_to_official,
)
from keras_vit.checkpoints.layout import (
    TRUNK_ROOT_BIAS,
    TRUNK_ROOT_KERNEL,
    TRUNK_ROOT_SCALE,
    UNIT_CONV_KERNEL,
    UNIT_NORM,
    UNIT_PARTS,
)
from keras_vit.variants import Variant

__all__ = ["FORMAT", "TRUNK_NUMERICS", "read_hybrid_config", "hybrid_variant",
           "vit_hybrid_to_official", "HYBRID_ROWS"]

# The trunk's numerics in transformers' BiT backbone (modeling_bit.py), as ResNetTrunk's
# arguments: BitGroupNormActivation's default eps; WeightStandardizedConv2d, built with
# eps=1e-8 in every ViTHybrid layer, normalises the kernel as a batch norm: sqrt(var + eps).
TRUNK_NUMERICS = {"group_norm_epsilon": 1e-5, "std_conv_epsilon": 1e-8,
                  "std_conv_epsilon_on": "variance"}

_BACKBONE = "embeddings.patch_embeddings.backbone.bit."
_STEM_KEY = _BACKBONE + "embedder.convolution.weight"

# transformers 4.57's defaults for fields a config.json may leave out: ViTHybridConfig's,
# the BiT backbone it makes when given none, and BitConfig's.
_VIT_DEFAULTS = {"hidden_size": 768, "num_hidden_layers": 12, "num_attention_heads": 12,
                 "intermediate_size": 3072, "hidden_act": "gelu", "layer_norm_eps": 1e-12,
                 "image_size": 224, "patch_size": 1, "num_channels": 3, "qkv_bias": True}
_DEFAULT_BACKBONE = {"global_padding": "same", "layer_type": "bottleneck", "depths": [3, 4, 9],
                     "out_features": ["stage3"], "embedding_dynamic_padding": True}
_BIT_DEFAULTS = {"num_channels": 3, "embedding_size": 64, "hidden_sizes": [256, 512, 1024, 2048],
                 "depths": [3, 4, 6, 3], "layer_type": "preactivation", "hidden_act": "relu",
                 "global_padding": None, "num_groups": 32, "embedding_dynamic_padding": False,
                 "output_stride": 32, "width_factor": 1, "out_features": None,
                 "out_indices": None}


def _recognises(source):
    weights = open_weights(source)
    return weights is not None and any(n.endswith(_STEM_KEY) for n in weights.shapes)


class TransformersHybridReader(RowTableReader):
    def __init__(self, source):
        config = read_hybrid_config(source)
        super().__init__(source, FORMAT, open_weights(source), vit_hybrid_to_official)
        self._config = config

    def info(self):
        return folder_info(self, self._config, hybrid_variant(self._config),
                           trunk_numerics=dict(TRUNK_NUMERICS))


FORMAT = CheckpointFormat(
    name="transformers_hybrid",
    description="transformers ViTHybrid save_pretrained folder (config.json with a BiT "
                "backbone + model.safetensors)",
    recognises=_recognises, open=TransformersHybridReader, numerics=(False, 1e-12), pickled=True)


def read_hybrid_config(source):
    """The folder's config.json, with transformers' defaults filled in, checked to describe
    a hybrid keras_vit computes exactly; else a one-line refusal naming the file and field."""
    path, config = folder_config(
        source, "ViTHybrid", "vit-hybrid", ", but the weights hold a BiT backbone; keras_vit "
        "reads them as transformers' 'vit-hybrid' (ViTHybridModel, "
        "ViTHybridForImageClassification).")
    if config.get("backbone") or config.get("use_timm_backbone"):
        raise CheckpointError(f"{path} names a backbone {config.get('backbone')!r} to load by "
                              "name; keras_vit reads ViTHybrid folders whose backbone_config "
                              "describes the BiT trunk.")
    config = {**_VIT_DEFAULTS, **config}
    # Every field has a value now (transformers' default where absent): null is refused.
    checks.check_fields(path, config, {**TRANSFORMERS_FIELDS, "hidden_act": checks.string,
                                       "qkv_bias": checks.flag})
    act = config["hidden_act"]
    if act not in ("gelu", "gelu_new", "gelu_pytorch_tanh"):
        raise CheckpointError(f"{path}: hidden_act {act!r} is not a GELU; keras_vit's ViT "
                              "computes GELU only.")
    if config["hidden_size"] % config["num_attention_heads"]:
        raise CheckpointError(f"{path}: hidden_size {config['hidden_size']} is not a multiple of "
                              f"num_attention_heads {config['num_attention_heads']}.")
    if config["qkv_bias"] is not True:
        raise CheckpointError(f"{path}: qkv_bias is {config['qkv_bias']!r}; keras_vit's attention "
                              "has query, key and value biases, as every official model.")
    backbone = config.get("backbone_config")
    backbone = _DEFAULT_BACKBONE if backbone is None else backbone
    if not isinstance(backbone, dict):
        raise CheckpointError(f"{path}: backbone_config is a JSON {type(backbone).__name__}, not "
                              "the object a BiT config is.")
    config["backbone_config"] = _check_backbone(path, {**_BIT_DEFAULTS, **backbone})
    # The architecture it describes, against memory, before anything is built (a million
    # layers is within the caps' reach of no machine, and would build for hours).
    checks.check_architecture(path, hybrid_variant(config), config["image_size"])
    return config


# The fields keras_vit reads from a ViTHybrid's backbone_config (transformers' BitConfig),
# checked for type and range before any is used (null values were filled with the defaults:
# a null left is refused where a value is needed).
_BIT_FIELDS = {
    "embedding_size": checks.WIDTH, "num_groups": checks.WIDTH,
    "output_stride": checks.PIXELS, "num_channels": checks.WIDTH,
    "depths": checks.counts(checks.MAX_LAYERS, checks.MAX_STAGES),
    "hidden_sizes": checks.counts(checks.MAX_WIDTH, checks.MAX_STAGES),
    "width_factor": checks.number(0, 64), "layer_type": checks.string, "hidden_act": checks.string,
    "global_padding": checks.optional(checks.string), "embedding_dynamic_padding": checks.flag,
    "out_features": checks.optional(checks.strings),
    "out_indices": checks.optional(checks.counts(checks.MAX_STAGES, checks.MAX_STAGES + 1,
                                                 low=-checks.MAX_STAGES - 1)),
}


def _check_backbone(path, bit):
    """`bit` (a BiT config with defaults) if keras_vit's ResNetTrunk computes it exactly."""
    def refuse(field, why):
        raise CheckpointError(f"{path}: backbone_config.{field} is {bit.get(field)!r}; {why}")

    if bit.get("model_type", "bit") != "bit":
        refuse("model_type", "keras_vit reads ViTHybrid's BiT backbone only.")
    checks.check_fields(path, bit, _BIT_FIELDS, prefix="backbone_config.")
    depths = bit["depths"]
    if bit["layer_type"] != "bottleneck":
        refuse("layer_type", "the hybrids' trunk is post-activation 'bottleneck' units "
                             "(a 'preactivation' trunk is BiT's own ResNetV2).")
    if str(bit["global_padding"]).upper() != "SAME":
        refuse("global_padding", "keras_vit's trunk pads 'SAME', as ViTHybrid's.")
    if bit["embedding_dynamic_padding"] is not True:
        refuse("embedding_dynamic_padding", "keras_vit's stem max-pool pads 'SAME', as "
                                            "ViTHybrid's (true).")
    if bit["hidden_act"] != "relu":
        refuse("hidden_act", "keras_vit's trunk computes ReLU.")
    # Imported here, not at the top: the format table (and with it the weights cache) loads
    # without Keras, so a process that only fetches a file starts no TensorFlow.
    from keras_vit.layers.resnet import GROUP_NORM_GROUPS

    if bit["num_groups"] != GROUP_NORM_GROUPS:
        refuse("num_groups", f"keras_vit's trunk normalises in {GROUP_NORM_GROUPS} groups.")
    width, rest = divmod(bit["embedding_size"], 64)
    if rest:
        refuse("embedding_size", "keras_vit's trunk has a stem of 64 x width channels.")
    sizes = bit["hidden_sizes"]
    factor = bit["width_factor"]
    if (len(sizes) < len(depths) or [_make_div(h * factor) for h in sizes[:len(depths)]]
            != [256 * width * 2 ** s for s in range(len(depths))]):
        refuse("hidden_sizes", f"with width_factor {factor!r} and embedding_size "
                               f"{bit['embedding_size']} keras_vit's trunk has "
                               f"{[256 * width * 2 ** s for s in range(len(depths))]} channels.")
    if len(depths) > 1 and 4 * 2 ** (len(depths) - 2) >= bit["output_stride"]:
        refuse("output_stride", "a stage would be dilated instead of strided; keras_vit's "
                                "trunk halves the resolution in every stage after the first.")
    last = f"stage{len(depths)}"
    features, indices = bit["out_features"], bit["out_indices"]
    if (features and features[-1] != last) or (not features and indices
                                               and indices[-1] not in (len(depths), -1)):
        field = "out_features" if features else "out_indices"
        refuse(field, f"ViTHybrid embeds the last feature map it names, and keras_vit's hybrid "
                      f"embeds the last stage's ({last}).")
    return bit


def _make_div(value, divisor=8):
    # transformers' BiT channel rounding (modeling_bit.make_div).
    new = max(divisor, int(value + divisor / 2) // divisor * divisor)
    return new + divisor if new < 0.9 * value else new


def hybrid_variant(config):
    """The `Variant` a checked ViTHybrid config describes: the official one where it is one
    (R50+ViT-B_16 for google/vit-hybrid-base-bit-384), else one named after its sizes."""
    bit = config["backbone_config"]
    stages = tuple(bit["depths"])
    variant = Variant(
        "", width=config["hidden_size"], depth=config["num_hidden_layers"],
        mlp_dim=config["intermediate_size"], heads=config["num_attention_heads"],
        patch_size=config["patch_size"], classifier="token", resnet_stages=stages,
        resnet_width=bit["embedding_size"] // 64)
    return match_or_name(variant)


def _trunk_rows():
    """The BiT trunk's rows: the stem, then each unit's convolutions (no bias) and GroupNorms;
    transformers counts stages and units from 0, the official keys from 1."""
    unit = _BACKBONE + "encoder.stages.{s-1}.layers.{u-1}."
    names = {"conv1": "conv1", "conv2": "conv2", "conv3": "conv3", "conv_proj": "downsample.conv",
             "gn1": "norm1", "gn2": "norm2", "gn3": "norm3", "gn_proj": "downsample.norm"}
    rows = [KeyRow(_STEM_KEY, TRUNK_ROOT_KERNEL, CONV),
            KeyRow(_BACKBONE + "embedder.norm.weight", TRUNK_ROOT_SCALE),
            KeyRow(_BACKBONE + "embedder.norm.bias", TRUNK_ROOT_BIAS)]
    for conv, norm in UNIT_PARTS:
        scale, bias = UNIT_NORM[norm]
        rows += [KeyRow(f"{unit}{names[conv]}.weight", UNIT_CONV_KERNEL[conv], CONV),
                 KeyRow(f"{unit}{names[norm]}.weight", scale),
                 KeyRow(f"{unit}{names[norm]}.bias", bias)]
    return tuple(rows)


# ViTHybrid, row by row (formats/rows.py): the BiT trunk, then transformers' plain ViT.
_TRUNK_ROWS = _trunk_rows()
HYBRID_ROWS = (*_TRUNK_ROWS, *TRANSFORMERS_ROWS)


def vit_hybrid_to_official(sd, heads=None):
    """ViTHybrid arrays -> official-key arrays, attention split into `heads` heads. Keys it
    does not know pass through (prefixed "transformers:"), for the strict loader to name."""
    trunk = {k.removeprefix("vit."): k for k in sd if k.removeprefix("vit.").startswith(_BACKBONE)}
    out = to_official(_TRUNK_ROWS, {k: sd[stored] for k, stored in trunk.items()}, heads,
                      unknown_prefix="transformers:")
    # An unknown key is named as stored, "vit." included.
    out = {(f"transformers:{trunk[k[len('transformers:'):]]}" if k.startswith("transformers:")
            else k): v for k, v in out.items()}
    stored = set(trunk.values())
    out.update(transformers_to_official({k: a for k, a in sd.items() if k not in stored}, heads))
    return out
