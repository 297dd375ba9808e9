"""Build a ViT from the variant table, and the per-variant constructors."""

import contextlib
import dataclasses
import inspect

import keras

from keras_vit import layer_names as names
from keras_vit._support.checks import positive_int
from keras_vit.checkpoints import load_weights, resolve_weights
from keras_vit.checkpoints.formats.npz_metadata import VARIANT_ATTRIBUTE
from keras_vit.errors import ArgumentError
from keras_vit.layers import (
    AddPositionEmbedding,
    ClassToken,
    MAPHead,
    PatchEncoder,
    PrefixTokens,
    ResNetTrunk,
    TokenPooling,
    TransformerBlock,
)
from keras_vit.layers.naflex import NaFlexPatchEmbedding, NaFlexPositionEmbedding, PatchValidity
from keras_vit.layers.norms import token_norm
from keras_vit.layers.transformer import LAYER_NORM_EPSILON
from keras_vit.memory import check_fits
from keras_vit.models.arguments import (
    classes_argument,
    flag_argument,
    input_arguments,
    name_argument,
    size_argument,
)
from keras_vit.normalization import OFFICIAL_NORMALIZATION, rescaling_arguments
from keras_vit.preprocessing_record import OFFICIAL_PREPROCESSING
from keras_vit.variants import FAMILIES, VARIANTS, constructor_names, get_variant

# ViT and one named constructor per official non-gap variant (ViT_Ti16, ...) and per family
# variant (DeiT_S16, DINOv2_S14_reg4, ...), made at the end of this file from the tables.
__all__ = ["ViT", *constructor_names()]

_POOLINGS = ("token", "gap", "max", "map", None)
# keras.applications' spellings: "avg" is the mean of the patch tokens ("gap"); "max" their
# maximum, per feature (features only: no official head was trained on it).
_POOLING_ALIASES = {"avg": "gap", "max": "max"}


