"""big_vision's SigLIP .npz (the image tower under params/img/), written here by inverting
timm's own big_vision loader (`timm.models.vision_transformer._load_weights`) and checked with
that loader: timm reads the written file back into exactly the state dict it came from. Then
keras_vit reads it through the big_vision format's rows and computes what timm's model
computes.

big_vision computes tanh GELU, so timm's model is built with `act_layer="gelu_tanh"`: the
file's numerics, which the format records. Tolerance: relative 1e-4, as
test_timm_families.py derives it (two float32 implementations of two blocks: ~1e-6).
"""

import dataclasses

import numpy as np
import pytest

import keras_vit
from keras_vit import CheckpointError
from keras_vit.checkpoints.formats import detect_format, inspect_checkpoint
from tests.checkpoints.formats.test_formats import _images, _randomise
from tests.checkpoints.formats.test_timm_families import _assert_close
from tests.oracle import import_timm, run_timm

ARCHITECTURE, SIZE, CLASSES = "vit_base_patch16_siglip_224", 32, 16
# SigLIP-B/16 shrunk: 2 blocks of width 64 in 4 heads (MLP 256, the family's ratio).
SHRUNK = {"depth": 2, "embed_dim": 64, "num_heads": 4}
TOWER = "params/img/"


def _timm_siglip():
    timm = import_timm()
    return timm.create_model(ARCHITECTURE, pretrained=False, img_size=SIZE, num_classes=CLASSES,
                             act_layer="gelu_tanh", **SHRUNK)


def _variant():
    return dataclasses.replace(keras_vit.get_variant(ARCHITECTURE), depth=2, width=64, heads=4,
                               mlp_dim=256)


def _mha(prefix, weights, heads):
    """{prefix + name: array} of one attention: torch {q, k, v: (weight, bias), out: ...}."""
    out = {}
    for name in ("query", "key", "value"):
        weight, bias = weights[name]
        width = weight.shape[1]
        out[f"{prefix}{name}/kernel"] = weight.T.reshape(width, heads, -1)
        out[f"{prefix}{name}/bias"] = bias.reshape(heads, -1)
    weight, bias = weights["out"]
    out[f"{prefix}out/kernel"] = weight.reshape(weight.shape[0], heads, -1).transpose(1, 2, 0)
    out[f"{prefix}out/bias"] = bias
    return out


