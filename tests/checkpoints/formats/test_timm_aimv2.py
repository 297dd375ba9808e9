"""AIMv2 from timm's own files: timm builds aimv2_large_patch14_224 (its VisionTransformer with
RmsNorm, a norm on the patch embedding, bias-free projections and SwiGLU, mean pooling) with
random weights at depth 2 and width 64, writes its state dict (safetensors, or a Hub folder by
its own save_for_hf), and keras_vit's row, loading it, computes what timm's forward computes:
at the trained size, and through `dynamic_image_size` on a 2 x 5 patch image (the position
embedding resized as timm resizes it).

Tolerance: relative (to the largest output) 1e-4 in float32, argued in
tests/checkpoints/formats/test_timm_families.py for two blocks (rounding ~1e-6); a wrong
mapping moves the outputs by far more, as the test below that swaps the SwiGLU's gate and
value shows.
"""

import dataclasses

import numpy as np
import pytest

import keras_vit
from tests.checkpoints.formats.test_formats import _images, _randomise
from tests.checkpoints.formats.test_timm_families import DEPTH, _assert_close, _timm_file
from tests.oracle import import_timm, run_timm

ARCHITECTURE, SIZE = "aimv2_large_patch14_224", 56  # a 4 x 4 grid of 14-pixel patches
# width 64 in 4 heads; timm's SwiGLU is int(64 * 2.75) = 176 wide, the row's 2 x 176 packed
NARROW = {"embed_dim": 64, "num_heads": 4}


def _variant():
    return dataclasses.replace(keras_vit.get_variant(ARCHITECTURE), depth=DEPTH, width=64,
                               heads=4, mlp_dim=2 * 176)


def test_aimv2_computes_what_timm_computes(tmp_path):
    theirs, path = _timm_file(tmp_path, ARCHITECTURE, SIZE, num_classes=10, **NARROW)
    images = _images(2, (SIZE, SIZE))
    ours = keras_vit.ViT(_variant(), weights=path, image_size=SIZE)
    _assert_close(np.asarray(ours(images)), run_timm(theirs, images))
    # the features: the final RMSNorm on every token, then their mean (no fc_norm)
    features = keras_vit.ViT(_variant(), weights=path, image_size=SIZE, include_top=False)
    _assert_close(np.asarray(features(images)), run_timm(theirs, images, features=True))


def test_aimv2_at_another_size_and_shape_is_timms(tmp_path):
    theirs, path = _timm_file(tmp_path, ARCHITECTURE, SIZE, num_classes=10,
                              dynamic_img_size=True, **NARROW)
    ours = keras_vit.ViT(_variant(), weights=path, image_size=SIZE, dynamic_image_size=True)
    images = _images(2, (2 * 14, 5 * 14))
    _assert_close(np.asarray(ours(images)), run_timm(theirs, images))


def test_a_timm_hub_folder_of_aimv2_loads_through_from_pretrained(tmp_path):
    """timm's save_for_hf: config.json names the architecture and the model_args it was built
    with; from_pretrained builds that row, with the folder's mean/std (OpenAI CLIP's)."""
    timm = import_timm()
    import torch
    from timm.models._hub import save_for_hf

    args = dict(depth=DEPTH, **NARROW)
    theirs = _randomise(timm.create_model(ARCHITECTURE, pretrained=False, img_size=SIZE,
                                          num_classes=10, **args), torch)
    save_for_hf(theirs, str(tmp_path / "hub"), model_args=dict(args, img_size=SIZE),
                safe_serialization=True)
    with pytest.warns(UserWarning, match=r"mean \(0.481455"):  # the folder's, recorded
        ours = keras_vit.from_pretrained(str(tmp_path / "hub"))
    assert ours.get_layer("embedding_norm").__class__.__name__ == "RMSNormalization"
    images = _images(2, (SIZE, SIZE))
    _assert_close(np.asarray(ours(images)), run_timm(theirs, images))


def test_a_swapped_gate_and_value_is_caught(tmp_path):
    """The bound can fail: the same file with each SwiGLU's gate and value exchanged."""
    theirs, path = _timm_file(tmp_path, ARCHITECTURE, SIZE, num_classes=10, **NARROW)
    ours = keras_vit.ViT(_variant(), weights=path, image_size=SIZE)
    for i in range(DEPTH):
        mlp = ours.get_layer(f"encoderblock_{i}").mlp
        gate, value = mlp.dense_0.kernel.numpy(), mlp.dense_value.kernel.numpy()
        mlp.dense_0.kernel.assign(value)
        mlp.dense_value.kernel.assign(gate)
    images = _images(2, (SIZE, SIZE))
    with pytest.raises(AssertionError, match="relative max difference"):
        _assert_close(np.asarray(ours(images)), run_timm(theirs, images))


@pytest.mark.slow  # full size (300M parameters); the default tests above are the row at depth 2
def test_aimv2_large_at_full_size_computes_what_timm_computes(tmp_path):
    timm = import_timm()
    import torch
    from safetensors.torch import save_file

    theirs = _randomise(timm.create_model(ARCHITECTURE, pretrained=False, num_classes=10), torch)
    path = str(tmp_path / f"{ARCHITECTURE}.safetensors")
    save_file({k: v.contiguous() for k, v in theirs.state_dict().items()}, path)
    ours = keras_vit.ViT(ARCHITECTURE, weights=path)
    images = _images(2, (224, 224))
    _assert_close(np.asarray(ours(images)), run_timm(theirs, images))