def ViT(variant, weights=None, image_size=None, include_top=True, classes=None,
        pooling="default", classifier_activation=None, representation_size="auto",
        dropout=0.0, attention_dropout=0.0, approximate_gelu=None, channels=3, name=None,
        layer_norm_epsilon=None, input_shape=None, input_tensor=None, include_preprocessing=False,
        patch_size=None, dynamic_image_size=False, drop_path_rate=0.0):
    """Builds a Vision Transformer and optionally loads official weights.

    Args:
        variant: an official or short architecture name: "ViT-B_16", "B/16",
            "B/16-gap", "R50+ViT-B_16", "R50+B/16". See `keras_vit.VARIANTS`.
        weights: None (random), a catalogue tag ("imagenet21k",
            "imagenet21k+imagenet2012", "augreg-in21k",
            "augreg-in21k-ft-in1k-224", "augreg-in21k-ft-in1k-384", or a hub
            entry such as "hf-google-in21k-ft-in1k-224"), "hf://owner/name" (a
            transformers or timm repository, through huggingface_hub), or the
            path of an official `.npz`, a timm `.safetensors`, a transformers
            `save_pretrained` directory (ViT, or ViTHybrid for R50+ViT-B/16) or a
            keras-hub preset directory.
        image_size: int or (height, width); both must be multiples of the
            variant's stride. Hybrids take any size whose ResNet feature map
            (ceil(size / ResNet stride), SAME padding) their patch tiles: any
            size for R50/R26 hybrids, ceil(size / 4) a multiple of 8 for
            R+Ti/16. Defaults to the checkpoint's resolution, else 224.
            Position embeddings are resized when it differs from the checkpoint.
        include_top: whether to end with the classification head.
        classes: head size. Defaults to the checkpoint's class count, else
            1000. A head whose size differs from the checkpoint's starts at
            zero, as official fine-tuning does.
        pooling: "token" (the class token), "gap" or "avg" (mean of the patch
            tokens), "max" (their maximum per feature, as keras.applications;
            `include_top=False` only), or None (the whole normalised token
            sequence; `include_top=False` only). Defaults to the variant's own
            classifier. With "token" the
            last encoder block computes the class token alone (the pooled
            output is the same, for less work), so to read every token's
            final features build with `pooling=None`.
        classifier_activation: activation of the head, e.g. "softmax"; None
            returns logits.
        representation_size: width of the tanh `pre_logits` layer before the
            head, None for none, or "auto": kept exactly when the checkpoint
            has one and its head is kept.
        dropout: dropout rate after the dense layers and the position embedding.
        attention_dropout: dropout rate on the attention weights.
        approximate_gelu: tanh-approximate GELU as the official models compute
            it (True), or exact erf GELU (False). None (default): what the
            weights' source computes: tanh for official files and random
            weights, erf for timm, transformers and keras-hub weights.
        layer_norm_epsilon: the LayerNorms' epsilon. None (default): the
            source's: 1e-6, or a transformers config's `layer_norm_eps` (1e-12
            for google/vit-*), or a keras-hub config's `layer_norm_epsilon`.
        channels: input channels.
        name: model name; defaults to the official variant name, with "+"
            spelled "_" ("R50_ViT-B_16") as TensorFlow scopes require.
        input_shape: `(height, width, channels)`, as keras.applications: the
            same as `image_size=(height, width), channels=channels`. The size
            must be fixed (no None): the position embeddings are per patch.
        input_tensor: a Keras tensor (e.g. `keras.Input(...)` or a layer's
            output) to build the model on, as keras.applications; its shape
            gives the input shape, and the model's input is its source.
        include_preprocessing: start the model with a `keras.layers.Rescaling`
            layer ("preprocessing") mapping pixels in [0, 255] to what the
            weights expect: [-1, 1], or the mean/std their source records
            (DeiT's ImageNet mean/std, ...; `keras_vit.normalization`), so the
            model takes raw pixels and `preprocess_input` is not needed.
        patch_size: build with this patch size instead of the variant's (FlexiViT). Weights
            of the variant's patch size are moved to it by
            `keras_vit.resample_patch_embedding`, and their position grid resized to the
            new token grid: `ViT("B/16", weights=..., patch_size=8)` is a B/8 at 224 px.
        dynamic_image_size: take images of any height and width at call time (as timm's
            `dynamic_img_size=True` with `dynamic_img_pad=True`): the position embedding,
            stored for `image_size`, is resized inside the call to each image's grid
            (timm's bicubic), and sizes that are not a multiple of the patch are padded
            at the bottom and right with zeros. Plain ViTs only; not with `input_shape`
            or `input_tensor`, whose size is fixed.
        drop_path_rate: stochastic depth: block i of L drops its residual
            branches for a random `drop_path_rate * i / (L - 1)` of the
            examples while training (0 for the first block, the rate for the
            last), as timm's `drop_path_rate` and AugReg's `sd`.

    Returns:
        A `keras.Model` mapping images `(batch, height, width, channels)` in
        [-1, 1] (see `keras_vit.preprocess_input`; in [0, 255] with
        `include_preprocessing=True`) to logits `(batch, classes)`, pooled
        features `(batch, D)` or tokens `(batch, n, D)`.
    """
    image_size, channels = input_arguments(input_shape, input_tensor, image_size, channels)
    flag_argument("include_preprocessing", include_preprocessing)
    flag_argument("include_top", include_top)
    flag_argument("dynamic_image_size", dynamic_image_size)
    name_argument(name)
    if isinstance(pooling, str) and pooling in _POOLING_ALIASES:
        pooling = _POOLING_ALIASES[pooling]
    variant = get_variant(variant)
    # The weights are the variant's (its patch size); the model may take another.
    built = variant if patch_size is None else dataclasses.replace(
        variant, patch_size=positive_int(patch_size, "patch_size"))
    _check_dynamic_arguments(dynamic_image_size, built, input_shape, input_tensor)
    image_size = size_argument(image_size)
    channels = positive_int(channels, "channels")
    classes = classes_argument(classes, include_top)
    check_fits(built, image_size, classes)  # before any weights are read or arrays made
    source = resolve_weights(variant, weights, image_size)
    # A user's file is held open from here to the load: the file checked is the file read.
    with contextlib.closing(source) if source is not None else contextlib.nullcontext():
        image_size = _image_size(image_size, source, built)
        pooling = variant.classifier if pooling == "default" else pooling
        _check_head_arguments(variant, include_top, pooling, classifier_activation)
        if classes is None:
            classes = source.classes if source and source.classes else 1000
        if source is not None:  # the size and classes the weights chose, before building
            check_fits(variant, image_size, classes)
        if representation_size == "auto":
            keep = source is not None and include_top and classes == source.classes
            representation_size = source.representation_size if keep else None
        for rate_name, rate in (("dropout", dropout), ("attention_dropout", attention_dropout),
                                ("drop_path_rate", drop_path_rate)):
            if not 0.0 <= rate < 1.0:
                raise ArgumentError(f"{rate_name} must be in [0, 1), got {rate}.")

        # A model computes what its weights' library computes, unless the caller says otherwise.
        source_gelu, source_epsilon = _numerics(variant, source)
        approximate_gelu = source_gelu if approximate_gelu is None else approximate_gelu
        epsilon = source_epsilon if layer_norm_epsilon is None else layer_norm_epsilon

        # The pixels the weights expect: include_preprocessing computes it; the model records it.
        normalization = ((source.normalization if source is not None else None)
                         or variant.normalization or OFFICIAL_NORMALIZATION)
        head = _Head(include_top, classes, pooling, classifier_activation, representation_size)
        trunk_numerics = (source.trunk_numerics if source is not None else None) or {}
        model = _build(built, image_size, channels, head, dropout, attention_dropout,
                       approximate_gelu, name or _default_name(variant), epsilon, input_tensor,
                       include_preprocessing, normalization, trunk_numerics, dynamic_image_size,
                       drop_path_rate, getattr(source, "preprocessing", None))
        # The architecture built, for save_npz's record (keras_vit.from_pretrained reads it).
        setattr(model, VARIANT_ATTRIBUTE, built)
        if source is not None:
            with contextlib.closing(source.open()) as reader:
                load_weights(model, reader, resample_patches=built is not variant)
    return model


