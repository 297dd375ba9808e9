"""The architecture tables: one frozen `Variant` per official ViT (`VARIANTS`), keras_vit's
demo, and the families after the paper (`FAMILIES`).

One frozen record per architecture drives the constructors (and every
`__all__` that lists them), the checkpoint layout, the API page and the tests.
Names follow the official release ("ViT-B_16", "R50+ViT-B_16",
"ViT-B_16-gap-norep"); the short forms "B/16", "R50+B/16" and "B/16-gap" are
accepted too. `DEMO_VARIANT` ("demo") is keras_vit's own tiny ViT: found by
`get_variant`, but not official, so not in `VARIANTS` (no named constructor, no
weights).
"""

import dataclasses

from keras_vit.normalization import IMAGENET_MEAN_STD

__all__ = ["Variant", "VARIANTS", "DEMO_VARIANT", "FAMILIES", "FAMILY_TIMM_NAMES", "CLIP_MEAN_STD",
           "FIELD_CHOICES"]

# The values each switch of `Variant` may take: what a model builder implements, and what a file's
# record of a Variant is checked against (checkpoints/formats/npz_metadata.py). A family that needs
# a new kind of layer adds its value here.
# A field whose default is None (rope) may also be None.
FIELD_CHOICES = {"classifier": ("token", "gap", "map"),
                 "feed_forward": ("mlp", "swiglu", "swiglu_split"),
                 "activation": ("gelu", "quick_gelu"), "qkv_bias": ("qkv", "qv", "none"),
                 "rope": ("dinov3", "eva"), "rope_grid_indexing": ("ij", "xy"),
                 "patch_input": ("image", "naflex"), "norm": ("layer", "rms")}


