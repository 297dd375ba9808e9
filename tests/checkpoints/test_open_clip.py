"""OpenCLIP (OpenAI CLIP layout) state dicts: written here as .safetensors by inverting timm's
own converter (`timm.models.vision_transformer._convert_openai_clip`), checked with that
converter (timm's model loads the written file strictly and holds exactly the weights it came
from), then read by keras_vit through the open_clip format's rows and compared with timm's
CLIP forward pass (`vit_base_patch16_clip_quickgelu_224`, shrunk).

Tolerance: relative 1e-4, as test_timm_families.py derives it (two float32 implementations
of two blocks: ~1e-6).
"""

import dataclasses

import numpy as np
import pytest
from safetensors.numpy import save_file

import keras_vit
from keras_vit import CheckpointError
from keras_vit.checkpoints.formats import detect_format
from tests.checkpoints.test_formats import _images, _randomise
from tests.checkpoints.test_timm_families import _assert_close
from tests.oracle import import_timm, run_timm

ARCHITECTURE, SIZE, EMBEDDING = "vit_base_patch16_clip_quickgelu_224", 32, 24
# CLIP-B/16 shrunk: 2 blocks of width 64 in 4 heads (MLP 256), a 24-wide projection.
SHRUNK = {"depth": 2, "embed_dim": 64, "num_heads": 4, "num_classes": EMBEDDING}

# timm's names -> open_clip's, the inverse of the swaps in _convert_openai_clip.
_SWAPS = [("patch_embed.proj", "conv1"), ("blocks.", "transformer.resblocks."),
          ("norm_pre", "ln_pre"), ("norm1", "ln_1"), ("norm2", "ln_2"), ("attn.qkv.", "attn.in_proj_"),
          ("attn.proj", "attn.out_proj"), ("mlp.fc1", "mlp.c_fc"), ("mlp.fc2", "mlp.c_proj")]


def _timm_clip():
    return import_timm().create_model(ARCHITECTURE, pretrained=False, img_size=SIZE, **SHRUNK)


def open_clip_arrays(model):
    """timm's CLIP state dict in open_clip's layout (visual.*), beside a stand-in text tower
    with the same block names outside visual., as an open_clip file holds it."""
    out = {}
    for key, value in model.state_dict().items():
        value = value.numpy()
        if key == "head.bias":
            assert not value.any()  # open_clip's projection has no bias
            continue
        if key == "head.weight":
            key, value = "proj", value.T
        elif key == "cls_token":
            key, value = "class_embedding", value.reshape(-1)
        elif key == "pos_embed":
            key, value = "positional_embedding", value[0]
        elif key.startswith("norm."):
            key = key.replace("norm.", "ln_post.")
        for timm_name, open_clip_name in _SWAPS:
            key = key.replace(timm_name, open_clip_name)
        out["visual." + key] = np.ascontiguousarray(value, np.float32)
    rng = np.random.default_rng(7)
    out.update({"token_embedding.weight": rng.standard_normal((10, 8), np.float32),
                "transformer.resblocks.0.ln_1.weight": np.ones(8, np.float32),
                "text_projection": rng.standard_normal((8, 4), np.float32),
                "logit_scale": np.ones((), np.float32)})
    return out


@pytest.fixture(scope="module")
def written(tmp_path_factory):
    theirs = _timm_clip()
    import torch  # after import_timm, which skips without the oracle extra

    theirs = _randomise(theirs, torch)
    with torch.no_grad():
        theirs.head.bias.zero_()  # the projection's (timm's converter makes it zero)
    path = tmp_path_factory.mktemp("open_clip") / "open_clip_model.safetensors"
    save_file(open_clip_arrays(theirs), str(path))
    return theirs, str(path)


def test_timms_converter_reads_the_written_file_back_exactly(written):
    from safetensors.torch import load_file
    from timm.models.vision_transformer import checkpoint_filter_fn

    theirs, path = written
    again = _timm_clip()
    again.load_state_dict(checkpoint_filter_fn(load_file(path), again), strict=True)
    expected = theirs.state_dict()
    for key, value in again.state_dict().items():
        np.testing.assert_array_equal(value.numpy(), expected[key].numpy(), err_msg=key)


def _variant():
    return dataclasses.replace(keras_vit.get_variant(ARCHITECTURE), depth=2, width=64, heads=4,
                               mlp_dim=256)


def test_the_image_tower_computes_what_timm_computes(written):
    theirs, path = written
    assert detect_format(path) == "open_clip"
    images = _images(2, (SIZE, SIZE))
    projected = keras_vit.ViT(_variant(), weights=path, image_size=SIZE)
    assert projected.output_shape == (None, EMBEDDING)  # the projection is the head
    _assert_close(np.asarray(projected(images)), run_timm(theirs, images))
    pooled = keras_vit.ViT(_variant(), weights=path, image_size=SIZE, include_top=False)
    _assert_close(np.asarray(pooled(images)), run_timm(theirs, images, features=True))


def _rewrite(path, tmp_path, change):
    from safetensors.numpy import load_file

    arrays = load_file(path)
    change(arrays)
    out = tmp_path / "changed.safetensors"
    save_file(arrays, str(out))
    return str(out)


@pytest.mark.parametrize("change, named", [
    (lambda a: a.pop("visual.transformer.resblocks.1.attn.in_proj_bias"),
     "Transformer/encoderblock_1/MultiHeadDotProductAttention_1/query/bias"),
    (lambda a: a.update({"visual.attn_pool.query": np.zeros((1, 64), np.float32)}),
     "open_clip:visual.attn_pool.query"),
], ids=["missing", "unexpected"])
def test_a_partial_or_foreign_tower_is_refused_naming_the_key(written, tmp_path, change, named):
    path = _rewrite(written[1], tmp_path, change)
    with pytest.raises(CheckpointError, match=named):
        keras_vit.ViT(_variant(), weights=path, image_size=SIZE)


def test_the_row_table_serves_both_directions():
    """official -> open_clip -> official is the identity on a CLIP layout (class token, pre-norm,
    a bias-free projection head); a head with a bias has no place in open_clip's layout."""
    from keras_vit.checkpoints.formats.open_clip import (
        official_to_open_clip,
        open_clip_to_official,
    )
    from keras_vit.checkpoints.layout import (
        EMBEDDING_BIAS,
        HEAD_BIAS_KEY,
        PRE_NORM_BIAS,
        PRE_NORM_SCALE,
    )
    from keras_vit.errors import ArgumentError
    from tests.checkpoints.test_row_tables import HEADS, D, assert_same, official_vit

    official = official_vit()
    del official[EMBEDDING_BIAS]  # CLIP's patch embedding has no bias
    official[HEAD_BIAS_KEY] = np.zeros_like(official[HEAD_BIAS_KEY])
    official[PRE_NORM_SCALE] = np.ones(D, np.float32)
    official[PRE_NORM_BIAS] = np.zeros(D, np.float32)
    written = official_to_open_clip(official)
    assert written["visual.class_embedding"].shape == (D,)
    assert written["visual.transformer.resblocks.1.attn.in_proj_weight"].shape == (3 * D, D)
    assert_same(open_clip_to_official(written, heads=HEADS), official)
    official[HEAD_BIAS_KEY] = official[HEAD_BIAS_KEY] + 1
    with pytest.raises(ArgumentError, match="no bias"):
        official_to_open_clip(official)