def _numerics(variant, source):
    """(approximate_gelu, layer_norm_epsilon): the source's, else the family's own. An epsilon
    the family fixes (CLIP's 1e-5) holds unless the source records its own; the GELU form is
    the source library's (timm computes erf GELU for every family, big_vision tanh)."""
    if source is None:
        return variant.approximate_gelu, variant.layer_norm_epsilon or LAYER_NORM_EPSILON
    gelu, epsilon = source.numerics
    if variant.layer_norm_epsilon is not None and source.layer_norm_epsilon is None:
        epsilon = variant.layer_norm_epsilon
    return gelu, epsilon


def _default_name(variant):
    # TensorFlow scope names reject "+" and Keras "/"; the AugReg file names spell "+" as "_"
    # too (R50_L_32). "DINOv2-S/14" is "DINOv2-S_14".
    return variant.name.replace("+", "_").replace("/", "_")


def _image_size(image_size, source, variant):
    stored = source.resolution if source and source.resolution else variant.image_size
    if variant.patch_input == "naflex" and source is not None and image_size is not None \
            and size_argument(image_size) != size_argument(stored):
        # timm keeps the trained grid whatever img_size says and resizes it for each image;
        # resizing it once at load as well would compute another function (5e-5 apart).
        height, width = variant.token_grid(size_argument(stored))
        raise ArgumentError(f"{variant.short_name} takes each image at its own size (max_tokens "
                            f"sets the budget) and resizes its weights' {height}x{width} "
                            "position grid to each image's: image_size does not apply; drop it.")
    image_size = size_argument(stored if image_size is None else image_size)
    if min(variant.feature_size(s) for s in image_size) < variant.patch_size:
        raise ArgumentError(f"patch_size {variant.patch_size} is larger than the image "
                            f"({image_size[0]}x{image_size[1]} pixels) it would cut into patches.")
    if variant.is_hybrid:
        _check_hybrid_image_size(variant, image_size)
        return image_size
    stride = variant.total_stride
    if any(s % stride for s in image_size):
        raise ArgumentError(f"image_size {image_size[0]}x{image_size[1]} is not divisible by "
                            f"{variant.short_name}'s stride of {stride} pixels; use a multiple "
                            f"of {stride}, e.g. {stride * max(1, image_size[0] // stride)}.")
    return image_size


