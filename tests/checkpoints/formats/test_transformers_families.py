"""The families from transformers `save_pretrained` folders: transformers builds each model
with a small config (width 32, 2 blocks, 2 heads, 8-pixel patches on 32 pixels) and random
weights, saves it, and keras_vit's model of the family, loading that folder through the
`transformers_families` rows, computes what transformers' own forward computes.

Tolerance: relative (to the largest output) 1e-4 in float32, the issue's bound. Two float32
implementations of the same two blocks differ by rounding, ~1e-7 relative per operation over
sums of at most a few hundred terms here (measured below 1e-6), so 1e-4 leaves two orders of
magnitude, while a wrong mapping (a transposed kernel, the registers' position, tanh for erf
GELU, a missing LayerScale or epsilon 1e-12 for 1e-6 on these unit-scale activations... the
last moves ~1e-6 alone, so the epsilon is asserted on the layers instead) moves 1e-3 or more.
"""

import dataclasses

import numpy as np
import pytest

import keras_vit
from keras_vit.checkpoints.formats import inspect_checkpoint, read_checkpoint
from keras_vit.checkpoints.formats.transformers_families import family_to_official
from keras_vit.checkpoints.layout import official_arrays
from tests.checkpoints.formats.test_formats import _images, _randomise, _torch
from tests.checkpoints.formats.test_open_clip_timm_trunk import randomise_clip
from tests.checkpoints.formats.writers import official_to_family

RELATIVE_TOLERANCE = 1e-4
SMALL = dict(hidden_size=32, num_hidden_layers=2, num_attention_heads=2, intermediate_size=64,
             image_size=32, patch_size=8)


def _assert_close(ours, theirs):
    assert ours.shape == theirs.shape
    assert np.abs(theirs).max() > 0.1  # a loaded model, not zeros
    relative = np.abs(ours - theirs).max() / np.abs(theirs).max()
    assert relative <= RELATIVE_TOLERANCE, f"relative max difference {relative:.2e}"


def saved_by_transformers(folder, model_class, config_class, **config):
    """(transformers' `model_class` of `config` with random weights, saved in `folder` by
    transformers itself, torch)."""
    torch = _torch()
    import transformers

    model = getattr(transformers, model_class)(getattr(transformers, config_class)(**config))
    _randomise(model.eval(), torch)
    model.save_pretrained(str(folder))
    return model, torch


def _saved(tmp_path, model_class, config_class, **extra):
    """transformers' model with random weights at SMALL, saved by transformers itself."""
    directory = tmp_path / model_class
    model, torch = saved_by_transformers(directory, model_class, config_class,
                                         **{**SMALL, **extra})
    return model, torch, str(directory)


def _run(model, torch, images, output):
    with torch.no_grad():
        out = model(pixel_values=torch.from_numpy(images.transpose(0, 3, 1, 2).copy()))
    return out[output].numpy() if isinstance(output, str) else output(out).numpy()


def _variant(row, **fields):
    """The family row at the small config's sizes (written here, not read from the folder)."""
    return dataclasses.replace(keras_vit.get_variant(row), width=32, depth=2, heads=2,
                               patch_size=8, image_size=32, **fields)


def _mean_of_two_tokens(out):
    return (out.last_hidden_state[:, 0] + out.last_hidden_state[:, 1]) / 2


# (transformers model, its config, config extras, keras_vit row and the sizes transformers
# gives it, include_top, which transformers output the model's output is).
CASES = [
    ("DeiTForImageClassificationWithTeacher", "DeiTConfig", dict(num_labels=5),
     _variant("DeiT-S/16-distilled", mlp_dim=64), True, "logits"),
    # One classifier on the class token, the distillation token still in the sequence.
    ("DeiTForImageClassification", "DeiTConfig", dict(num_labels=5),
     _variant("DeiT-S/16-distilled", mlp_dim=64), True, "logits"),
    ("DeiTModel", "DeiTConfig", {}, _variant("DeiT-S/16-distilled", mlp_dim=64), False,
     _mean_of_two_tokens),
    ("Dinov2Model", "Dinov2Config", dict(layer_norm_eps=1e-5),
     _variant("DINOv2-S/14", mlp_dim=128), False, "pooler_output"),
    ("Dinov2WithRegistersModel", "Dinov2WithRegistersConfig", {},
     _variant("DINOv2-S/14-reg4", mlp_dim=128), False, "pooler_output"),
    ("SiglipVisionModel", "SiglipVisionConfig", {}, _variant("SigLIP-B/16", mlp_dim=64), False,
     "pooler_output"),
    ("CLIPVisionModel", "CLIPVisionConfig", {}, _variant("CLIP-B/16", mlp_dim=64), False,
     "pooler_output"),
    ("CLIPVisionModelWithProjection", "CLIPVisionConfig", dict(projection_dim=16),
     _variant("CLIP-B/16", mlp_dim=64), True, "image_embeds"),
]


