"""Each format's row table serves both directions: official -> source -> official is the
identity on a random official-layout checkpoint (every key, every array bit for bit)."""

import numpy as np
import pytest

from keras_vit.checkpoints.formats.base import shape_stand_ins
from keras_vit.checkpoints.formats.keras_hub import keras_hub_to_official
from keras_vit.checkpoints.formats.rows import KeyRow, from_official, to_official
from keras_vit.checkpoints.formats.timm import official_to_timm, timm_to_official
from keras_vit.checkpoints.formats.transformers import transformers_to_official
from keras_vit.checkpoints.formats.transformers_hybrid import vit_hybrid_to_official
from keras_vit.checkpoints.layout import (
    CLS_KEY,
    EMBEDDING_BIAS,
    EMBEDDING_KERNEL,
    ENCODER_NORM_BIAS,
    ENCODER_NORM_SCALE,
    HEAD_BIAS_KEY,
    HEAD_KERNEL_KEY,
    KEY_BIAS,
    KEY_KERNEL,
    LN0_BIAS,
    LN0_SCALE,
    LN2_BIAS,
    LN2_SCALE,
    MLP0_BIAS,
    MLP0_KERNEL,
    MLP1_BIAS,
    MLP1_KERNEL,
    OUT_BIAS,
    OUT_KERNEL,
    POS_EMBED_KEY,
    PRE_LOGITS_BIAS_KEY,
    PRE_LOGITS_KERNEL_KEY,
    QUERY_BIAS,
    QUERY_KERNEL,
    TRUNK_ROOT_BIAS,
    TRUNK_ROOT_KERNEL,
    TRUNK_ROOT_SCALE,
    UNIT_CONV_KERNEL,
    UNIT_NORM,
    UNIT_PARTS,
    VALUE_BIAS,
    VALUE_KERNEL,
)
from keras_vit.errors import ArgumentError
from tests.checkpoints.formats.writers import (
    official_to_keras_hub,
    official_to_transformers,
    official_to_vit_hybrid,
)

# A small ViT: width 8 in 2 heads, MLP 16, 2 blocks, patch 4, a 2 x 2 grid plus the class token.
D, HEADS, MLP, DEPTH, PATCH, TOKENS, CLASSES, PRE = 8, 2, 16, 2, 4, 5, 3, 6


def official_vit(seed=0, pre_logits=False):
    """Random arrays of every official ViT key, in the released shapes."""
    rng = np.random.default_rng(seed)
    hd = D // HEADS
    shapes = {EMBEDDING_KERNEL: (PATCH, PATCH, 3, D), EMBEDDING_BIAS: (D,),
              CLS_KEY: (1, 1, D), POS_EMBED_KEY: (1, TOKENS, D),
              ENCODER_NORM_SCALE: (D,), ENCODER_NORM_BIAS: (D,),
              HEAD_KERNEL_KEY: (PRE if pre_logits else D, CLASSES), HEAD_BIAS_KEY: (CLASSES,)}
    if pre_logits:
        shapes.update({PRE_LOGITS_KERNEL_KEY: (D, PRE), PRE_LOGITS_BIAS_KEY: (PRE,)})
    block = {LN0_SCALE: (D,), LN0_BIAS: (D,), LN2_SCALE: (D,), LN2_BIAS: (D,),
             QUERY_KERNEL: (D, HEADS, hd), KEY_KERNEL: (D, HEADS, hd),
             VALUE_KERNEL: (D, HEADS, hd), QUERY_BIAS: (HEADS, hd), KEY_BIAS: (HEADS, hd),
             VALUE_BIAS: (HEADS, hd), OUT_KERNEL: (HEADS, hd, D), OUT_BIAS: (D,),
             MLP0_KERNEL: (D, MLP), MLP0_BIAS: (MLP,), MLP1_KERNEL: (MLP, D),
             MLP1_BIAS: (D,)}
    for i in range(DEPTH):
        shapes.update({key.format(i=i): shape for key, shape in block.items()})
    return {k: rng.standard_normal(s).astype(np.float32) for k, s in shapes.items()}


def official_hybrid(seed=1):
    """`official_vit` behind a two-stage trunk (one unit each), GroupNorms as (C,)."""
    rng = np.random.default_rng(seed)
    arrays = official_vit(seed)
    arrays[EMBEDDING_KERNEL] = rng.standard_normal((1, 1, 32, D)).astype(np.float32)
    shapes = {TRUNK_ROOT_KERNEL: (7, 7, 3, 8), TRUNK_ROOT_SCALE: (8,), TRUNK_ROOT_BIAS: (8,)}
    for s, (cin, width) in enumerate(((8, 4), (16, 8)), start=1):
        for (conv, norm), (kh, i, o) in zip(UNIT_PARTS, ((1, cin, width), (3, width, width),
                                                           (1, width, 4 * width), (1, cin, 4 * width))):
            scale, bias = (key.format(s=s, u=1) for key in UNIT_NORM[norm])
            shapes.update({UNIT_CONV_KERNEL[conv].format(s=s, u=1): (kh, kh, i, o), scale: (o,),
                           bias: (o,)})
    arrays.update({k: rng.standard_normal(s).astype(np.float32) for k, s in shapes.items()})
    return arrays