def _check_dynamic_arguments(dynamic_image_size, variant, input_shape, input_tensor):
    if not dynamic_image_size:
        return
    if variant.is_hybrid:
        raise ArgumentError(f"dynamic_image_size=True is for plain ViTs; {variant.short_name} is a "
                            "hybrid: build it at a fixed image_size.")
    if input_shape is not None or input_tensor is not None:
        raise ArgumentError("dynamic_image_size=True takes any size at call time; give image_size "
                            "(the size its position embeddings are stored for), not input_shape "
                            "or input_tensor.")


def _check_hybrid_image_size(variant, image_size):
    # The ResNet pads "SAME", so any size works and gives a ceil(size / stride) feature
    # map, as in the official model; only the patch (8 for R+Ti/16) must tile that map.
    feature = [variant.feature_size(s) for s in image_size]
    if any(f % variant.patch_size for f in feature):
        stride = variant.resnet_stride
        raise ArgumentError(
            f"image_size {image_size[0]}x{image_size[1]} gives {variant.short_name}'s ResNet a "
            f"{feature[0]}x{feature[1]} feature map (ceil(size / {stride})), which its "
            f"{variant.patch_size}x{variant.patch_size} patches do not tile; use a size whose "
            f"ceil(size / {stride}) is a multiple of {variant.patch_size}, e.g. a "
            f"multiple of {variant.total_stride}.")


def _check_head_arguments(variant, include_top, pooling, classifier_activation):
    if pooling not in _POOLINGS:
        raise ArgumentError(f'pooling must be "token", "gap" (or "avg"), "max", "map" or None, '
                            f'got {pooling!r}.')
    if pooling == "max" and include_top:
        raise ArgumentError('pooling="max" gives features (include_top=False); no official head '
                            'was trained on it. With the head use "token" or "gap".')
    if pooling == "token" and not variant.has_class_token:
        raise ArgumentError(f'{variant.short_name} has no class token; use pooling='
                            f'"{variant.classifier}", "gap" or None.')
    if pooling == "map" and variant.classifier != "map":
        raise ArgumentError(f'{variant.short_name} has no attention-pooling (MAP) head; use '
                            f'pooling="{variant.classifier}", "gap" or None.')
    if include_top and pooling is None:
        raise ArgumentError("include_top=True needs pooled features: pooling must be "
                            '"token" or "gap", not None.')
    if not include_top and classifier_activation is not None:
        raise ArgumentError("classifier_activation applies to the head; it needs include_top=True.")


def has_softmax_head(model):
    """Whether `model`'s "head" layer ends in a softmax (it returns probabilities, not logits;
    `classifier_activation="softmax"`)."""
    try:
        head = model.get_layer(names.HEAD)
    except ValueError:
        return False
    return getattr(head, "activation", None) is keras.activations.softmax


@dataclasses.dataclass(frozen=True)
class _Head:
    """What follows the encoder: pooling, and the optional pre_logits and head layers."""

    include_top: bool
    classes: int
    pooling: str | None
    activation: object
    representation_size: int | None


