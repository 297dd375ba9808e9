"""timm files away from their trained size: keras_vit resizes as timm does. Loaded at another
image size, the position embedding is resized as timm's `create_model(img_size=...,
pretrained=True)` resizes it (its checkpoint filter: antialiased bicubic, bilinear for
FlexiViT); under `dynamic_image_size=True`, as timm's `dynamic_img_size=True` resizes it inside
the forward (antialiased bicubic, FlexiViT too). The reference is timm itself, loading the same
file through its own pretrained path (`pretrained_cfg_overlay={"file": ...}`), so its
per-architecture filter (FlexiViT's `interpolation="bilinear", antialias=False`) is the one run.

Tolerance: relative 1e-4 of the largest output (test_timm_families.py's reasoning).
"""

import dataclasses

import numpy as np
import pytest

import keras_vit
from tests.checkpoints.formats.test_formats import _images, _randomise
from tests.checkpoints.formats.test_timm_families import _assert_close
from tests.oracle import import_timm, run_timm

# Tiny models: two blocks of width 64 and 2 heads; the resize is all that differs between sizes.
TINY = dict(depth=2, embed_dim=64, num_heads=2)
# (timm architecture, its patch): one per family's layout of prefix tokens and position embedding.
FAMILIES = [("deit_small_distilled_patch16_224", 16), ("deit3_small_patch16_224", 16),
            ("vit_small_patch14_dinov2", 14), ("vit_small_patch14_reg4_dinov2", 14),
            ("vit_base_patch16_siglip_224", 16), ("vit_base_patch16_clip_quickgelu_224", 16),
            ("flexivit_small", 16)]
STORED = 4  # the file's grid: 4 x 4 patches
# Two other grids, one square and one not (neither the stored grid nor its transpose).
GRIDS = [(6, 6), (3, 5)]


def _variant(architecture):
    return dataclasses.replace(keras_vit.get_variant(architecture), depth=2, width=64, heads=2,
                               mlp_dim=256)


@pytest.fixture(scope="module", params=FAMILIES, ids=[a for a, _ in FAMILIES])
def timm_file(request, tmp_path_factory):
    """timm's tiny model of the family with random weights, its state dict as safetensors."""
    timm = import_timm()
    import torch
    from safetensors.torch import save_file

    architecture, patch = request.param
    model = timm.create_model(architecture, pretrained=False, img_size=STORED * patch, **TINY)
    _randomise(model, torch)
    path = tmp_path_factory.mktemp("timm") / f"{architecture}.safetensors"
    save_file({k: v.contiguous() for k, v in model.state_dict().items()}, str(path))
    return architecture, patch, model.num_classes, str(path)


def _timm_loaded(architecture, path, **kwargs):
    """timm's model built by timm's own pretrained path from the file (its filter resizing)."""
    timm = import_timm()
    return timm.create_model(architecture, pretrained=True, **TINY, **kwargs,
                             pretrained_cfg_overlay={"file": path, "custom_load": False}).eval()


@pytest.mark.parametrize("grid", GRIDS, ids=[f"{r}x{c}" for r, c in GRIDS])
def test_loaded_at_another_size_is_timms_create_model(timm_file, grid):
    architecture, patch, classes, path = timm_file
    size = (grid[0] * patch, grid[1] * patch)
    theirs = _timm_loaded(architecture, path, img_size=size)
    ours = keras_vit.ViT(_variant(architecture), weights=path, image_size=size,
                         include_top=classes > 0)
    images = _images(2, size)
    _assert_close(np.asarray(ours(images)), run_timm(theirs, images))


def test_dynamic_image_size_is_timms_dynamic_img_size(timm_file):
    architecture, patch, classes, path = timm_file
    theirs = _timm_loaded(architecture, path, img_size=STORED * patch, dynamic_img_size=True)
    ours = keras_vit.ViT(_variant(architecture), weights=path, include_top=classes > 0,
                         dynamic_image_size=True)
    for grid in GRIDS:
        images = _images(2, (grid[0] * patch, grid[1] * patch))
        _assert_close(np.asarray(ours(images)), run_timm(theirs, images))


def test_a_flexivit_file_resizes_bilinearly_at_load_and_bicubically_in_the_call(tmp_path):
    """timm's FlexiViT loads with big_vision's bilinear resize but resizes at run time as every
    timm model does (antialiased bicubic): two different embeddings, which the tests above each
    match, so a FlexiViT loaded at 48 x 80 is not the dynamic one called at 48 x 80."""
    timm = import_timm()
    import torch
    from safetensors.torch import save_file

    model = _randomise(timm.create_model("flexivit_small", pretrained=False, img_size=64,
                                         **TINY), torch)
    path = str(tmp_path / "flexivit.safetensors")
    save_file({k: v.contiguous() for k, v in model.state_dict().items()}, path)
    variant = _variant("flexivit_small")
    loaded = keras_vit.ViT(variant, weights=path, image_size=(48, 80))
    dynamic = keras_vit.ViT(variant, weights=path, dynamic_image_size=True)
    assert dynamic.get_layer("posembed_input").resize == "bicubic"
    images = _images(2, (48, 80))
    expected = np.asarray(loaded(images))
    assert np.abs(np.asarray(dynamic(images)) - expected).max() > 1e-3 * np.abs(expected).max()