def big_vision_arrays(model, scanned=False):
    """timm's SigLIP state dict in big_vision's layout (params/img/...), blocks scanned or not,
    beside a stand-in text tower, temperature and bias, as a SigLIP release holds them."""
    sd = {k: v.detach().numpy() for k, v in model.state_dict().items()}
    heads = model.blocks[0].attn.num_heads
    w = {"embedding/kernel": sd["patch_embed.proj.weight"].transpose(2, 3, 1, 0),
         "embedding/bias": sd["patch_embed.proj.bias"], "pos_embedding": sd["pos_embed"],
         "Transformer/encoder_norm/scale": sd["norm.weight"],
         "Transformer/encoder_norm/bias": sd["norm.bias"],
         "head/kernel": sd["head.weight"].T, "head/bias": sd["head.bias"],
         "MAPHead_0/probe": sd["attn_pool.latent"],
         "MAPHead_0/LayerNorm_0/scale": sd["attn_pool.norm.weight"],
         "MAPHead_0/LayerNorm_0/bias": sd["attn_pool.norm.bias"]}
    kv_weight, kv_bias = np.split(sd["attn_pool.kv.weight"], 2), np.split(sd["attn_pool.kv.bias"], 2)
    w.update(_mha("MAPHead_0/MultiHeadDotProductAttention_0/", {
        "query": (sd["attn_pool.q.weight"], sd["attn_pool.q.bias"]),
        "key": (kv_weight[0], kv_bias[0]), "value": (kv_weight[1], kv_bias[1]),
        "out": (sd["attn_pool.proj.weight"], sd["attn_pool.proj.bias"])},
        model.attn_pool.num_heads))
    for r in range(2):
        w[f"MAPHead_0/MlpBlock_0/Dense_{r}/kernel"] = sd[f"attn_pool.mlp.fc{r + 1}.weight"].T
        w[f"MAPHead_0/MlpBlock_0/Dense_{r}/bias"] = sd[f"attn_pool.mlp.fc{r + 1}.bias"]
    blocks = []
    for i in range(len(model.blocks)):
        b = f"blocks.{i}."
        qkv_weight, qkv_bias = np.split(sd[b + "attn.qkv.weight"], 3), np.split(sd[b + "attn.qkv.bias"], 3)
        block = _mha("MultiHeadDotProductAttention_0/", {
            "query": (qkv_weight[0], qkv_bias[0]), "key": (qkv_weight[1], qkv_bias[1]),
            "value": (qkv_weight[2], qkv_bias[2]),
            "out": (sd[b + "attn.proj.weight"], sd[b + "attn.proj.bias"])}, heads)
        for ln, norm in (("LayerNorm_0", "norm1"), ("LayerNorm_1", "norm2")):
            block[f"{ln}/scale"], block[f"{ln}/bias"] = sd[b + norm + ".weight"], sd[b + norm + ".bias"]
        for r in range(2):
            block[f"MlpBlock_0/Dense_{r}/kernel"] = sd[f"{b}mlp.fc{r + 1}.weight"].T
            block[f"MlpBlock_0/Dense_{r}/bias"] = sd[f"{b}mlp.fc{r + 1}.bias"]
        blocks.append(block)
    if scanned:  # big_vision's scan=True: each block array stacked on a leading depth axis
        w.update({f"Transformer/encoderblock/{k}": np.stack([blk[k] for blk in blocks])
                  for k in blocks[0]})
    else:
        w.update({f"Transformer/encoderblock_{i}/{k}": v for i, blk in enumerate(blocks)
                  for k, v in blk.items()})
    arrays = {TOWER + k: np.ascontiguousarray(v, np.float32) for k, v in w.items()}
    rng = np.random.default_rng(5)
    arrays.update({"params/txt/Embed_0/embedding": rng.standard_normal((11, 8), np.float32),
                   "params/t": np.ones(1, np.float32), "params/b": np.zeros(1, np.float32)})
    return arrays


# The scanned file through every test is slow; the default
# test_a_scanned_file_reads_as_the_blocks_one covers its reading.
@pytest.fixture(scope="module", params=[
    pytest.param(False, id="blocks"), pytest.param(True, id="scanned", marks=pytest.mark.slow)])
def written(request, tmp_path_factory):
    """timm's random SigLIP, its big_vision file, and the path of that file."""
    import torch

    theirs = _randomise(_timm_siglip(), torch)
    path = tmp_path_factory.mktemp("big_vision") / "siglip.npz"
    np.savez(path, **big_vision_arrays(theirs, scanned=request.param))
    return theirs, str(path)


def test_timms_big_vision_loader_reads_the_written_file_back_exactly(written):
    theirs, path = written
    again = _timm_siglip()
    again.load_pretrained(path)
    expected = theirs.state_dict()
    for key, value in again.state_dict().items():
        np.testing.assert_array_equal(value.numpy(), expected[key].numpy(), err_msg=key)


def test_a_scanned_file_reads_as_the_blocks_one(written, tmp_path):
    """big_vision's scan=True layout (blocks stacked on axis 0): timm's loader reads it back
    exactly, and keras_vit reads from it the very arrays it reads from the block-by-block file."""
    from keras_vit.checkpoints.formats import read_checkpoint

    theirs, path = written
    scanned = tmp_path / "scanned.npz"
    np.savez(scanned, **big_vision_arrays(theirs, scanned=True))
    again = _timm_siglip()
    again.load_pretrained(str(scanned))
    expected = theirs.state_dict()
    for key, value in again.state_dict().items():
        np.testing.assert_array_equal(value.numpy(), expected[key].numpy(), err_msg=key)
    blocks, stacked = read_checkpoint(path, heads=4), read_checkpoint(str(scanned), heads=4)
    assert sorted(blocks) == sorted(stacked)
    for key, array in blocks.items():
        np.testing.assert_array_equal(stacked[key], array, err_msg=key)


