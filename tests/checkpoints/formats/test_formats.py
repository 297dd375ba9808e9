"""Weights from where users keep them (timm, transformers, keras-hub), and back out
(save_npz, save_safetensors), each checked against the source library itself."""

import dataclasses
import json
import os
import time

import numpy as np
import pytest

import keras_vit
from keras_vit import CheckpointError
from keras_vit.checkpoints.formats.npz_metadata import METADATA_KEY
from keras_vit.variants import get_variant

# The helpers the npz refusal tests use: every variable compared before and after.
from tests.checkpoints.test_loader import _assert_unchanged, _weights
from tests.oracle import (
    import_timm,
    official_vit_arrays,
    random_hybrid_npz,
    run_timm,
    timm_hybrid,
    timm_vit,
)

TOL = 1e-4


def _images(n, size, seed=3):
    return np.random.default_rng(seed).uniform(-1, 1, (n, *size, 3)).astype(np.float32)


def _assert_refused(model, path, match):
    before = _weights(model)
    with pytest.raises(CheckpointError, match=match):
        keras_vit.load_weights(model, str(path))
    _assert_unchanged(model, before)


def _torch():
    import_timm()
    import torch

    torch.set_num_threads(1)
    torch.manual_seed(0)
    return torch


def _randomise(model, torch, seed=0):
    """Random values in every parameter: LayerNorm scales near 1, the rest near 0 (a fresh
    model's LayerNorms and biases would hide mistakes in their mapping)."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            noise = torch.randn(p.shape, generator=g)
            if "norm" in name and name.endswith("weight"):
                p.copy_(1 + 0.2 * noise)
            else:
                p.copy_(noise * (0.2 if p.ndim == 1 else 1 / max(1, p[0].numel()) ** 0.5))
    return model.eval()


# --- timm ---------------------------------------------------------------------------------

def _timm_model(variant, image_size, classes, gap=False):
    torch = _torch()
    from timm.models.vision_transformer import VisionTransformer

    model = VisionTransformer(img_size=image_size, patch_size=variant.patch_size,
                              embed_dim=variant.width, depth=variant.depth,
                              num_heads=variant.heads, mlp_ratio=variant.mlp_dim / variant.width,
                              num_classes=classes, class_token=not gap,
                              global_pool="avg" if gap else "token", fc_norm=False)
    return _randomise(model, torch), torch


# Ti/16 at its full depth; S/32 and S/16-gap (another width, patch, head and pooling) as
# two-block copies: every block is read by the same key mapping, so more blocks add time only.
@pytest.mark.parametrize("name,size,classes,gap,depth", [
    ("Ti/16", 224, 1000, False, None),
    ("S/32", 224, 10, False, 2),
    pytest.param("B/16", 224, 1000, False, None, marks=pytest.mark.slow),
    ("S/16-gap", 224, 7, True, 2),
])
def test_timm_safetensors_match_timm(name, size, classes, gap, depth, tmp_path):
    from safetensors.torch import save_file

    variant = get_variant(name)
    if depth is not None:
        variant = dataclasses.replace(variant, depth=depth)
    model, torch = _timm_model(variant, size, classes, gap=gap)
    path = tmp_path / "model.safetensors"
    save_file(model.state_dict(), str(path))
    ours = keras_vit.ViT(variant, weights=str(path))
    assert ours.get_layer("encoderblock_0").mlp.approximate_gelu is False  # timm's erf GELU
    images = _images(2, (size, size))
    np.testing.assert_allclose(np.asarray(ours(images)), run_timm(model, images), atol=TOL)
    features = keras_vit.ViT(variant, weights=str(path), include_top=False)
    np.testing.assert_allclose(np.asarray(features(images)), run_timm(model, images, features=True),
                               atol=TOL)


def test_a_pickled_file_is_refused_unread(tmp_path):
    marker = tmp_path / "ran"

    class Exploit:
        def __reduce__(self):
            return (open, (str(marker), "w"))

    import pickle

    # Only torch's weights-only loader opens a pickle (for DINOv2's release files,
    # tests/checkpoints/formats/test_dinov2_release.py), and it refuses this one's code.
    for name in ("pytorch_model.bin", "model.pth"):
        path = tmp_path / name
        path.write_bytes(pickle.dumps(Exploit()))
        with pytest.raises(CheckpointError, match="pickled PyTorch file"):
            keras_vit.ViT_Ti16(weights=str(path))
        model = keras_vit.ViT(get_variant("Ti/16"))
        _assert_refused(model, path, "pickled PyTorch file")
    assert not marker.exists()


def test_timm_files_with_extra_or_missing_keys_are_refused_unchanged(tmp_path):
    from safetensors.torch import load_file, save_file

    variant = dataclasses.replace(get_variant("Ti/16"), depth=2, name="tiny")
    model, _ = _timm_model(variant, 64, 10)
    sd = model.state_dict()
    target = keras_vit.ViT(variant, image_size=64, classes=10)
    for label, edit, match in (
            ("missing", lambda d: d.pop("blocks.1.mlp.fc2.bias"), "missing keys"),
            ("extra", lambda d: d.__setitem__("blocks.0.ls1.gamma", d["norm.bias"].clone()),
             "unexpected keys"),
            ("fc_norm", lambda d: d.__setitem__("fc_norm.weight", d["norm.bias"].clone()),
             "unexpected keys")):
        d = dict(sd)
        edit(d)
        path = tmp_path / f"{label}.safetensors"
        save_file(d, str(path))
        _assert_refused(target, path, match)
    # A different architecture is named, and nothing changes.
    save_file(sd, str(tmp_path / "ok.safetensors"))
    _assert_refused(keras_vit.ViT("S/16", image_size=64, classes=10), tmp_path / "ok.safetensors",
                    "shape mismatches")
    assert len(load_file(str(tmp_path / "ok.safetensors"))) == len(sd)


# --- transformers -------------------------------------------------------------------------

def _hf(config_kwargs, tmp_path, base=False):
    torch = _torch()
    from transformers import ViTConfig, ViTForImageClassification, ViTModel

    config = ViTConfig(**config_kwargs)
    model = (ViTModel if base else ViTForImageClassification)(config)
    _randomise(model, torch)
    directory = tmp_path / "hf"
    model.save_pretrained(str(directory))
    return model, torch, directory


def _run_hf(model, torch, images):
    with torch.no_grad():
        out = model(pixel_values=torch.from_numpy(images.transpose(0, 3, 1, 2)),
                    output_hidden_states=False)
    return out


# Ti/16 at its full depth; S/32 (another width, patch and head) as a two-block copy: every
# block is read by the same key mapping, so more blocks add time only.
@pytest.mark.parametrize("variant_name,kwargs", [
    pytest.param("B/16", dict(num_labels=1000), marks=pytest.mark.slow),
    ("Ti/16", dict(hidden_size=192, num_hidden_layers=12, num_attention_heads=3,
                   intermediate_size=768, image_size=160, num_labels=10)),
    ("S/32", dict(hidden_size=384, num_hidden_layers=2, num_attention_heads=6,
                  intermediate_size=1536, patch_size=32, image_size=224, num_labels=37)),
])
def test_transformers_directories_match_transformers(variant_name, kwargs, tmp_path):
    model, torch, directory = _hf(kwargs, tmp_path)
    size = kwargs.get("image_size", 224)
    images = _images(2, (size, size))
    variant = dataclasses.replace(get_variant(variant_name),
                                  depth=kwargs.get("num_hidden_layers", 12))
    ours = keras_vit.ViT(variant, weights=str(directory))
    assert ours.output_shape == (None, kwargs["num_labels"])
    assert ours.get_layer("encoder_norm").epsilon == 1e-12
    out = _run_hf(model, torch, images)
    np.testing.assert_allclose(np.asarray(ours(images)), out.logits.numpy(), atol=TOL)
    with torch.no_grad():
        hidden = model.vit(pixel_values=torch.from_numpy(images.transpose(0, 3, 1, 2)))
    features = keras_vit.ViT(variant, weights=str(directory), include_top=False)
    np.testing.assert_allclose(np.asarray(features(images)),
                               hidden.last_hidden_state[:, 0].numpy(), atol=TOL)


def test_a_transformers_vitmodel_pooler_is_pre_logits(tmp_path):
    kwargs = dict(hidden_size=192, num_hidden_layers=2, num_attention_heads=3,
                  intermediate_size=768, image_size=64)
    model, torch, directory = _hf(kwargs, tmp_path, base=True)
    variant = dataclasses.replace(get_variant("Ti/16"), depth=2, name="tiny")
    images = _images(2, (64, 64))
    ours = keras_vit.ViT(variant, weights=str(directory), include_top=False)
    out = _run_hf(model, torch, images)
    np.testing.assert_allclose(np.asarray(ours(images)), out.last_hidden_state[:, 0].numpy(),
                               atol=TOL)
    # The pooler (tanh Dense on the class token) is the official pre_logits layer.
    pre = keras_vit.ViT(variant, weights=str(directory), representation_size=192, classes=5)
    assert pre.get_layer("pre_logits").kernel.shape == (192, 192)
    np.testing.assert_allclose(pre.get_layer("pre_logits").kernel.numpy(),
                               model.pooler.dense.weight.detach().numpy().T, atol=0)


def test_numerics_follow_the_source_unless_overridden(tmp_path):
    kwargs = dict(hidden_size=192, num_hidden_layers=2, num_attention_heads=3,
                  intermediate_size=768, image_size=64, num_labels=4, layer_norm_eps=1e-5)
    model, torch, directory = _hf(kwargs, tmp_path)
    variant = dataclasses.replace(get_variant("Ti/16"), depth=2, name="tiny")
    images = _images(2, (64, 64))
    reference = _run_hf(model, torch, images).logits.numpy()
    ours = keras_vit.ViT(variant, weights=str(directory))
    block = ours.get_layer("encoderblock_0")
    assert (block.mlp.approximate_gelu, block.norm_0.epsilon, block.norm_2.epsilon,
            ours.get_layer("encoder_norm").epsilon) == (False, 1e-5, 1e-5, 1e-5)
    np.testing.assert_allclose(np.asarray(ours(images)), reference, atol=TOL)
    tanh = keras_vit.ViT(variant, weights=str(directory), approximate_gelu=True,
                         layer_norm_epsilon=1e-6)
    block = tanh.get_layer("encoderblock_0")
    assert (block.mlp.approximate_gelu, block.norm_0.epsilon) == (True, 1e-6)
    assert np.abs(np.asarray(tanh(images)) - reference).max() > TOL  # the override is real
    # No weights: the official numerics, as before.
    plain = keras_vit.ViT(variant).get_layer("encoderblock_0")
    assert (plain.mlp.approximate_gelu, plain.norm_0.epsilon) == (True, 1e-6)


def test_transformers_refusals_change_nothing(tmp_path):
    kwargs = dict(hidden_size=192, num_hidden_layers=2, num_attention_heads=3,
                  intermediate_size=768, image_size=64, num_labels=4)
    _, _, directory = _hf(kwargs, tmp_path)
    variant = dataclasses.replace(get_variant("Ti/16"), depth=2, name="tiny")
    wrong_depth = dataclasses.replace(variant, depth=3, name="tiny3")
    _assert_refused(keras_vit.ViT(wrong_depth, image_size=64, classes=4), directory, "missing keys")
    _assert_refused(keras_vit.ViT("S/16", image_size=64, classes=4), directory, "shape mismatches")
    # A config whose heads differ from the variant's: shapes cannot show it; the config does.
    config = json.loads((directory / "config.json").read_text())
    config["num_attention_heads"] = 6
    (directory / "config.json").write_text(json.dumps(config))
    with pytest.raises(CheckpointError, match="6 attention heads"):
        keras_vit.ViT(variant, weights=str(directory))


# --- keras-hub ------------------------------------------------------------------------------

@pytest.mark.parametrize("classifier", [False, True])
def test_keras_hub_presets_match_keras_hub(classifier, tmp_path):
    keras_hub = pytest.importorskip("keras_hub")
    import keras

    keras.utils.set_random_seed(0)
    backbone = keras_hub.models.ViTBackbone(
        image_shape=(64, 64, 3), patch_size=16, num_layers=2, num_heads=3, hidden_dim=192,
        mlp_dim=768, layer_norm_epsilon=1e-6)
    rng = np.random.default_rng(1)
    for w in backbone.weights:
        w.assign(rng.standard_normal(w.shape).astype("float32") * 0.2 + (1.0 if "gamma" in w.path else 0))
    images = _images(2, (64, 64))
    variant = dataclasses.replace(get_variant("Ti/16"), depth=2, name="tiny")
    directory = str(tmp_path / "preset")
    if classifier:
        task = keras_hub.models.ViTImageClassifier(backbone=backbone, num_classes=6,
                                                   preprocessor=None)
        task.save_to_preset(directory)
        expected = np.asarray(task.predict(images, verbose=0))
        ours = keras_vit.ViT(variant, weights=directory)
        assert ours.output_shape == (None, 6)
    else:
        backbone.save_to_preset(directory)
        expected = np.asarray(backbone(images))[:, 0]
        expected = np.asarray(expected)
        ours = keras_vit.ViT(variant, weights=directory, include_top=False)
    np.testing.assert_allclose(np.asarray(ours(images)), expected, atol=TOL)
    _assert_refused(keras_vit.ViT(dataclasses.replace(variant, depth=3, name="t3"), image_size=64),
                    directory, "missing keys")


# --- back out -------------------------------------------------------------------------------

def _randomised_keras(model, seed=0):
    rng = np.random.default_rng(seed)
    for w in model.weights:
        w.assign((rng.standard_normal(w.shape) * 0.05 + (1.0 if "gamma" in w.path else 0))
                 .astype(w.dtype))
    return model


# Ti/16 at its full depth; the gap model, the rectangular grid, the 384 px grid and pre_logits
# on two-block copies: every block is written by the same key mapping.
@pytest.mark.parametrize("name,size,classes,pre,depth", [("Ti/16", (224, 224), 1000, None, None),
                                                          ("S/16-gap", (96, 160), 5, None, 2),
                                                          ("Ti/16", (384, 384), 7, 192, 2)])
def test_save_npz_reads_back_in_timm_and_bit_identically(name, size, classes, pre, depth,
                                                          tmp_path):
    variant = get_variant(name)
    if depth is not None:
        variant = dataclasses.replace(variant, depth=depth)
    model = _randomised_keras(keras_vit.ViT(variant, image_size=size, classes=classes,
                                            representation_size=pre))
    path = keras_vit.save_npz(model, tmp_path / "out.npz")
    assert sorted(os.listdir(tmp_path)) == ["out.npz"]  # no temporary file left
    # The released layout, as the oracle spells it by hand: the same keys, shapes and dtype,
    # readable without pickle (vit_jax's checkpoint.load is np.load + split on "/").
    grid = variant.token_grid(size)
    released = official_vit_arrays(variant, grid, classes=classes, pre_logits=pre)
    with np.load(path, allow_pickle=False) as saved:
        assert {k: (saved[k].shape, saved[k].dtype) for k in saved.files if k != METADATA_KEY} == \
            {k: (v.shape, v.dtype) for k, v in released.items()}
        # Plus keras_vit's record: this model's numerics, grid, normalisation and architecture
        # (every field of its Variant, for keras_vit.from_pretrained), as JSON.
        assert json.loads(saved[METADATA_KEY].tobytes()) == {
            "approximate_gelu": True, "layer_norm_epsilon": 1e-6, "grid": list(grid),
            "normalization": [[0.5, 0.5, 0.5], [0.5, 0.5, 0.5]],
            "variant": {**vars(variant), "resnet_stages": None, "normalization": None}}
    images = _images(2, size)
    again = keras_vit.ViT(variant, weights=str(path), image_size=size)
    for a, b in zip(model.weights, again.weights):
        np.testing.assert_array_equal(a.numpy(), b.numpy())
    np.testing.assert_array_equal(np.asarray(model(images)), np.asarray(again(images)))
    if pre is None:  # timm's loader drops pre_logits (its ViT has none)
        reference = timm_vit(variant, size, classes, npz_path=path)
        np.testing.assert_allclose(np.asarray(model(images)), run_timm(reference, images),
                                   atol=TOL)


@pytest.mark.slow
def test_save_npz_of_a_hybrid_reads_back_in_timm_and_bit_identically(tmp_path):
    variant = get_variant("R+Ti/16")
    model = _randomised_keras(keras_vit.ViT(variant, image_size=224, classes=10), seed=2)
    # StdConv standardises its kernels: unit-variance kernels keep the epsilons negligible.
    for w in model.weights:
        if "conv" in w.path and len(w.shape) == 4:
            w.assign(np.random.default_rng(5).standard_normal(w.shape).astype("float32"))
    path = keras_vit.save_npz(model, tmp_path / "hybrid.npz")
    released = random_hybrid_npz(tmp_path / "oracle.npz", variant, variant.token_grid((224, 224)),
                                 classes=10)
    with np.load(path, allow_pickle=False) as saved:
        # The official layout's arrays, and keras_vit's own record of the model beside them.
        assert {k: saved[k].shape for k in saved.files if k != "keras_vit/metadata"} \
            == {k: v.shape for k, v in released.items()}
        assert "keras_vit/metadata" in saved.files
    again = keras_vit.ViT(variant, weights=str(path))
    for a, b in zip(model.weights, again.weights):
        np.testing.assert_array_equal(a.numpy(), b.numpy())
    images = _images(2, (224, 224))
    reference = timm_hybrid(variant, (224, 224), 10, npz_path=path)
    np.testing.assert_allclose(np.asarray(model(images)), run_timm(reference, images), atol=TOL)


def test_save_safetensors_loads_in_timm(tmp_path):
    _torch()
    from safetensors.torch import load_file
    from timm.models.vision_transformer import VisionTransformer

    # A two-block S/32: every block is written by the same key mapping.
    variant = dataclasses.replace(get_variant("S/32"), depth=2)
    model = _randomised_keras(keras_vit.ViT(variant, classes=10, approximate_gelu=False))
    path = keras_vit.save_safetensors(model, tmp_path / "model.safetensors")
    reference = VisionTransformer(img_size=224, patch_size=32, embed_dim=384, depth=2,
                                  num_heads=6, num_classes=10).eval()
    reference.load_state_dict(load_file(str(path)), strict=True)
    images = _images(2, (224, 224))
    np.testing.assert_allclose(np.asarray(model(images)), run_timm(reference, images), atol=TOL)
    again = keras_vit.ViT(variant, weights=str(path))
    for a, b in zip(model.weights, again.weights):
        np.testing.assert_array_equal(a.numpy(), b.numpy())
    with pytest.raises(ValueError, match="no pre_logits"):
        keras_vit.save_safetensors(keras_vit.ViT("Ti/16", representation_size=8),
                                   tmp_path / "x.safetensors")


# --- hf:// through huggingface_hub's cache --------------------------------------------------

def _put_in_hub_cache(cache, repo, files):
    """A repository in huggingface_hub's cache layout, as a download would leave it."""
    root = os.path.join(cache, "models--" + repo.replace("/", "--"))
    snapshot = os.path.join(root, "snapshots", "0" * 40)
    os.makedirs(snapshot, exist_ok=True)
    os.makedirs(os.path.join(root, "refs"), exist_ok=True)
    with open(os.path.join(root, "refs", "main"), "w") as f:
        f.write("0" * 40)
    for name, write in files.items():
        write(os.path.join(snapshot, name))