def _build(variant, image_size, channels, head, dropout, attention_dropout, approximate_gelu,
           name, epsilon=LAYER_NORM_EPSILON, input_tensor=None, include_preprocessing=False,
           normalization=OFFICIAL_NORMALIZATION, trunk_numerics=None, dynamic=False,
           drop_path_rate=0.0, preprocessing=None):
    if variant.patch_input == "naflex":
        if input_tensor is not None or include_preprocessing:
            raise ArgumentError(f"{variant.short_name} takes packed patches and their grids "
                                "(keras_vit.runtime.naflex_inputs), not images: build it without "
                                "input_tensor and include_preprocessing.")
        return _build_naflex(variant, image_size, channels, head, dropout, attention_dropout,
                             approximate_gelu, name, epsilon, drop_path_rate, preprocessing)
    if input_tensor is None:
        shape = (None, None) if dynamic else image_size
        images = x = keras.Input((*shape, channels), name=names.IMAGES)
    else:  # as keras.applications: the model starts at the tensor's own inputs
        images, x = keras.utils.get_source_inputs(input_tensor), input_tensor
    if include_preprocessing:
        # Keras' own layer: a .keras file of this model loads without custom objects.
        # Officially x * (1 / 127.5) - 1: [0, 255] -> [-1, 1], as keras_vit.preprocess_input.
        scale, offset = rescaling_arguments(normalization)
        x = keras.layers.Rescaling(scale, offset=offset, name=names.PREPROCESSING)(x)
    if variant.is_hybrid:
        # The trunk computes what its weights' library computes (ResNetTrunk saves it).
        x = ResNetTrunk(variant.resnet_stages, variant.resnet_width, **(trunk_numerics or {}),
                        name=names.RESNET)(x)
    recorded = None if normalization == OFFICIAL_NORMALIZATION else normalization
    # The resize the weights' source preprocesses with, recorded (None: the official one).
    resize = None if preprocessing in (None, OFFICIAL_PREPROCESSING) else preprocessing.to_config()
    # Any image size: the patches keep their grid, whose shape sizes the position embedding;
    # RoPE reads the grid's shape in every block.
    keep_grid = dynamic or variant.rope is not None
    x = grid = PatchEncoder(variant.width, variant.patch_size, input_normalization=recorded,
                            input_preprocessing=resize,
                            use_bias=variant.patch_bias, flatten=not keep_grid, pad=dynamic,
                            name=names.EMBEDDING)(x)
    if keep_grid:
        x = keras.layers.Reshape((-1, variant.width), name=names.PATCH_TOKENS)(grid)
    if variant.embedding_norm:  # AIMv2: each patch's embedding normalised, then positioned
        x = token_norm(variant.norm, epsilon, names.EMBEDDING_NORM)(x)
    position_embedding = AddPositionEmbedding(
        variant.token_grid(image_size), num_prefix_tokens=variant.position_prefix_tokens,
        dynamic_grid=dynamic, name=names.POSEMBED_INPUT)

    def embed(tokens):
        if not variant.position_embedding:  # DINOv3: RoPE alone
            return tokens
        return position_embedding(tokens, grid=grid) if dynamic else position_embedding(tokens)

    if not variant.embed_prefix_tokens:  # DeiT III, DINOv2 with registers: patches only
        x = embed(x)
    x = _prefix_tokens(variant, x)
    if variant.embed_prefix_tokens:
        x = embed(x)
    x = keras.layers.Dropout(dropout, name=names.EMBEDDING_DROPOUT)(x)
    if variant.pre_norm:  # CLIP: a LayerNorm before the encoder
        x = token_norm(variant.norm, epsilon, names.PRE_NORM)(x)
    for i in range(variant.depth):
        block = TransformerBlock(variant.heads, variant.mlp_dim, dropout=dropout,
                                 attention_dropout=attention_dropout,
                                 approximate_gelu=approximate_gelu, layer_norm_epsilon=epsilon,
                                 drop_path=drop_path_rates(drop_path_rate, variant.depth)[i],
                                 **variant.block_options, name=names.block_name(i))
        # Class-token pooling reads one token of the last block; computing only that one
        # gives the same output for ~7% less work (ViT-B/16). pooling=None keeps them all;
        # a distilled model reads its second token too.
        last = i == variant.depth - 1
        x = block(x, first_token_only=last and head.pooling == "token" and not variant.distilled,
                  grid=grid if variant.rope else None)
    if variant.final_norm and not variant.norm_after_pooling:
        x = token_norm(variant.norm, epsilon, names.ENCODER_NORM)(x)
    if variant.distilled and head.pooling == "token":
        return keras.Model(images, _distilled_head(variant, x, head), name=name)
    return keras.Model(images, _pooled_head(variant, x, head, approximate_gelu, epsilon),
                       name=name)