@pytest.mark.parametrize("model_class,config_class,extra,variant,include_top,output", CASES,
                         ids=[c[0] for c in CASES])
def test_the_family_computes_what_transformers_computes(model_class, config_class, extra,
                                                        variant, include_top, output, tmp_path):
    theirs, torch, directory = _saved(tmp_path, model_class, config_class, **extra)
    ours = keras_vit.ViT(variant, weights=directory, include_top=include_top)
    images = _images(2, (32, 32))
    _assert_close(np.asarray(ours(images)), _run(theirs, torch, images, output))
    # The numerics are the config's: its epsilon, its GELU form.
    config = theirs.config
    block = ours.get_layer("encoderblock_0")
    assert block.norm_0.epsilon == ours.get_layer("encoder_norm").epsilon == config.layer_norm_eps
    if config.hidden_act != "quick_gelu":
        assert block.mlp.approximate_gelu == (config.hidden_act == "gelu_pytorch_tanh")


def test_the_processor_normalisation_is_the_models(tmp_path):
    """preprocessor_config.json's mean/std (here not CLIP's own) is what include_preprocessing
    computes: [0, 255] pixels into keras_vit equal the processor's arithmetic into CLIP."""
    from transformers import CLIPImageProcessor

    theirs, torch, directory = _saved(tmp_path, "CLIPVisionModel", "CLIPVisionConfig")
    mean, std = (0.2, 0.4, 0.6), (0.3, 0.2, 0.1)
    CLIPImageProcessor(image_mean=list(mean), image_std=list(std)).save_pretrained(directory)
    assert inspect_checkpoint(directory).normalization == (mean, std)
    ours = keras_vit.ViT(_variant("CLIP-B/16", mlp_dim=64), weights=directory,
                         include_top=False, include_preprocessing=True)
    pixels = np.random.default_rng(0).uniform(0, 255, (2, 32, 32, 3)).astype(np.float32)
    normalised = ((pixels / 255 - np.array(mean)) / np.array(std)).astype(np.float32)
    _assert_close(np.asarray(ours(pixels)), _run(theirs, torch, normalised, "pooler_output"))


@pytest.mark.parametrize("model_type,model_class,config_class,extra,row,mlp", [
    ("deit", "DeiTForImageClassificationWithTeacher", "DeiTConfig", dict(num_labels=5),
     "DeiT-S/16-distilled", 64),
    ("dinov2_with_registers", "Dinov2WithRegistersModel", "Dinov2WithRegistersConfig", {},
     "DINOv2-S/14-reg4", 128),
    ("siglip_vision_model", "SiglipVisionModel", "SiglipVisionConfig", {}, "SigLIP-B/16", 64),
    ("clip_vision_model", "CLIPVisionModelWithProjection", "CLIPVisionConfig",
     dict(projection_dim=16), "CLIP-B/16", 64),
])
def test_official_to_transformers_to_official_is_identity(model_type, model_class, config_class,
                                                          extra, row, mlp, tmp_path):
    """The same rows write the transformers keys back: every official array of a loaded model
    goes out and comes back bit for bit, and the keys written are the keys transformers saved
    (DINOv2's mask_token aside, which inference never reads)."""
    from safetensors import safe_open

    _, _, directory = _saved(tmp_path, model_class, config_class, **extra)
    headed = model_type in ("deit", "clip_vision_model")  # the others are saved headless
    model = keras_vit.ViT(_variant(row, mlp_dim=mlp), weights=directory, include_top=headed)
    arrays = official_arrays(model)
    written = official_to_family(model_type, arrays)
    with safe_open(f"{directory}/model.safetensors", "np") as f:
        saved = {k.removeprefix("deit.").removeprefix("vision_model.") for k in f.keys()}
    assert set(written) == saved - {"embeddings.mask_token"}
    back = family_to_official(model_type, written, heads=2)
    assert set(back) == set(arrays)
    for key, array in arrays.items():
        np.testing.assert_array_equal(back[key].reshape(array.shape), array, err_msg=key)
    # And the folder's own arrays agree with the model's, as read.
    stored = read_checkpoint(directory, heads=2)
    for key, array in arrays.items():
        np.testing.assert_array_equal(stored[key].reshape(array.shape), array, err_msg=key)


def test_the_configs_activation_is_checked_against_the_variants(tmp_path):
    """OpenCLIP's towers on the Hub are CLIPVisionModels with hidden_act "gelu": the
    QuickGELU row refuses the folder (shapes cannot show it), and a GELU CLIP computes it."""
    theirs, torch, directory = _saved(tmp_path, "CLIPVisionModel", "CLIPVisionConfig",
                                      hidden_act="gelu")
    with pytest.raises(keras_vit.CheckpointError, match="computed with gelu; .* quick_gelu"):
        keras_vit.ViT(_variant("CLIP-B/16", mlp_dim=64), weights=directory, include_top=False)
    ours = keras_vit.ViT(_variant("CLIP-B/16", mlp_dim=64, activation="gelu"), weights=directory,
                         include_top=False)
    images = _images(2, (32, 32))
    _assert_close(np.asarray(ours(images)), _run(theirs, torch, images, "pooler_output"))


