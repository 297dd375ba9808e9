"""The families timm builds with its Eva class (timm/models/eva.py: DINOv3, EVA-02, PE)
from timm's own files: timm builds each with random weights at depth 2, writes its state dict
(safetensors), and keras_vit's model of the same name, loading that file through the timm
format's rows, computes what timm's forward computes, at one size and, through
`dynamic_image_size`, at a size that is not square (RoPE's grid is no longer square).

Tolerance: relative (to the largest output) 1e-4 in float32, as tests/checkpoints/formats/
test_timm_families.py argues for two blocks: rounding gives ~1e-6, while a wrong mapping
(a swapped gate and value, a rotated class token, interleaved for half rotation, a key bias
where timm has none) moves the outputs by 1e-3 or more.
"""

import dataclasses

import numpy as np
import pytest

import keras_vit
from tests.checkpoints.formats.test_formats import _images, _randomise
from tests.checkpoints.formats.test_timm_families import DEPTH, _assert_close, _timm_file
from tests.oracle import import_timm, run_timm

# (timm architecture, image size, keyword arguments for timm): small widths keep them fast;
# each exercises its row's switches (RoPE style, biases, SwiGLU packing, norms).
CASES = [
    ("vit_small_patch16_dinov3", 64, {}),  # RoPE, registers, LayerScale, no qkv bias
    ("vit_small_plus_patch16_dinov3_qkvb", 48, {}),  # query and value biases, split SwiGLU
    # EVA's RoPE on a 4 x 4 grid stretched onto its trained 16 x 16, a position embedding,
    # fused qkv with q_bias and v_bias, packed SwiGLU, the norm after the pooling
    ("eva02_tiny_patch14_224", 56, {}),
    # separate q_proj, k_proj (no bias), v_proj; split SwiGLU with its norm (at width 64)
    ("eva02_base_patch14_224", 56, {"embed_dim": 64, "num_heads": 4}),
    # PE-core at its trained 384 px (RoPE's grid is its trained 24 x 24): EVA's RoPE with
    # indices from 1 and the column first, a class token and a position embedding, the
    # LayerNorm before the encoder, a bias-free patch embedding, attention pooling with 8 heads
    # (of 24, where the encoder's are 3 of 64) and the projection as the head
    ("vit_pe_core_tiny_patch16_384", 384, {}),
    # PE-core G at width 64: no class token, RoPE's indices from 0, the MAP head's MLP (4 D)
    # narrower than the blocks' (8960 / 1536 D)
    ("vit_pe_core_gigantic_patch14_448", 56, {"embed_dim": 64, "num_heads": 4}),
    # PE-spatial: PE-core's stem and RoPE (a 4 x 4 grid stretched onto its trained 32 x 32),
    # mean pooling, and no final norm at all
    ("vit_pe_spatial_tiny_patch16_512", 64, {}),
    # PE-lang G at width 64: no final norm, LayerScale, no class token, indices from 0
    ("vit_pe_lang_gigantic_patch14_448", 56, {"embed_dim": 64, "num_heads": 4}),
]


def _variant(architecture, kwargs):
    """The row at depth 2 and the width timm was built at: its MLPs at timm's ratios (EVA-02's
    SwiGLU 2 x int(8/3 D), PE-core G's int(8960 / 1536 D) and the MAP head's 4 D)."""
    variant = dataclasses.replace(keras_vit.get_variant(architecture), depth=DEPTH)
    if "embed_dim" in kwargs:
        width, ratio = kwargs["embed_dim"], variant.mlp_dim / variant.width
        swiglu = variant.feed_forward != "mlp"
        mlp_dim = 2 * int(width * ratio / 2) if swiglu else int(width * ratio)
        map_mlp_dim = variant.map_mlp_dim and int(width * variant.map_mlp_dim / variant.width)
        variant = dataclasses.replace(variant, width=width, heads=kwargs["num_heads"],
                                      mlp_dim=mlp_dim, map_mlp_dim=map_mlp_dim)
    return variant


def _ours(architecture, path, size, timm_kwargs=None, **kwargs):
    variant = _variant(architecture, timm_kwargs or {})
    return keras_vit.ViT(variant, weights=path, image_size=size, **kwargs)


@pytest.mark.parametrize("architecture,size,kwargs", CASES, ids=[c[0] for c in CASES])
def test_the_family_computes_what_timm_computes(architecture, size, kwargs, tmp_path):
    theirs, path = _timm_file(tmp_path, architecture, size, num_classes=10, **kwargs)
    images = _images(2, (size, size))
    _assert_close(np.asarray(_ours(architecture, path, size, kwargs)(images)),
                  run_timm(theirs, images))
    features = _ours(architecture, path, size, kwargs, include_top=False)
    _assert_close(np.asarray(features(images)), run_timm(theirs, images, features=True))


@pytest.mark.parametrize("architecture,size,kwargs", CASES, ids=[c[0] for c in CASES])
def test_another_size_and_shape_is_timms(architecture, size, kwargs, tmp_path):
    """timm's Eva computes RoPE for the grid of each call (dynamic_img_size), EVA-02's
    position embedding resized bicubically; so does keras_vit's dynamic model, here on an
    image of 2 x 5 patches."""
    theirs, path = _timm_file(tmp_path, architecture, size, num_classes=10,
                              dynamic_img_size=True, **kwargs)
    ours = keras_vit.ViT(_variant(architecture, kwargs), weights=path, image_size=size,
                         dynamic_image_size=True)
    patch = ours.get_layer("embedding").patch_size
    images = _images(2, (2 * patch, 5 * patch))
    _assert_close(np.asarray(ours(images)), run_timm(theirs, images))


@pytest.mark.slow  # full size; the default tests above are the same rows at depth 2
@pytest.mark.parametrize("architecture,size", [("vit_small_plus_patch16_dinov3_qkvb", 256),
                                               ("eva02_small_patch14_224", 224),
                                               ("vit_pe_core_base_patch16_224", 224)])
def test_a_full_size_row_computes_what_timm_computes(architecture, size, tmp_path):
    timm = import_timm()
    import torch
    from safetensors.torch import save_file

    theirs = _randomise(timm.create_model(architecture, pretrained=False, num_classes=10), torch)
    path = str(tmp_path / f"{architecture}.safetensors")
    save_file({k: v.contiguous() for k, v in theirs.state_dict().items()}, path)
    ours = keras_vit.ViT(architecture, weights=path, image_size=size)
    images = _images(2, (size, size))
    _assert_close(np.asarray(ours(images)), run_timm(theirs, images))


def test_a_timm_hub_folder_of_pe_core_loads_through_from_pretrained(tmp_path):
    """A folder as timm's save_for_hf writes one (what hf://timm/vit_pe_core_* holds): its
    config.json names the architecture, so from_pretrained builds the row (RoPE's trained grid
    kept, the grid at the folder's img_size) and loads it with nothing else said."""
    timm = import_timm()
    import torch
    from timm.models._hub import save_for_hf

    theirs = timm.create_model("vit_pe_core_tiny_patch16_384", pretrained=False, depth=DEPTH,
                               img_size=64, num_classes=10)
    _randomise(theirs, torch)
    save_for_hf(theirs, str(tmp_path / "pe"), safe_serialization=True)
    ours = keras_vit.from_pretrained(str(tmp_path / "pe"))
    assert ours.input_shape[1:3] == (64, 64)
    images = _images(2, (64, 64))
    _assert_close(np.asarray(ours(images)), run_timm(theirs, images))