def _build_naflex(variant, image_size, channels, head, dropout, attention_dropout,
                  approximate_gelu, name, epsilon, drop_path_rate, preprocessing):
    """SigLIP 2 NaFlex: {"patches" (batch, tokens, P * P * C), "grid" (batch, 2)} in
    (keras_vit/layers/naflex.py); padding tokens are masked in every block and the MAP head.
    `image_size` sets the stored position grid, which each image's grid is resized from;
    `preprocessing` (recorded) the interpolation each image is packed with."""
    patches = keras.Input((None, variant.patch_size ** 2 * channels), name=names.PATCHES)
    grid = keras.Input((2,), dtype="int32", name=names.GRID)
    valid = PatchValidity(name=names.PATCH_VALID)(patches, grid)
    recorded = None if preprocessing in (None, OFFICIAL_PREPROCESSING) else \
        preprocessing.to_config()
    x = NaFlexPatchEmbedding(variant.width, variant.patch_size, channels,
                             input_preprocessing=recorded, name=names.EMBEDDING)(patches)
    x = NaFlexPositionEmbedding(variant.token_grid(image_size),
                                name=names.POSEMBED_INPUT)(x, grid)
    x = keras.layers.Dropout(dropout, name=names.EMBEDDING_DROPOUT)(x)
    rates = drop_path_rates(drop_path_rate, variant.depth)
    for i in range(variant.depth):
        x = TransformerBlock(variant.heads, variant.mlp_dim, dropout=dropout,
                             attention_dropout=attention_dropout, approximate_gelu=approximate_gelu,
                             layer_norm_epsilon=epsilon, drop_path=rates[i],
                             **variant.block_options, name=names.block_name(i))(x, valid=valid)
    x = token_norm(variant.norm, epsilon, names.ENCODER_NORM)(x)
    if head.pooling not in ("map", None):
        raise ArgumentError(f'{variant.short_name} pools by its MAP head (pooling="map"), or '
                            'returns every token (pooling=None).')
    inputs = {names.PATCHES: patches, names.GRID: grid}
    return keras.Model(inputs, _pooled_head(variant, x, head, approximate_gelu, epsilon, valid),
                       name=name)


def _pooled_head(variant, x, head, approximate_gelu, epsilon, valid=None):
    """The encoder's tokens -> pooled features, pre_logits and head as `head` says."""
    if head.pooling == "map":
        x = MAPHead(variant.pooling_heads, variant.pooling_mlp_dim, approximate_gelu=approximate_gelu,
                    activation=variant.block_options["activation"], layer_norm_epsilon=epsilon,
                    name=names.MAP_POOL)(x, valid=valid)
    elif head.pooling is not None:
        x = TokenPooling(head.pooling, num_prefix_tokens=variant.num_prefix_tokens,
                         name=names.pooling_name(head.pooling))(x)
    if variant.final_norm and variant.norm_after_pooling and head.pooling is not None:
        # EVA-02: timm's fc_norm
        x = token_norm(variant.norm, epsilon, names.POOLED_NORM)(x)
    if head.include_top:
        if head.representation_size:
            x = keras.layers.Dense(head.representation_size, activation="tanh",
                                   name=names.PRE_LOGITS)(x)
        # Zero-initialised and float32 under mixed precision, as the official head.
        x = keras.layers.Dense(head.classes, kernel_initializer="zeros",
                               activation=head.activation, dtype="float32", name=names.HEAD)(x)
    return x