def test_the_image_tower_computes_what_timm_computes(written):
    theirs, path = written
    assert detect_format(path) == "big_vision"
    variant = _variant()
    images = _images(2, (SIZE, SIZE))
    logits = keras_vit.ViT(variant, weights=path, image_size=SIZE)
    assert logits.output_shape == (None, CLASSES)  # the file's head, its class count
    _assert_close(np.asarray(logits(images)), run_timm(theirs, images))
    features = keras_vit.ViT(variant, weights=path, image_size=SIZE, include_top=False)
    _assert_close(np.asarray(features(images)), run_timm(theirs, images, features=True))


def _rewrite(path, tmp_path, change):
    arrays = dict(np.load(path))
    change(arrays)
    out = tmp_path / "changed.npz"
    np.savez(out, **arrays)
    return str(out)


def test_a_partial_tower_is_refused_naming_the_missing_array(written, tmp_path):
    variant = _variant()
    path = _rewrite(written[1], tmp_path,
                    lambda a: a.pop(TOWER + "MAPHead_0/MlpBlock_0/Dense_1/kernel"))
    with pytest.raises(CheckpointError, match="MAPHead_0/MlpBlock_0/Dense_1/kernel"):
        keras_vit.ViT(variant, weights=path, image_size=SIZE)


def test_a_block_stored_both_scanned_and_alone_is_one_line(written, tmp_path):
    def both(arrays):
        key = next(k for k in arrays if "LayerNorm_0/scale" in k and "encoderblock" in k)
        block = key.split("Transformer/")[1].split("/")[0]
        other = "encoderblock_0" if block == "encoderblock" else "encoderblock"
        value = arrays[key] if block == "encoderblock" else np.stack([arrays[key]] * 2)
        arrays[key.replace(block, other)] = value[0] if other == "encoderblock_0" else value

    path = _rewrite(written[1], tmp_path, both)
    with pytest.raises(CheckpointError, match="both scanned") as raised:
        inspect_checkpoint(path)
    assert "\n" not in str(raised.value)


def test_a_member_that_is_not_an_array_is_one_line(written, tmp_path):
    import zipfile

    path = tmp_path / "lying.npz"
    with zipfile.ZipFile(written[1]) as source, zipfile.ZipFile(path, "w") as target:
        for info in source.infolist():
            data = source.read(info)
            if info.filename == TOWER + "embedding/bias.npy":
                data = b"not an npy file"
            target.writestr(info, data)
    with pytest.raises(CheckpointError, match="not a readable big_vision") as raised:
        inspect_checkpoint(str(path))
    assert "\n" not in str(raised.value)


def test_the_row_table_serves_both_directions():
    """official -> big_vision -> official is the identity (every key, bit for bit), and the
    big_vision side is big_vision's spelling (Linen block names, a top-level pos_embedding)."""
    from keras_vit.checkpoints.formats.big_vision import big_vision_to_official
    from tests.checkpoints.formats.test_row_tables import assert_same, official_vit
    from tests.checkpoints.formats.writers import official_to_big_vision

    official = official_vit()
    written = official_to_big_vision(official)
    assert "pos_embedding" in written
    assert "Transformer/encoderblock_1/MultiHeadDotProductAttention_0/query/kernel" in written
    assert "Transformer/encoderblock_1/MlpBlock_0/Dense_1/bias" in written
    assert_same(big_vision_to_official(written), official)