def test_hf_weights_come_from_huggingface_hubs_cache_and_are_checked(tmp_path, monkeypatch):
    """In this process: huggingface_hub reads HF_HUB_CACHE and HF_HUB_OFFLINE into
    `huggingface_hub.constants` when imported and looks them up there at each call, so setting
    those two values is what the variables do in a fresh process, without its TensorFlow and
    PyTorch start-up."""
    pytest.importorskip("huggingface_hub")
    torch = _torch()  # skips without timm, which the test compares with
    from huggingface_hub import constants
    from safetensors.torch import save_file
    from timm.models.vision_transformer import VisionTransformer

    cache = str(tmp_path / "hub")
    monkeypatch.setattr(constants, "HF_HUB_CACHE", cache)
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)
    ti = VisionTransformer(img_size=224, patch_size=16, embed_dim=192, depth=12, num_heads=3,
                           num_classes=1000).eval()
    with torch.no_grad():
        for p in ti.parameters():
            p.add_(torch.randn(p.shape) * 0.05)
    repo = "timm/vit_tiny_patch16_224.augreg_in21k_ft_in1k"  # a catalogue entry
    _put_in_hub_cache(cache, repo, {
        "model.safetensors": lambda p: save_file(ti.state_dict(), p),
        "config.json": lambda p: open(p, "w").write(json.dumps({"architecture": "vit_tiny"}))})
    model = keras_vit.ViT_Ti16(weights="hf://" + repo)
    x = _images(2, (224, 224), seed=0)
    reference = run_timm(ti, x)
    assert np.abs(np.asarray(model(x)) - reference).max() < TOL
    assert model.get_layer("encoderblock_0").mlp.approximate_gelu is False
    # The same catalogued repository at a revision: fetched at that commit, checked like main.
    pinned = keras_vit.ViT_Ti16(weights="hf://" + repo + "@" + "0" * 40)
    assert np.abs(np.asarray(pinned(x)) - reference).max() < TOL
    with pytest.raises(keras_vit.WeightsUnavailableError) as missing:
        keras_vit.ViT_Ti16(weights="hf://" + repo + "@" + "1" * 40)
    missing = str(missing.value)
    assert "\n" not in missing and "1" * 40 in missing
    assert "holds" not in missing  # not "holds ViT-Ti_16 weights"

    # The same entry holding a file with another head (timm's 21843-class head on the same
    # trunk): refused by the entry's check.
    wrong = {**ti.state_dict(), "head.weight": torch.zeros(21843, 192),
             "head.bias": torch.zeros(21843)}
    os.remove(os.path.join(cache, "models--" + repo.replace("/", "--"), "snapshots", "0" * 40,
                           "model.safetensors"))
    _put_in_hub_cache(cache, repo, {"model.safetensors": lambda p: save_file(wrong, p)})
    with pytest.raises(keras_vit.CheckpointError, match="classes 21843 where the entry says 1000"):
        keras_vit.ViT_Ti16(weights="hf://" + repo)

    # Not in the cache, offline: a one-line error within seconds.
    start = time.monotonic()
    with pytest.raises(keras_vit.WeightsUnavailableError) as offline:
        keras_vit.ViT_Ti16(weights="hf://google/not-cached")
    seconds = time.monotonic() - start
    offline = str(offline.value)
    assert seconds < 10 and "\n" not in offline  # a hostile-input bound (TIME_BOUNDS)
    assert "hf://google/not-cached" in offline and "HF_HOME" in offline


@pytest.mark.parametrize("bad", [np.nan, np.inf, -np.inf])
@pytest.mark.parametrize("writer,name", [(keras_vit.save_npz, "model.npz"),
                                         (keras_vit.save_safetensors, "model.safetensors")])
def test_writers_refuse_non_finite_weights_and_write_nothing(tmp_path, bad, writer, name):
    variant = dataclasses.replace(get_variant("Ti/16"), depth=1, name="tiny")
    model = keras_vit.ViT(variant, image_size=32, classes=3)
    path = tmp_path / name
    writer(model, str(path))  # a good file first: the refused write must leave it as it was
    before = path.read_bytes()
    kernel = model.get_layer("encoderblock_0").mlp.dense_1.kernel
    values = kernel.numpy()
    values[1, 2] = bad
    kernel.assign(values)
    with pytest.raises(CheckpointError, match=r"encoderblock_0.*holds 1 NaN or infinite") as error:
        writer(model, str(path))
    assert "\n" not in str(error.value)
    assert path.read_bytes() == before and sorted(os.listdir(tmp_path)) == [name]
