"""Layer-wise decay's groups are timm's: for each family (and a plain, a gap and a hybrid ViT),
every variable's learning-rate factor from `layer_scales` is the `lr_scale` that timm's
`param_groups_layer_decay` (through the model's own `group_matcher`) gives the timm parameter
the variable is loaded from.

timm builds the same architecture at a small width and depth with random weights; a keras_vit
variable finds its timm parameter through the checkpoint layout (its official keys) and the
timm format's rows (the official key's timm name), as loading a timm file does. A hybrid's
ResNet trunk is not in those rows (keras_vit reads hybrids from the official npz): its
variables are compared with the parameters under timm's `patch_embed.backbone`, which timm's
matcher puts in one group. Factors are powers of DECAY = 0.5, exact in floating point, so
they compare equal.
"""

import dataclasses

import pytest

import keras_vit
from keras_vit.checkpoints.formats.timm import TIMM_ROWS
from keras_vit.checkpoints.layout import is_trunk_key, layout
from keras_vit.training.regularization import layer_scales
from keras_vit.variants import get_variant
from tests.oracle import import_timm, timm_hybrid, timm_vit

DECAY = 0.5
DEPTH = 3
SIZE = {"width": 32, "heads": 2, "mlp_dim": 64}
CLASSES = 3
TRUNK = "patch_embed.backbone"  # timm's hybrid trunk, one group


def _variant(name):
    return dataclasses.replace(get_variant(name), depth=DEPTH, **SIZE)


def _timm_family(architecture, image_size, **kwargs):
    timm = import_timm()
    return timm.create_model(architecture, pretrained=False, depth=DEPTH, embed_dim=SIZE["width"],
                             num_heads=SIZE["heads"], mlp_ratio=SIZE["mlp_dim"] / SIZE["width"],
                             img_size=image_size, num_classes=CLASSES, **kwargs)


# (keras_vit variant, a function building timm's model of it at `image_size`, image size): one
# row of each family (the sizes of a family differ in width and depth only), the three the
# layer-decay fix is about first.
CASES = [
    ("DINOv2-S/14-reg4", lambda s: _timm_family("vit_small_patch14_reg4_dinov2", s), 28),
    ("DeiT-S/16-distilled", lambda s: _timm_family("deit_small_distilled_patch16_224", s), 32),
    ("CLIP-B/16", lambda s: _timm_family("vit_base_patch16_clip_quickgelu_224", s), 32),
    ("SigLIP-B/16", lambda s: _timm_family("vit_base_patch16_siglip_224", s), 32),
    ("DeiT-S/16", lambda s: _timm_family("deit_small_patch16_224", s), 32),
    ("DeiT3-S/16", lambda s: _timm_family("deit3_small_patch16_224", s), 32),
    ("DINOv2-S/14", lambda s: _timm_family("vit_small_patch14_dinov2", s), 28),
    ("FlexiViT-S/16", lambda s: _timm_family("flexivit_small", s), 32),
    # timm's Eva class (RoPE: no position table; gamma_1 and gamma_2)
    ("DINOv3-S/16", lambda s: _timm_family("vit_small_patch16_dinov3", s), 32),
    # Eva with CLIP's norm_pre in the stem and SigLIP's attention pooling (PE-core), its MLP at
    # the blocks' ratio as keras_vit's row has it
    ("PE-Core-Ti/16", lambda s: _timm_family("vit_pe_core_tiny_patch16_384", s,
                                             attn_pool_mlp_ratio=SIZE["mlp_dim"] / SIZE["width"]), 32),
    ("ViT-Ti_16", lambda s: timm_vit(_variant("ViT-Ti_16"), s, CLASSES), 32),
    ("ViT-S_32-gap-norep", lambda s: timm_vit(_variant("ViT-S_32-gap-norep"), s, CLASSES), 64),
    ("R+ViT-Ti_16", lambda s: timm_hybrid(_variant("R+ViT-Ti_16"), s, CLASSES), 64),
]


def timm_scales(model):
    """{timm parameter name: its lr_scale} from timm's own parameter groups; a hybrid's trunk
    parameters under one name (TRUNK), all in one group."""
    from timm.optim import param_groups_layer_decay

    names = {id(p): name for name, p in model.named_parameters()}
    scales = {}
    for group in param_groups_layer_decay(model, layer_decay=DECAY):
        for parameter in group["params"]:
            name = names[id(parameter)]
            name = TRUNK if name.startswith(TRUNK + ".") else name
            assert scales.setdefault(name, group["lr_scale"]) == group["lr_scale"], name
    return scales


def timm_name(key, parameters):
    """The timm parameter of `parameters` an official key is read from (TIMM_ROWS: the row
    spelled as this model spells it, VisionTransformer's `ls1.gamma` or Eva's `gamma_1`),
    TRUNK for a trunk key."""
    if is_trunk_key(key):
        return TRUNK
    for row in TIMM_ROWS:
        for i in range(DEPTH):
            if key in (official.format(i=i) for official in row.official) \
                    and row.source.format(i=i) in parameters:
                return row.source.format(i=i)
    raise AssertionError(f"no timm parameter holds {key}")


@pytest.mark.parametrize("name,build_timm,image_size", CASES, ids=[c[0] for c in CASES])
def test_each_variable_trains_at_timms_rate(name, build_timm, image_size):
    ours = keras_vit.ViT(_variant(name), image_size=image_size, classes=CLASSES,
                         representation_size=None)
    theirs = timm_scales(build_timm(image_size))
    variables = ours.trainable_variables
    scales = dict(zip((v.path for v in variables), layer_scales(variables, DECAY)))
    source = {row.variable.path: timm_name(row.keys[0], theirs) for row in layout(ours)}
    assert set(source) == set(scales)  # every variable is loaded from timm's model
    assert set(source.values()) == set(theirs)  # and every timm parameter loads one
    differ = [f"{path} ({source[path]}): {scale} here, timm {theirs[source[path]]}"
              for path, scale in scales.items() if scale != theirs[source[path]]]
    assert not differ, "\n".join(differ)
    # Every group is there: the stem, each block (the final norm with the last) and the head.
    assert sorted(set(theirs.values())) == [DECAY ** k for k in range(DEPTH + 1, -1, -1)]
