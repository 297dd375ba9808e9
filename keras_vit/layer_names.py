"""Each layer's name in keras_vit's models and its role, said once.

The models (keras_vit/models/vit.py, bit.py, resnet.py) name their layers with these
constants; the checkpoint layout, the loader, export, precision, LoRA and layer-wise decay
find layers through them and through `role_of`. The transformer's names follow the official
checkpoint's keys (`Transformer/encoderblock_{i}`, `Transformer/encoder_norm`, `head`, ...),
so they are part of the file format: renaming one breaks every saved file.

Here, beside variants/, rather than in keras_vit/models/: importing a module of the models
package runs its __init__, which loads the checkpoints package, which reads these names.
Imports nothing.
"""

import enum
import re

__all__ = ["Role", "role_of", "block_index", "block_name", "pooling_name", "is_block", "is_bit_unit",
           "IMAGES", "PREPROCESSING", "RESNET", "EMBEDDING", "PATCH_TOKENS", "CLS", "DIST_TOKEN",
           "REG_TOKEN", "POSEMBED_INPUT", "EMBEDDING_NORM", "EMBEDDING_DROPOUT", "PRE_NORM", "BLOCK",
           "ENCODER_NORM", "TOKEN_POOL", "GAP_POOL", "MAX_POOL", "MAP_POOL", "DISTILLATION_POOL",
           "DISTILLED_FEATURES", "PRE_LOGITS", "POOLED_NORM", "HEAD", "HEAD_DIST", "DISTILLED_LOGITS",
           "PREDICTIONS", "ROOT_PAD", "ROOT_BLOCK", "ROOT_POOL_PAD", "ROOT_POOL", "BIT_UNIT",
           "GROUP_NORM", "POST_RELU", "AVG_POOL", "HEADS", "FLOAT32_LAYERS", "STEM_LAYERS",
           "PATCHES", "GRID", "PATCH_VALID", "INPUTS"]


class Role(enum.Enum):
    """Where a layer stands in a model, in the order input to output."""

    INPUT = "input"  # the images
    STEM = "stem"  # from the pixels to the first encoder block's tokens
    CNN = "cnn"  # BiT ResNetV2's convolutional body (keras_vit/models/bit.py)
    BLOCK = "block"  # an encoder block (encoderblock_{i})
    ENCODER_NORM = "encoder norm"  # the LayerNorm after the last block
    POOLING = "pooling"  # the tokens (or a CNN's feature map) to one vector
    PRE_LOGITS = "pre_logits"  # the official tanh Dense before the head
    HEAD = "head"  # the classifier, and what combines or activates its logits


# The stem, in the order the model applies it.
IMAGES = "images"
# NaFlex's inputs (keras_vit/layers/naflex.py): each image's flattened patches, packed with
# padding, and its (rows, cols) grid; the padding mask computed from them.
PATCHES, GRID = "patches", "grid"
INPUTS = (IMAGES, PATCHES, GRID)
PATCH_VALID = "patch_valid"
PREPROCESSING = "preprocessing"  # include_preprocessing=True's Rescaling
RESNET = "resnet"  # a hybrid's ResNet trunk (and ResNetV2's)
EMBEDDING = "embedding"  # the patch embedding
EMBEDDING_NORM = "embedding_norm"  # AIMv2's norm on the patch embedding
PATCH_TOKENS = "patch_tokens"  # dynamic image size: the patch grid flattened
POSEMBED_INPUT = "posembed_input"
CLS = "cls"
DIST_TOKEN = "dist_token"  # DeiT distilled
REG_TOKEN = "reg_token"  # DINOv2's registers
EMBEDDING_DROPOUT = "embedding_dropout"
PRE_NORM = "pre_norm"  # CLIP's LayerNorm before the encoder
STEM_LAYERS = (PREPROCESSING, RESNET, EMBEDDING, EMBEDDING_NORM, PATCH_TOKENS, POSEMBED_INPUT,
               CLS, DIST_TOKEN, REG_TOKEN, EMBEDDING_DROPOUT, PRE_NORM, PATCH_VALID)

