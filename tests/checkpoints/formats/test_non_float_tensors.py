"""A weight stored as an integer, unsigned, bool or complex tensor is refused, naming it, in a
.safetensors file (timm's layout) and in a pickled .pth (DINOv2's release layout): the
header reports the stored dtype, so the loader's check of non-float arrays sees it, before
anything is assigned. A float tensor stored in half precision still loads."""

import dataclasses

import numpy as np
import pytest

import keras_vit
from keras_vit.checkpoints.formats.safetensors import read_safetensors, write_safetensors
from keras_vit.checkpoints.layout import official_arrays
from tests.checkpoints.formats.writers import official_to_dinov2

KEY = "blocks.0.attn.qkv.bias"  # stored under this name in both layouts
OFFICIAL = "Transformer/encoderblock_0/MultiHeadDotProductAttention_1/query/bias"


def _demo_safetensors(tmp_path, dtype):
    model = keras_vit.ViT("demo", image_size=16, classes=3)
    path = str(tmp_path / "timm.safetensors")
    keras_vit.save_safetensors(model, path)
    arrays = read_safetensors(path)
    arrays[KEY] = np.ones(arrays[KEY].shape, dtype)
    write_safetensors(arrays, path)
    return path


@pytest.mark.parametrize("dtype", [np.int32, np.int64, np.uint8, np.bool_, np.float16],
                         ids=lambda d: np.dtype(d).name)
def test_a_safetensors_weight_that_is_no_float_is_refused_by_name(tmp_path, dtype):
    path = _demo_safetensors(tmp_path, dtype)

    def build():
        return keras_vit.ViT("demo", image_size=16, classes=3, approximate_gelu=True,
                             layer_norm_epsilon=1e-6, weights=path)
    if np.issubdtype(dtype, np.floating):  # half precision is a float: widened and loaded
        build()
        return
    with pytest.raises(keras_vit.CheckpointError, match="non-float arrays") as raised:
        build()
    assert OFFICIAL in str(raised.value) and np.dtype(dtype).name in str(raised.value)


@pytest.mark.parametrize("dtype", ["int64", "uint8", "bool", "complex64"])
def test_a_pth_weight_that_is_no_float_is_refused_by_name(tmp_path, dtype):
    torch = pytest.importorskip("torch")
    variant = dataclasses.replace(keras_vit.get_variant("DINOv2-S/14"), depth=1, width=32,
                                  heads=2, mlp_dim=128, image_size=28)
    state = {k: torch.from_numpy(np.ascontiguousarray(v)) for k, v in
             official_to_dinov2(official_arrays(keras_vit.ViT(variant,
                                                              include_top=False))).items()}
    state[KEY] = torch.ones(state[KEY].shape, dtype=getattr(torch, dtype))
    path = str(tmp_path / "release.pth")
    torch.save(state, path)
    with pytest.raises(keras_vit.CheckpointError, match="non-float arrays") as raised:
        keras_vit.ViT(variant, include_top=False, weights=path)
    assert OFFICIAL in str(raised.value) and dtype in str(raised.value)