def drop_path_rates(rate, depth):
    """Each block's stochastic depth rate: linear from 0 (first block) to `rate` (last), as
    timm's `torch.linspace(0, drop_path_rate, depth)`."""
    return [rate * i / (depth - 1) if depth > 1 else 0.0 for i in range(depth)]


def _prefix_tokens(variant, x):
    """Prepends the tokens before the patches, in timm's order: class, distillation,
    registers (each layer prepends, so the last added comes first)."""
    if variant.register_tokens:
        x = PrefixTokens(variant.register_tokens, name=names.REG_TOKEN)(x)
    if variant.distilled:
        x = PrefixTokens(1, name=names.DIST_TOKEN)(x)
    if variant.has_class_token:
        x = ClassToken(name=names.CLS)(x)
    return x


def _distilled_head(variant, tokens, head):
    """DeiT's two heads: "head" on the class token and "head_dist" on the distillation token;
    the model returns their average, as DeiT and timm do at inference. Each head's logits are
    layer outputs (`model.get_layer("head_dist").output`), for a distillation loss in training.
    Without the top, the features are the two tokens' average (timm's `pre_logits`)."""
    prefix = variant.num_prefix_tokens
    cls = TokenPooling("token", num_prefix_tokens=prefix, name=names.TOKEN_POOL)(tokens)
    dist = TokenPooling("distillation", num_prefix_tokens=prefix, name=names.DISTILLATION_POOL)(tokens)
    if not head.include_top:
        return keras.layers.Average(name=names.DISTILLED_FEATURES)([cls, dist])
    if head.representation_size:
        raise ArgumentError("A distilled DeiT has no pre_logits layer; build it with "
                            "representation_size=None.")
    logits = [keras.layers.Dense(head.classes, kernel_initializer="zeros", dtype="float32",
                                 name=layer)(features)
              for layer, features in zip(names.HEADS, (cls, dist))]
    x = keras.layers.Average(name=names.DISTILLED_LOGITS, dtype="float32")(logits)
    if head.activation is not None:
        x = keras.layers.Activation(head.activation, dtype="float32", name=names.PREDICTIONS)(x)
    return x


def _named(variant):
    """`ViT` with the variant fixed, under its own name, showing ViT's full signature."""
    def constructor(weights=None, **kwargs):
        return ViT(variant.name, weights=weights, **kwargs)

    constructor.__name__ = constructor.__qualname__ = variant.constructor_name
    constructor.__doc__ = (f"Builds {variant.name} ({variant.short_name}). Arguments as in "
                           "`keras_vit.ViT`, e.g. `weights=\"imagenet21k\"`, `image_size=384`, "
                           "`classes=5`.")
    parameters = list(inspect.signature(ViT).parameters.values())[1:]  # all but `variant`
    constructor.__signature__ = inspect.Signature(parameters)
    return constructor


# Made from the table, so that a variant added there gets its constructor, its place in every
# `__all__` and (tests/models/test_variants.py checks) its entry in docs/api.md, with nothing else to
# edit. Static analysers do not see names made this way; IDEs and the API page (mkdocstrings
# with force_inspection) read the imported module, which has them.
for _variant in [*VARIANTS.values(), *FAMILIES.values()]:
    if _variant.constructor_name:
        globals()[_variant.constructor_name] = _named(_variant)
del _variant
