"""transformers folders away from their trained size: keras_vit resizes the position embedding
as each model's own `interpolate_pos_encoding` does (torch's bicubic without antialiasing for
ViT, DeiT, DINOv2, SigLIP and CLIP; with it for DINOv2 with registers), both when the folder is
loaded at another image size and, with `dynamic_image_size=True`, inside the call. The reference
is transformers' forward with `interpolate_pos_encoding=True` (DINOv2 always interpolates).

Tolerance: relative 1e-4 of the largest output (test_transformers_families.py's reasoning); the
linear zoom keras_vit used before, or torch's other bicubic, moves these outputs by more than
1e-3 of it (the last test).
"""

import dataclasses
import inspect

import numpy as np
import pytest

import keras_vit
from keras_vit.checkpoints.formats import read_checkpoint
from tests.checkpoints.formats.test_formats import _images, _randomise, _torch
from tests.checkpoints.formats.test_transformers_families import (
    CASES,
    _assert_close,
    _saved,
)

# The small config's 32 pixels (a 4 x 4 grid of 8-pixel patches) at one larger square size and
# one non-square one, each grid neither the stored one nor its transpose.
SIZES = [(48, 48), (40, 64)]
# One case per model type (the heads are the same resize): the model, its config, extras, the row,
# include_top and the output compared.
_PLAIN = ("ViTModel", "ViTConfig", {},
          dataclasses.replace(keras_vit.get_variant("B/16"), width=32, depth=2, heads=2,
                              mlp_dim=64, patch_size=8, name="tiny"),
          False, lambda out: out.last_hidden_state[:, 0])
MODEL_TYPES = [_PLAIN] + [c for c in CASES if c[0] in (
    "DeiTForImageClassificationWithTeacher", "Dinov2Model", "Dinov2WithRegistersModel",
    "SiglipVisionModel", "CLIPVisionModel")]


def _theirs(model, torch, images, output):
    """transformers' forward at the images' size, its position embedding interpolated."""
    kwargs = {}
    if "interpolate_pos_encoding" in inspect.signature(model.forward).parameters:
        kwargs["interpolate_pos_encoding"] = True
    with torch.no_grad():
        out = model(pixel_values=torch.from_numpy(images.transpose(0, 3, 1, 2).copy()), **kwargs)
    return out[output].numpy() if isinstance(output, str) else output(out).numpy()


@pytest.fixture(scope="module", params=MODEL_TYPES, ids=[c[0] for c in MODEL_TYPES])
def saved(request, tmp_path_factory):
    model_class, config_class, extra, variant, include_top, output = request.param
    theirs, torch, directory = _saved(tmp_path_factory.mktemp("resize"), model_class,
                                      config_class, **extra)
    return theirs, torch, directory, variant, include_top, output


@pytest.mark.parametrize("size", SIZES, ids=[f"{h}x{w}" for h, w in SIZES])
def test_loaded_at_another_size_is_transformers_interpolation(saved, size):
    theirs, torch, directory, variant, include_top, output = saved
    ours = keras_vit.ViT(variant, weights=directory, include_top=include_top, image_size=size)
    images = _images(2, size)
    _assert_close(np.asarray(ours(images)), _theirs(theirs, torch, images, output))


def test_dynamic_image_size_is_transformers_interpolation(saved):
    theirs, torch, directory, variant, include_top, output = saved
    ours = keras_vit.ViT(variant, weights=directory, include_top=include_top,
                         dynamic_image_size=True)
    for size in SIZES:
        images = _images(2, size)
        _assert_close(np.asarray(ours(images)), _theirs(theirs, torch, images, output))


def test_the_other_resizes_are_not_transformers(saved):
    """The tests above can fail: the same weights resized by timm's antialiased bicubic (what
    keras_vit did before for every source under dynamic_image_size) or the official linear
    zoom differ from transformers' output by more than the bound, for every model type but
    DINOv2 with registers, whose transformers code resizes as timm does."""
    theirs, torch, directory, variant, include_top, output = saved
    size = SIZES[1]
    images = _images(2, size)
    expected = _theirs(theirs, torch, images, output)
    ours = keras_vit.ViT(variant, weights=directory, include_top=include_top, image_size=size)
    posembed = ours.get_layer("posembed_input")
    own = posembed.resize
    assert own == ("bicubic" if theirs.config.model_type == "dinov2_with_registers"
                   else "torch_bicubic")
    stored = read_checkpoint(directory, heads=variant.heads)[
        "Transformer/posembed_input/pos_embedding"]
    prefix = posembed.num_prefix_tokens
    grid = int(round((stored.shape[1] - prefix) ** 0.5))
    for other in ("linear", "torch_bicubic", "bicubic"):
        if other == own:
            continue
        posembed.pos_embedding.assign(keras_vit.resize_position_embedding(
            stored, grid, posembed.grid_size, prefix, method=other))
        difference = np.abs(np.asarray(ours(images)) - expected).max()
        assert difference > 1e-3 * np.abs(expected).max(), other


def test_a_saved_model_keeps_resizing_as_its_source(tmp_path):
    """The resize is the model's config: a .keras copy of a dynamic model loaded from a
    transformers folder still resizes by transformers' bicubic, not the layer's default."""
    import keras

    model_class, config_class, extra, variant, include_top, output = _PLAIN
    theirs, torch, directory = _saved(tmp_path, model_class, config_class, **extra)
    ours = keras_vit.ViT(variant, weights=directory, include_top=include_top,
                         dynamic_image_size=True)
    path = str(tmp_path / "dynamic.keras")
    ours.save(path)
    reloaded = keras.saving.load_model(path)
    assert reloaded.get_layer("posembed_input").resize == "torch_bicubic"
    images = _images(2, SIZES[1])
    _assert_close(np.asarray(reloaded(images)), _theirs(theirs, torch, images, output))


@pytest.mark.slow  # full size; the default tests above run the same resize on the small config
@pytest.mark.parametrize("model_class,config_class", [
    ("SiglipVisionModel", "SiglipVisionConfig"), ("Dinov2Model", "Dinov2Config")])
def test_a_full_size_model_at_another_size_is_transformers(model_class, config_class, tmp_path):
    """transformers' default configs (SigLIP-B/16 at 224, DINOv2-B/14 at 518 pixels) at a
    non-square size, through from_pretrained, as a user loads them."""
    torch = _torch()
    import transformers

    theirs = getattr(transformers, model_class)(getattr(transformers, config_class)()).eval()
    _randomise(theirs, torch)
    theirs.save_pretrained(str(tmp_path / model_class))
    patch = theirs.config.patch_size
    size = (12 * patch, 20 * patch)
    ours = keras_vit.from_pretrained(str(tmp_path / model_class), include_top=False,
                                     image_size=size)
    images = _images(1, size)
    _assert_close(np.asarray(ours(images)), _theirs(theirs, torch, images, "pooler_output"))