@dataclasses.dataclass(frozen=True)
class Variant:
    """One architecture: transformer size, patch size, pooling, optional ResNet."""

    name: str  # the official spelling, e.g. "ViT-B_16"
    width: int
    depth: int
    mlp_dim: int  # the first MLP layer's width (SwiGLU: both halves, packed)
    heads: int
    patch_size: int  # on the image, or on the ResNet feature map for hybrids
    # "token" (class token), "gap" (mean of patches) or "map" (attention pooling, MAPHead)
    classifier: str = "token"
    resnet_stages: tuple | None = None  # BiT units per stage; () = stem only
    resnet_width: int = 1
    # --- what the families after the paper change (FAMILIES below); the defaults are the
    # paper's ViT, so its rows read as before.
    family: str = "ViT"
    class_token: bool | None = None  # None: a class token exactly when classifier == "token"
    distilled: bool = False  # DeiT: a distillation token after the class token, and its head
    register_tokens: int = 0  # learned tokens after the class token (DINOv2 with registers)
    # Whether the position embedding covers the prefix tokens too (timm's not no_embed_class):
    # True in the paper, DeiT and DINOv2; False in DeiT III and DINOv2 with registers.
    embed_prefix_tokens: bool = True
    layer_scale: float | None = None  # LayerScale's initial value; None: no LayerScale
    # "mlp" (Dense, activation, Dense), "swiglu" (gate and value packed in one Dense) or
    # "swiglu_split" (two Dense layers: timm's SwiGLU, fc1_g and fc1_x)
    feed_forward: str = "mlp"
    mlp_norm: bool = False  # a LayerNorm inside the MLP, before its output layer (EVA-02's sub-LN)
    qkv_bias: str = "qkv"  # which of query, key, value have a bias: "qkv", "qv" (EVA) or "none"
    # Whether the attention's output projection and the MLP's layers have biases (timm's
    # proj_bias; AIMv2's have none).
    proj_bias: bool = True
    # Every norm's kind ("layer": LayerNorm, "rms": RMSNorm, AIMv2's; keras_vit/layers/norms.py),
    # and whether one more normalises the patch embedding before the position embedding
    # (timm's embed_norm_layer, AIMv2).
    norm: str = "layer"
    embedding_norm: bool = False
    # 2-D rotary position embedding in the attention ("dinov3" or "eva": timm's two layouts,
    # keras_vit/layers/rotary.py); None: none. EVA's coordinates are stretched onto the trained
    # grid of `rope_reference_grid` rows and columns.
    rope: str | None = None
    rope_reference_grid: int | None = None
    # timm's grid options of RoPE: an offset added to each patch index, and which axis takes the
    # first half of the frequencies ("ij": the row; "xy": the column). The Perception Encoder's
    # are 1 and "xy".
    rope_grid_offset: float = 0.0
    rope_grid_indexing: str = "ij"
    position_embedding: bool = True  # the learned absolute one (DINOv3 has RoPE alone)
    # The final LayerNorm after the pooling, not before it (EVA-02: timm's fc_norm); the
    # tokens themselves (pooling=None) are then not normalised, as timm's forward_features.
    norm_after_pooling: bool = False
    # Whether a norm follows the last block at all, before or after the pooling (PE's language
    # and spatial towers have none: timm's use_post_transformer_norm and use_fc_norm both off).
    final_norm: bool = True
    activation: str = "gelu"  # the MLP's: "gelu" or "quick_gelu" (OpenAI CLIP)
    # The GELU form of the family's own code, used without weights: tanh in the paper's and
    # big_vision's JAX code, erf in the PyTorch families'. Weights bring their source's.
    approximate_gelu: bool = True
    pre_norm: bool = False  # a LayerNorm before the encoder (CLIP)
    patch_bias: bool = True  # whether the patch embedding has a bias (not in CLIP)
    layer_norm_epsilon: float | None = None  # None: the weights' source's (1e-6 official)
    # The MAP head's attention heads where they differ from the encoder's (a big_vision MAPHead
    # built with its own num_heads); None: the encoder's `heads`, as timm, transformers and
    # big_vision build SigLIP by default.
    map_heads: int | None = None
    # The MAP head's MLP width where it differs from the blocks' (PE-core G: 4 D beside blocks of
    # 8960); None: the blocks' `mlp_dim`, as SigLIP's.
    map_mlp_dim: int | None = None
    # "image": images in, cut into a fixed grid by a patch convolution; "naflex" (SigLIP 2
    # NaFlex): each image's patches at its own grid, packed to a token budget with padding
    # (keras_vit/layers/naflex.py), the square position grid resized per image.
    patch_input: str = "image"
    image_size: int = 224  # the default resolution (NaFlex: the side of its stored grid's image)
    normalization: tuple | None = None  # (mean, std) on [0, 1] pixels; None: official [-1, 1]

    def __post_init__(self):
        # One spelling per architecture: a MAP head with the encoder's heads is the default, so
        # a config that says so equals the table's row.
        if self.map_heads == self.heads:
            object.__setattr__(self, "map_heads", None)
        if self.map_mlp_dim == self.mlp_dim:
            object.__setattr__(self, "map_mlp_dim", None)

    @property
    def pooling_heads(self):
        """The MAP head's attention heads: `map_heads`, else the encoder's."""
        return self.heads if self.map_heads is None else self.map_heads

    @property
    def pooling_mlp_dim(self):
        """The MAP head's MLP width: `map_mlp_dim`, else the blocks' `mlp_dim`."""
        return self.mlp_dim if self.map_mlp_dim is None else self.map_mlp_dim

    @property
    def has_class_token(self):
        """`class_token`, or when it is None whether `classifier` is "token". Not resolved
        into the field: `dataclasses.replace(variant, classifier="gap")` must lose the token
        as the official gap models do."""
        return self.classifier == "token" if self.class_token is None else self.class_token

    @property
    def num_prefix_tokens(self):
        """Tokens before the patches: class, distillation and register tokens."""
        return int(self.has_class_token) + int(self.distilled) + self.register_tokens

    @property
    def position_prefix_tokens(self):
        """Prefix tokens the position embedding covers (0 with timm's no_embed_class)."""
        return self.num_prefix_tokens if self.embed_prefix_tokens else 0

    @property
    def block_options(self):
        """The switches of each encoder block, as `keras_vit.layers.TransformerBlock` takes them:
        a new switch inside the block is added here and in the block, not in the model builder."""
        swiglu = self.feed_forward.startswith("swiglu")
        rope = None if self.rope is None else {
            "style": self.rope, "num_prefix_tokens": self.num_prefix_tokens,
            **({"reference_grid": self.rope_reference_grid} if self.rope_reference_grid else {}),
            **({"grid_offset": self.rope_grid_offset} if self.rope_grid_offset else {}),
            **({"grid_indexing": self.rope_grid_indexing}
               if self.rope_grid_indexing != "ij" else {})}
        return {"activation": "swiglu" if swiglu else self.activation,
                "layer_scale": self.layer_scale, "split_gate": self.feed_forward == "swiglu_split",
                "mlp_norm": self.mlp_norm, "qkv_bias": self.qkv_bias, "rope": rope,
                "norm": self.norm, "proj_bias": self.proj_bias}

    @property
    def is_hybrid(self):
        return self.resnet_stages is not None

    @property
    def resnet_stride(self):
        """Pixels per ResNet output position along each axis (1 without a ResNet).

        Stem: a stride-2 convolution and a stride-2 max-pool; every stage after
        the first halves the resolution again.
        """
        if not self.is_hybrid:
            return 1
        return 4 * 2 ** max(len(self.resnet_stages) - 1, 0)

    @property
    def total_stride(self):
        """Pixels per token along each axis: the patch size times the ResNet's stride."""
        return self.resnet_stride * self.patch_size

    @property
    def trunk_channels(self):
        """Channels the ResNet hands the patch embedding (None without a ResNet).

        The root block gives 64 * width; stage s gives 4 * 64 * width * 2**(s-1).
        """
        if not self.is_hybrid:
            return None
        stages = self.resnet_stages
        return 64 * self.resnet_width * (4 * 2 ** (len(stages) - 1) if stages else 1)

    def feature_size(self, size):
        """Rows (or columns) the patch embedding sees for an input of `size` pixels.

        The ResNet pads "SAME": every stride-2 step gives ceil(size / 2), as in
        the official model. Without a ResNet this is `size` itself.
        """
        steps = self.resnet_stride.bit_length() - 1  # the stride is a power of two
        for _ in range(steps):
            size = -(-size // 2)
        return size

    def token_grid(self, image_size):
        """(rows, columns) of patch tokens for an image of (height, width) pixels."""
        return tuple(self.feature_size(s) // self.patch_size for s in image_size)

    @property
    def short_name(self):
        """"B/16", "R50+B/16", "B/16-gap"; a family's name as it is ("DINOv2-S/14-reg4")."""
        return self.name if self.family != "ViT" else _short(self.name)

    @property
    def constructor_name(self):
        """"ViT_B16" for ViT-B_16, "ViT_R50_B16" for R50+ViT-B_16, "DINOv2_S14_reg4" for
        DINOv2-S/14-reg4; None for gap variants and for variants outside `VARIANTS` and
        `FAMILIES`, which have no named constructor."""
        if FAMILIES.get(self.name) == self:
            return self.name.replace("/", "").replace("-", "_").replace("+", "plus")
        if self.classifier == "gap" or VARIANTS.get(self.name) != self:
            return None
        resnet, _, vit = self.name.rpartition("+")  # "R50", "ViT-B_16"
        size, patch = vit.removeprefix("ViT-").split("_")
        return "_".join(["ViT", *filter(None, [resnet]), size + patch])


_SIZES = {  # width, depth, mlp_dim, heads
    "Ti": (192, 12, 768, 3),
    "S": (384, 12, 1536, 6),
    "B": (768, 12, 3072, 12),
    "L": (1024, 24, 4096, 16),
    "H": (1280, 32, 5120, 16),
}


def _plain(size, patch, classifier="token"):
    suffix = "-gap-norep" if classifier == "gap" else ""
    return Variant(f"ViT-{size}_{patch}{suffix}", *_SIZES[size], patch, classifier)


def _hybrid(name, size, stages, patch_size=1):
    return Variant(name, *_SIZES[size], patch_size, "token", stages)


VARIANTS = {
    v.name: v
    for v in [
        _plain("Ti", 16),
        _plain("S", 16),
        _plain("S", 32),
        _plain("B", 8),
        _plain("B", 16),
        _plain("B", 32),
        _plain("L", 16),
        _plain("L", 32),
        _plain("H", 14),
        _plain("S", 16, "gap"),
        _plain("S", 32, "gap"),
        _plain("B", 16, "gap"),
        _plain("B", 32, "gap"),
        # Hybrids: the name's "/16" or "/32" is the total stride; the patch acts
        # on the ResNet feature map. R+Ti/16 is stem-only with patch 8 (stride 32).
        _hybrid("R+ViT-Ti_16", "Ti", (), patch_size=8),
        _hybrid("R26+ViT-S_32", "S", (2, 2, 2, 2)),
        _hybrid("R26+ViT-B_32", "B", (2, 2, 2, 2)),
        _hybrid("R50+ViT-B_16", "B", (3, 4, 9)),
        _hybrid("R50+ViT-L_32", "L", (3, 4, 6, 3)),
    ]
}


# Not an official architecture: a ViT small enough to train from scratch on scikit-learn's
# digits on a laptop CPU in minutes (16 px images, 4 px patches -> 16 tokens + the class token).
DEMO_VARIANT = Variant("ViT-demo_4", width=64, depth=4, mlp_dim=128, heads=4, patch_size=4)


# --- the families after the paper ------------------------------------------------------------
# What each family changes, as rows of data (docs/families.md; timm builds them alike:
# tests/models/test_families.py checks every row against timm's own model). Names follow the
# families' own: "DeiT-S/16", "DeiT-S/16-distilled", "DeiT3-B/16", "DINOv2-S/14",
# "DINOv2-S/14-reg4", "SigLIP-B/16", "CLIP-B/32".
CLIP_MEAN_STD = ((0.48145466, 0.4578275, 0.40821073), (0.26862954, 0.26130258, 0.27577711))
# DINOv2 giant: width 1536, 24 heads, 40 blocks, a SwiGLU feed-forward of 2 x 4096 (packed).
# SigLIP's shape-optimised So400m (Alabdulmohsin et al. 2023): width 1152, 27 blocks, 16 heads
# of 72, and an MLP of 4304, not 4 x 1152 (timm's mlp_ratio 3.7362), in the MAP head's MLP too.
# DINOv3's S+ and H+: a split SwiGLU of 2 x 4 D (timm's mlp_ratio 4 per half); H+ has 20 heads
# of 64; its 7B: width 4096, 40 blocks, 32 heads of 128, a split SwiGLU of 2 x 2 D (timm's
# mlp_ratio 2). AIMv2's sizes are its own (_AIMV2_SIZES). PE-core's gigantic G: width 1536, 50
# blocks, 16 heads of 96, an MLP of 8960.
_FAMILY_SIZES = {**_SIZES, "g": (1536, 40, 8192, 24), "So400m": (1152, 27, 4304, 16),
                 "S+": (384, 12, 3072, 6), "H+": (1280, 32, 10240, 20), "G": (1536, 50, 8960, 16),
                 "7B": (4096, 40, 16384, 32)}


# timm's word for each size in its architecture names ("vit_small_patch14_dinov2").
_TIMM_SIZES = {"Ti": "tiny", "S": "small", "B": "base", "L": "large", "g": "giant",
               "So400m": "so400m", "S+": "small_plus", "H+": "huge_plus", "H": "huge", "1B": "1b",
               "3B": "3b", "G": "gigantic", "7B": "7b"}


def _family(family, size, patch, suffix="", *, timm, sizes=_FAMILY_SIZES, **fields):
    """One row of `FAMILIES`, and timm's architecture name for it: `timm` is a template of
    {size} (timm's word for it) and {patch}; `sizes` the family's table of sizes."""
    # a family may size its MLP otherwise (EVA-02's SwiGLU of 2 x 8/3 D)
    width, depth, mlp_dim, heads = sizes[size]
    mlp_dim = fields.pop("mlp_dim", mlp_dim)
    name = f"{family}-{size}/{patch}{suffix}"
    row = Variant(name, width, depth, mlp_dim, heads, patch, family=family, **fields)
    return row, timm.format(size=_TIMM_SIZES[size], patch=patch)


# DeiT (Touvron et al. 2021): the paper's ViT trained on ImageNet-1k alone, in PyTorch (erf
# GELU, ImageNet mean/std); "distilled" adds a distillation token and its head.
_DEIT = dict(approximate_gelu=False, normalization=IMAGENET_MEAN_STD)
# DeiT III: LayerScale (1e-6), and a position embedding on the patches only.
_DEIT3 = dict(_DEIT, layer_scale=1e-6, embed_prefix_tokens=False)
# DINOv2: LayerScale (1e-5), patch 14, 518 px; with registers, 4 register tokens and a position
# embedding on the patches only.
_DINOV2 = dict(_DEIT, layer_scale=1e-5, image_size=518)
_REG4 = dict(register_tokens=4, embed_prefix_tokens=False)
# SigLIP: no class token, attention pooling (MAPHead); big_vision's tanh GELU; [-1, 1] pixels.
# SigLIP 2's fixed-resolution image towers are the same architecture (timm builds its
# ".v2_webli" weights with the same functions), so they are these rows too.
_SIGLIP = dict(classifier="map")
# OpenAI CLIP's image tower: a LayerNorm before the encoder, no patch bias, epsilon 1e-5,
# QuickGELU.
_CLIP = dict(pre_norm=True, patch_bias=False, layer_norm_epsilon=1e-5, activation="quick_gelu",
             normalization=CLIP_MEAN_STD)
# FlexiViT (big_vision): the paper's ViT trained at random patch sizes, stored at patch 16 and
# 240 px, its position embedding on the patches only; any other patch size through
# resample_patch_embedding (ViT(..., patch_size=P)).
_FLEXIVIT = dict(embed_prefix_tokens=False, image_size=240)
# SigLIP 2 NaFlex (Tschannen et al. 2025): SigLIP's tower taking patches at each image's own
# aspect ratio and a sequence budget, with a 16 x 16 position grid (256 px) resized per image;
# timm builds it with tanh GELU.
_SIGLIP2_NAFLEX = dict(_SIGLIP, patch_input="naflex", image_size=256)
# DINOv3 (Simeoni et al. 2025), as timm's Eva builds it: 2-D RoPE (its own centred coordinates,
# keras_vit/layers/rotary.py) and no absolute position embedding, a class token and 4 registers
# (unrotated), LayerScale 1e-5, LayerNorm at 1e-5, the query/key/value without bias ("qkvb":
# query and value biases, timm's zero key bias), mean pooling of the patches after the final
# norm (timm's default; DINOv3's own features are the class token: pooling="token"), 256 px.
_DINOV3 = dict(_DEIT, rope="dinov3", position_embedding=False, register_tokens=4,
               embed_prefix_tokens=False, layer_scale=1e-5, layer_norm_epsilon=1e-5,
               qkv_bias="none", classifier="gap", class_token=True, image_size=256)
_QKVB = dict(qkv_bias="qv")
_DINOV3_MLP = {size: dict(feed_forward="swiglu_split") for size in ("S+", "H+", "7B")}
# EVA-02 (Fang et al. 2023), timm's eva02_*_patch14 (masked image modelling from EVA-CLIP):
# patch 14, a learned position embedding on every token and RoPE in EVA's layout on the
# patches (coordinates stretched onto the trained 16 x 16 grid), query and value biases, a
# SwiGLU of 2 x 8/3 D (packed in Ti and S; split, with a LayerNorm before its output layer,
# in B and L), mean pooling then the final norm, OpenAI CLIP's mean/std, 224 px.
_EVA02 = dict(rope="eva", rope_reference_grid=16, qkv_bias="qv", feed_forward="swiglu",
              classifier="gap", class_token=True, norm_after_pooling=True,
              normalization=CLIP_MEAN_STD)
_EVA02_LARGE = dict(feed_forward="swiglu_split", mlp_norm=True)
_EVA02_MLP = {"Ti": 1024, "S": 2048, "B": 4096, "L": 5460}  # 2 x int(D * 8 / 3)
# AIMv2 (Fini et al. 2024), timm's aimv2_*_patch14 (its VisionTransformer): RMSNorm at 1e-5
# everywhere and on the patch embedding (before the learned position embedding, which covers
# the patches: no class token), no bias but the patch embedding's (query/key/value, output
# projection, the split SwiGLU's three layers), the final norm then the mean of the tokens
# (fc_norm off), OpenAI CLIP's mean/std; timm's 224, 336 and 448 names are the same rows.
_AIMV2 = dict(norm="rms", embedding_norm=True, layer_norm_epsilon=1e-5, qkv_bias="none",
              proj_bias=False, feed_forward="swiglu_split", classifier="gap",
              normalization=CLIP_MEAN_STD)
# width, depth, SwiGLU width (2 x int(D * mlp_ratio): 2.75 in L and 1B, 2.6667 in H and 3B), heads
_AIMV2_SIZES = {"L": (1024, 24, 2 * 2816, 8), "H": (1536, 24, 2 * 4096, 12),
                "1B": (2048, 24, 2 * 5632, 16), "3B": (3072, 24, 2 * 8192, 24)}
# PE-core, the Perception Encoder's image tower (Bolya et al. 2025), as timm's Eva builds
# vit_pe_core_*: OpenAI CLIP's stem (a LayerNorm before the encoder, no patch bias) with a
# learned position embedding on every token and RoPE in EVA's layout on the patches (indices
# from 1, the column's frequencies first, stretched onto the trained grid), the final norm, then
# attention pooling with 8 heads and a projection as the head (timm's `head`: 512 to 1024
# outputs); erf GELU, LayerNorm at 1e-5; each size at its own resolution.
_PE_CORE = dict(classifier="map", class_token=True, map_heads=8, rope="eva",
                rope_grid_offset=1.0, rope_grid_indexing="xy", pre_norm=True, patch_bias=False,
                layer_norm_epsilon=1e-5, approximate_gelu=False)
_PE_CORE_SIZES = {"Ti": (16, 384), "S": (16, 384), "B": (16, 224), "L": (14, 336)}  # patch, px
# G: no class token, RoPE's indices from 0, the MAP head's MLP 4 D beside the blocks' 8960.
_PE_CORE_G = dict(_PE_CORE, class_token=False, rope_grid_offset=0.0, map_mlp_dim=4 * 1536)
# PE-lang and PE-spatial, the Perception Encoder's towers aligned to a language model and to
# dense prediction, as timm builds vit_pe_lang_* and vit_pe_spatial_*: PE-core's stem and RoPE
# (its grid trained at 32 x 32) without the attention pooling or any final norm; their tokens
# are the features, and timm's head pools them by their mean. PE-lang adds LayerScale (0.1) and
# drops PE-core L's last block. Their G: no class token, RoPE's indices from 0 (as PE-core's),
# and LayerScale (0.1) in PE-spatial's too.
_PE_TOWER = dict({k: v for k, v in _PE_CORE.items() if k != "map_heads"}, classifier="gap",
                 final_norm=False, rope_reference_grid=32)
_PE_TOWER_G = dict(_PE_TOWER, class_token=False, rope_grid_offset=0.0, layer_scale=0.1)
_PE_LANG_SIZES = {"L": (1024, 23, 4096, 16), "G": (1536, 47, 8960, 16)}
_PE_SPATIAL_SIZES = {"Ti": (16, 512), "S": (16, 512), "B": (16, 512), "L": (14, 448),
                     "G": (14, 448)}  # patch, px

_FAMILY_ROWS = [
    *(_family("DeiT", size, 16, timm="deit_{size}_patch{patch}", **_DEIT)
      for size in ("Ti", "S", "B")),
    *(_family("DeiT", size, 16, "-distilled", timm="deit_{size}_distilled_patch{patch}",
              distilled=True, **_DEIT) for size in ("Ti", "S", "B")),
    *(_family("DeiT3", size, 16, timm="deit3_{size}_patch{patch}", **_DEIT3)
      for size in ("S", "B", "L")),
    *(_family("DINOv2", size, 14, timm="vit_{size}_patch{patch}_dinov2", **_DINOV2)
      for size in ("S", "B", "L")),
    _family("DINOv2", "g", 14, timm="vit_{size}_patch{patch}_dinov2", feed_forward="swiglu",
            **_DINOV2),
    *(_family("DINOv2", size, 14, "-reg4", timm="vit_{size}_patch{patch}_reg4_dinov2",
              **_DINOV2, **_REG4) for size in ("S", "B", "L")),
    _family("DINOv2", "g", 14, "-reg4", timm="vit_{size}_patch{patch}_reg4_dinov2",
            feed_forward="swiglu", **_DINOV2, **_REG4),
    *(_family("SigLIP", size, patch, timm="vit_{size}_patch{patch}_siglip", **_SIGLIP)
      for size, patch in (("B", 16), ("So400m", 14))),
    *(_family("SigLIP2", size, 16, "-naflex", timm="naflexvit_{size}_patch{patch}_siglip",
              **_SIGLIP2_NAFLEX) for size in ("B", "So400m")),
    *(_family("CLIP", size, patch, timm="vit_{size}_patch{patch}_clip_quickgelu", **_CLIP)
      for size, patch in (("B", 32), ("B", 16), ("L", 14))),
    *(_family("FlexiViT", size, 16, timm="flexivit_{size}", **_FLEXIVIT)
      for size in ("S", "B", "L")),
    *(_family("DINOv3", size, 16, suffix, timm="vit_{size}_patch{patch}_dinov3" + timm_suffix,
              **{**_DINOV3, **biases, **_DINOV3_MLP.get(size, {})})
      for size in ("S", "S+", "B", "L", "H+")
      for suffix, timm_suffix, biases in (("", "", {}), ("-qkvb", "_qkvb", _QKVB))),
    _family("DINOv3", "Ti", 16, "-qkvb", timm="vit_{size}_patch{patch}_dinov3_qkvb",
            **{**_DINOV3, **_QKVB}),
    _family("DINOv3", "7B", 16, timm="vit_{size}_patch{patch}_dinov3",
            **{**_DINOV3, **_DINOV3_MLP["7B"]}),
    *(_family("EVA02", size, 14, timm="eva02_{size}_patch{patch}", mlp_dim=_EVA02_MLP[size],
              **{**_EVA02, **(_EVA02_LARGE if size in ("B", "L") else {})})
      for size in ("Ti", "S", "B", "L")),
    *(_family("AIMv2", size, 14, timm="aimv2_{size}_patch{patch}", sizes=_AIMV2_SIZES, **_AIMV2)
      for size in _AIMV2_SIZES),
    *(_family("PE-Core", size, patch, timm="vit_pe_core_{size}_patch{patch}", image_size=pixels,
              rope_reference_grid=pixels // patch, **_PE_CORE)
      for size, (patch, pixels) in _PE_CORE_SIZES.items()),
    _family("PE-Core", "G", 14, timm="vit_pe_core_{size}_patch{patch}", image_size=448,
            rope_reference_grid=32, **_PE_CORE_G),
    *(_family("PE-Lang", size, 14, timm="vit_pe_lang_{size}_patch{patch}", sizes=_PE_LANG_SIZES,
              image_size=448, **(_PE_TOWER_G if size == "G" else dict(_PE_TOWER, layer_scale=0.1)))
      for size in _PE_LANG_SIZES),
    *(_family("PE-Spatial", size, patch, timm="vit_pe_spatial_{size}_patch{patch}",
              image_size=pixels, **(_PE_TOWER_G if size == "G" else _PE_TOWER))
      for size, (patch, pixels) in _PE_SPATIAL_SIZES.items()),
]
FAMILIES = {row.name: row for row, _ in _FAMILY_ROWS}
# timm's architecture name (no resolution suffix) -> the row it builds
# (keras_vit/variants/timm_names.py adds them to the official variants' names).
FAMILY_TIMM_NAMES = {timm: row.name for row, timm in _FAMILY_ROWS}


def _short(official):
    short = official.replace("ViT-", "").replace("_", "/").replace("-gap-norep", "-gap")
    return short