def assert_same(found, expected):
    assert sorted(found) == sorted(expected)
    for key, array in expected.items():
        assert found[key].shape == array.shape, key
        np.testing.assert_array_equal(found[key], array, err_msg=key)


@pytest.mark.parametrize("name, official, write, read, source_keys", [
    ("timm", official_vit(), official_to_timm, timm_to_official,
     {"blocks.1.attn.qkv.weight": (3 * D, D), "patch_embed.proj.weight": (D, 3, PATCH, PATCH),
      "head.weight": (CLASSES, D)}),
    ("transformers", official_vit(pre_logits=True), official_to_transformers,
     transformers_to_official,
     {"encoder.layer.1.attention.attention.query.weight": (D, D), "pooler.dense.weight": (PRE, D),
      "embeddings.patch_embeddings.projection.weight": (D, 3, PATCH, PATCH)}),
    ("transformers_hybrid", official_hybrid(), official_to_vit_hybrid, vit_hybrid_to_official,
     {"embeddings.patch_embeddings.backbone.bit.encoder.stages.1.layers.0.downsample.conv.weight":
      (32, 16, 1, 1), "embeddings.patch_embeddings.backbone.bit.embedder.convolution.weight":
      (8, 3, 7, 7)}),
    ("keras_hub", official_vit(pre_logits=True), official_to_keras_hub, keras_hub_to_official,
     {"vit_encoder/transformer_block_2/mha/query/kernel": (D, HEADS, D // HEADS),
      "vit_patching_and_embedding/position_embedding/embeddings": (TOKENS, D),
      "predictions/kernel": (PRE, CLASSES)}),
])
def test_official_to_source_to_official_is_the_identity(name, official, write, read, source_keys):
    source = write(official)
    # The source side is the format's own layout, not the official keys passed along (keras-hub
    # alone names its pre_logits as the official file does).
    shared = {PRE_LOGITS_KERNEL_KEY, PRE_LOGITS_BIAS_KEY} if name == "keras_hub" else set()
    assert set(source) & set(official) == shared
    assert len(source) <= len(official)
    for key, shape in source_keys.items():
        assert source[key].shape == shape, key
    back = read(source, heads=HEADS) if name != "keras_hub" else read(source)
    assert_same(back, official)


def test_a_source_key_no_row_takes_is_passed_on_for_the_loader_to_name():
    arrays = official_to_timm(official_vit())
    # A query-key-normalised ViT (timm's qk_norm): no row of this layout takes it.
    arrays["blocks.0.attn.q_norm.weight"] = np.ones(D // HEADS, np.float32)
    back = timm_to_official(arrays, heads=HEADS)
    assert "timm:blocks.0.attn.q_norm.weight" in back


def test_an_official_key_a_format_has_no_place_for_is_refused_on_writing():
    arrays = official_vit(pre_logits=True)
    with pytest.raises(ArgumentError, match="no pre_logits"):
        official_to_timm(arrays)
    del arrays[PRE_LOGITS_KERNEL_KEY]
    with pytest.raises(ArgumentError, match=f"{PRE_LOGITS_BIAS_KEY} has no place in the timm"):
        official_to_timm(arrays)
    arrays = official_vit()
    del arrays[KEY_KERNEL.format(i=1)]  # timm fuses query, key and value: all three or none
    with pytest.raises(ArgumentError, match="is missing"):
        official_to_timm(arrays)


def test_templates_count_as_their_source_counts():
    """A source numbering from 0 where the official keys number from 1 is its template's
    offset, read and written alike; a number the offset would make negative is no match."""
    table = (KeyRow("stages.{s-1}.layers.{u-1}.w", "block{s}/unit{u}/w"),)
    official = {"block1/unit3/w": np.zeros(1), "block2/unit1/w": np.ones(1)}
    source = from_official(table, official, "test")
    assert sorted(source) == ["stages.0.layers.2.w", "stages.1.layers.0.w"]
    assert sorted(to_official(table, source)) == sorted(official)
    assert list(to_official((KeyRow("b{i+1}", "x{i}"),), {"b0": np.zeros(1)})) == ["source:b0"]


@pytest.mark.parametrize("write, read", [(official_to_timm, timm_to_official),
                                         (official_to_transformers, transformers_to_official),
                                         (official_to_vit_hybrid, vit_hybrid_to_official)])
def test_headers_go_through_the_same_rows_without_copying_an_array(write, read):
    """A reader's headers are the rows run on zero-stride stand-ins: the shapes of a real read,
    and no array copied (a copy of a stand-in would allocate the whole array)."""
    source = write(official_hybrid() if write is official_to_vit_hybrid else official_vit())
    real = read(source, heads=HEADS)
    headers = read(shape_stand_ins({k: a.shape for k, a in source.items()}), heads=HEADS)
    assert {k: a.shape for k, a in headers.items()} == {k: a.shape for k, a in real.items()}
    assert all(not any(a.strides) for a in headers.values())