# Two-tower models: a one-block text tower beside the image tower, which keras_vit leaves.
_TEXT = dict(hidden_size=16, num_hidden_layers=1, num_attention_heads=2, intermediate_size=32,
             vocab_size=64, max_position_embeddings=16)


@pytest.mark.parametrize("model_class,config_class,row,include_top", [
    ("CLIPModel", "CLIPConfig", "CLIP-B/16", True),
    ("SiglipModel", "SiglipConfig", "SigLIP-B/16", False),
])
def test_a_two_tower_folder_loads_its_image_tower(model_class, config_class, row, include_top,
                                                  tmp_path):
    """CLIPModel and SiglipModel as save_pretrained writes them: the image tower (CLIP's
    projection as the head) computes transformers' image features."""
    extra = dict(projection_dim=16) if model_class == "CLIPModel" else {}
    torch = _torch()
    import transformers

    config = getattr(transformers, config_class)(text_config=_TEXT, vision_config=SMALL, **extra)
    theirs = randomise_clip(getattr(transformers, model_class)(config), torch)  # logit_scale
    theirs.save_pretrained(str(tmp_path))
    assert inspect_checkpoint(str(tmp_path)).format == "transformers_families"
    images = _images(2, (32, 32))
    with torch.no_grad():
        pooled = theirs.vision_model(
            pixel_values=torch.from_numpy(images.transpose(0, 3, 1, 2).copy())).pooler_output
        expected = (theirs.visual_projection(pooled) if include_top else pooled).numpy()
    ours = keras_vit.ViT(_variant(row, mlp_dim=64), weights=str(tmp_path),
                         include_top=include_top, **(dict(classes=16) if include_top else {}))
    _assert_close(np.asarray(ours(images)), expected)


def _normed_tokens(model, out):
    """The whole normalised token sequence: CLIP norms only its pooled token, the rest their
    sequence."""
    if hasattr(model, "post_layernorm") and not hasattr(model, "head"):
        return model.post_layernorm(out.last_hidden_state).detach()
    return out.last_hidden_state


@pytest.mark.parametrize("model_class,config_class,extra,variant", [
    (c[0], c[1], c[2], c[3]) for c in CASES if c[0] in (
        "DeiTModel", "Dinov2Model", "Dinov2WithRegistersModel", "SiglipVisionModel",
        "CLIPVisionModel")])
def test_pooling_none_gives_every_familys_tokens(model_class, config_class, extra, variant,
                                                 tmp_path):
    """pooling=None: the whole normalised token sequence, SigLIP's MAP head left unread."""
    theirs, torch, directory = _saved(tmp_path, model_class, config_class, **extra)
    ours = keras_vit.ViT(variant, weights=directory, include_top=False, pooling=None)
    images = _images(2, (32, 32))
    model = getattr(theirs, "vision_model", theirs)
    expected = _run(theirs, torch, images, lambda out: _normed_tokens(model, out))
    _assert_close(np.asarray(ours(images)), expected)


def test_dinov2_for_image_classification_loads_its_backbone_and_refuses_its_head(tmp_path):
    """Its classifier reads the class token beside the mean of the patch tokens, which no
    keras_vit head computes: the backbone is exact, a load with a head is refused in one line
    (never a zero head in its place)."""
    theirs, torch, directory = _saved(tmp_path, "Dinov2ForImageClassification", "Dinov2Config",
                                      num_labels=5)
    variant = _variant("DINOv2-S/14", mlp_dim=128)
    images = _images(2, (32, 32))
    with torch.no_grad():
        expected = theirs.dinov2(
            pixel_values=torch.from_numpy(images.transpose(0, 3, 1, 2).copy())).pooler_output
    ours = keras_vit.ViT(variant, weights=directory, include_top=False)
    _assert_close(np.asarray(ours(images)), expected.numpy())
    with pytest.raises(keras_vit.CheckpointError, match="class token beside the mean") as raised:
        keras_vit.ViT(variant, weights=directory, classes=5)
    assert "\n" not in str(raised.value) and "include_top=False" in str(raised.value)


def test_dinov2_with_zero_registers_is_dinov2(tmp_path):
    theirs, torch, directory = _saved(tmp_path, "Dinov2WithRegistersModel",
                                      "Dinov2WithRegistersConfig", num_register_tokens=0)
    info = inspect_checkpoint(directory)
    assert info.variant.register_tokens == 0
    ours = keras_vit.ViT(_variant("DINOv2-S/14", mlp_dim=128), weights=directory,
                         include_top=False)
    images = _images(2, (32, 32))
    _assert_close(np.asarray(ours(images)), _run(theirs, torch, images, "pooler_output"))