BLOCK = "encoderblock_{i}"
ENCODER_NORM = "encoder_norm"

TOKEN_POOL = "token_pool"
GAP_POOL = "gap_pool"
MAX_POOL = "max_pool"
MAP_POOL = "map_pool"  # SigLIP's attention pooling
DISTILLATION_POOL = "distillation_pool"  # DeiT: the distillation token
DISTILLED_FEATURES = "distilled_features"  # DeiT without its heads: the two tokens' average
AVG_POOL = "avg_pool"  # BiT

PRE_LOGITS = "pre_logits"
# EVA-02's final LayerNorm, after the pooling (timm's fc_norm, which timm's layer decay groups
# with the head): between the pooling and the head, as pre_logits.
POOLED_NORM = "pooled_norm"
HEAD = "head"
HEAD_DIST = "head_dist"  # DeiT's distillation head
DISTILLED_LOGITS = "distilled_logits"  # DeiT: the two heads' average
PREDICTIONS = "predictions"  # the activation after DeiT's averaged heads
HEADS = (HEAD, HEAD_DIST)
# The layers the models build with dtype="float32": the logits keep float32's resolution
# under mixed precision.
FLOAT32_LAYERS = (HEAD, HEAD_DIST, DISTILLED_LOGITS, PREDICTIONS)

# BiT ResNetV2 (keras.applications' names where it has them).
ROOT_PAD = "root_pad"
ROOT_BLOCK = "root_block"
ROOT_POOL_PAD = "root_pool_pad"
ROOT_POOL = "root_pool"
BIT_UNIT = "block{s}_unit{u:02d}"
GROUP_NORM = "group_norm"
POST_RELU = "post_relu"

_POOLINGS = {"token": TOKEN_POOL, "gap": GAP_POOL, "max": MAX_POOL, "map": MAP_POOL}
_ROLES = {
    **dict.fromkeys(INPUTS, Role.INPUT),
    **dict.fromkeys(STEM_LAYERS, Role.STEM),
    ENCODER_NORM: Role.ENCODER_NORM,
    **dict.fromkeys([*_POOLINGS.values(), DISTILLATION_POOL, DISTILLED_FEATURES, AVG_POOL],
                    Role.POOLING),
    PRE_LOGITS: Role.PRE_LOGITS,
    POOLED_NORM: Role.PRE_LOGITS,
    **dict.fromkeys(FLOAT32_LAYERS, Role.HEAD),
    **dict.fromkeys([ROOT_PAD, ROOT_BLOCK, ROOT_POOL_PAD, ROOT_POOL, GROUP_NORM, POST_RELU],
                    Role.CNN),
}
_BLOCK = re.compile(r"encoderblock_(\d+)")
_BIT_UNIT = re.compile(r"block\d+_unit\d+")


def block_name(i):
    """The name of encoder block `i` (from 0): "encoderblock_3"."""
    return BLOCK.format(i=i)


def block_index(name):
    """Encoder block `name`'s index ("encoderblock_3" -> 3), None for any other name."""
    match = _BLOCK.fullmatch(name)
    return int(match.group(1)) if match else None


def is_block(name):
    """Whether `name` is an encoder block's."""
    return block_index(name) is not None


def is_bit_unit(name):
    """Whether `name` is a BiT bottleneck unit's ("block1_unit01")."""
    return _BIT_UNIT.fullmatch(name) is not None


def pooling_name(pooling):
    """The pooling layer's name for a model's `pooling` ("token", "gap", "max", "map")."""
    return _POOLINGS[pooling]


def role_of(name):
    """The `Role` of the layer called `name` in a keras_vit model; None for a name no
    keras_vit model gives."""
    if is_block(name):
        return Role.BLOCK
    if is_bit_unit(name):
        return Role.CNN
    return _ROLES.get(name)
