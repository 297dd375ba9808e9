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
from tests.checkpoints.formats.test_formats import _images, _randomise
from tests.checkpoints.formats.test_timm_families import _assert_close
from tests.oracle import import_open_clip, import_timm, run_timm

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


@pytest.mark.parametrize("size", [48, (48, 80)], ids=["48", "48x80"])
def test_at_another_size_the_embedding_is_open_clips_resize(written, size):
    """open_clip loads a file at another image size through its `resize_pos_embed`
    (antialiased bicubic): keras_vit's embedding at that size is open_clip's (float32 against
    float64 weights: 1e-5 on values of order 1), and the tower computes what timm's CLIP
    computes with that embedding."""
    open_clip = import_open_clip()
    import types

    import torch
    from safetensors.torch import load_file

    theirs, path = written
    grid = (size, size) if isinstance(size, int) else size
    grid = (grid[0] // 16, grid[1] // 16)
    state = load_file(path)
    stand_in = types.SimpleNamespace(visual=types.SimpleNamespace(grid_size=grid))
    open_clip.model.resize_pos_embed(state, stand_in)
    expected = state["visual.positional_embedding"].numpy()[None]
    ours = keras_vit.ViT(_variant(), weights=path, image_size=size)
    np.testing.assert_allclose(np.asarray(ours.get_layer("posembed_input").pos_embedding),
                               expected, rtol=0, atol=1e-5)
    resized = _timm_clip_at(size)
    weights = {k: v.clone() for k, v in theirs.state_dict().items()}
    weights["pos_embed"] = torch.from_numpy(expected)
    resized.load_state_dict(weights)
    images = _images(2, (grid[0] * 16, grid[1] * 16))
    _assert_close(np.asarray(ours(images)), run_timm(resized.eval(), images))


def _timm_clip_at(size):
    return import_timm().create_model(ARCHITECTURE, pretrained=False, img_size=size, **SHRUNK)


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
    from keras_vit.checkpoints.formats.open_clip import open_clip_to_official
    from keras_vit.checkpoints.layout import (
        EMBEDDING_BIAS,
        HEAD_BIAS_KEY,
        PRE_NORM_BIAS,
        PRE_NORM_SCALE,
    )
    from keras_vit.errors import ArgumentError
    from tests.checkpoints.formats.test_row_tables import HEADS, D, assert_same, official_vit
    from tests.checkpoints.formats.writers import official_to_open_clip

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


# --- OpenCLIP Hub folders: written by open_clip itself ---------------------------------------

# A CLIP of OpenAI's layout shrunk (open_clip's model_cfg): a 2-block width-64 image tower in
# 4 heads of 16, a 12-wide projection, QuickGELU (as OpenAI's weights and open_clip's
# "-quickgelu" models), and a one-block text tower, which keras_vit leaves.
HUB_CONFIG = {"embed_dim": 12, "quick_gelu": True,
              "vision_cfg": {"image_size": SIZE, "layers": 2, "width": 64, "patch_size": 8,
                             "head_width": 16},
              "text_cfg": {"context_length": 4, "vocab_size": 16, "width": 16, "heads": 2,
                           "layers": 1}}
# Not open_clip's defaults (OpenAI's), so that reading them shows.
HUB_MEAN, HUB_STD = (0.5, 0.4, 0.3), (0.2, 0.25, 0.3)


@pytest.fixture(scope="module")
def hub_folder(tmp_path_factory):
    """A folder as open_clip's `save_for_hf` writes it (its state dict as
    open_clip_model.safetensors, its `save_config_for_hf`; the tokenizer files it also writes
    need the Hub), and open_clip's model read back from it (`create_model("local-dir:...")`)."""
    import copy

    open_clip = import_open_clip()
    import torch
    from open_clip.model import CLIP, set_model_preprocess_cfg
    from open_clip.push_to_hf_hub import save_config_for_hf
    from safetensors.torch import save_file as save_torch_file

    torch.manual_seed(0)
    model = CLIP(**copy.deepcopy(HUB_CONFIG))
    with torch.no_grad():  # LayerNorm scales near 1, every other weight random
        for name, p in model.named_parameters():
            noise = torch.randn(p.shape)
            p.copy_(1 + 0.2 * noise if ".ln_" in f".{name}" and name.endswith("weight")
                    else noise * (0.2 if p.ndim <= 1 else 1 / max(1, p[0].numel()) ** 0.5))
    set_model_preprocess_cfg(model, {"size": SIZE, "mean": HUB_MEAN, "std": HUB_STD,
                                     "interpolation": "bicubic", "resize_mode": "shortest"})
    directory = tmp_path_factory.mktemp("open_clip_hub")
    save_torch_file(model.state_dict(), str(directory / "open_clip_model.safetensors"))
    save_config_for_hf(model, directory / "open_clip_config.json", model_config=HUB_CONFIG)
    theirs = open_clip.create_model(f"local-dir:{directory}")
    # What else a LAION repository holds: transformers' CLIPModel (config.json, model.safetensors;
    # a stand-in here), which keras_vit does not read, and open_clip's pickled copy (never
    # opened): the folder is still read as open_clip's.
    (directory / "config.json").write_text('{"model_type": "clip", "architectures": ["CLIPModel"]}')
    save_file({"vision_model.embeddings.patch_embedding.weight": np.zeros((64, 3, 8, 8), np.float32)},
              str(directory / "model.safetensors"))
    (directory / "open_clip_pytorch_model.bin").write_bytes(b"")
    return theirs.eval(), torch, str(directory)


def test_an_open_clip_hub_folder_builds_its_tower_from_hf(hub_folder, monkeypatch):
    """`from_pretrained("hf://...")` of an OpenCLIP repository (the snapshot, here the folder
    open_clip wrote) builds the CLIP row its config names with the config's activation and
    normalisation, and computes open_clip's `encode_image`, the projected embedding."""
    from keras_vit.checkpoints.formats.npz_metadata import VARIANT_ATTRIBUTE
    from keras_vit.models import pretrained

    theirs, torch, directory = hub_folder
    fetched = []
    monkeypatch.setattr(pretrained, "hub_snapshot",
                        lambda repo, revision, shown: fetched.append((repo, revision)) or directory)
    ours = keras_vit.from_pretrained("hf://someone/clip-tiny@v1", include_top=False,
                                     include_preprocessing=True)
    assert fetched == [("someone/clip-tiny", "v1")]
    built = getattr(ours, VARIANT_ATTRIBUTE)
    assert dataclasses.replace(built, name="CLIP-B/16") == dataclasses.replace(
        _variant(), patch_size=8, image_size=SIZE), built
    # [0, 255] pixels, which the model normalises with the config's mean and std; open_clip's
    # model takes them normalised (its preprocessing transform does that).
    pixels = (_images(2, (SIZE, SIZE)) + 1) * 127.5
    normalised = (pixels / 255 - np.float32(HUB_MEAN)) / np.float32(HUB_STD)
    with torch.no_grad():
        expected = theirs.encode_image(
            torch.from_numpy(normalised.astype(np.float32).transpose(0, 3, 1, 2))).numpy()
    _assert_close(np.asarray(ours(pixels)), expected)


def _with_config(hub_folder, tmp_path, change):
    """The folder's weights beside its config changed by `change` (a dict -> None)."""
    import json
    import shutil

    directory = tmp_path / "changed"
    directory.mkdir(parents=True)
    shutil.copy(f"{hub_folder[2]}/open_clip_model.safetensors", directory)
    # open_clip's pickled copy beside it, as push_to_hf_hub writes both: never opened, and no
    # reason to take the folder for one of pickles.
    (directory / "open_clip_pytorch_model.bin").write_bytes(b"")
    with open(f"{hub_folder[2]}/open_clip_config.json") as f:
        config = json.load(f)
    change(config)
    (directory / "open_clip_config.json").write_text(json.dumps(config))
    return str(directory)


@pytest.mark.parametrize("change, named", [
    (lambda c: c["model_cfg"]["vision_cfg"].update(attentional_pool=True),
     "attentional_pool is True, which builds the attentional pooler"),
    (lambda c: c["model_cfg"]["vision_cfg"].update(pool_type="avg"), "pool_type is 'avg'"),
    (lambda c: c["model_cfg"]["vision_cfg"].update(no_ln_pre=True), "no_ln_pre"),
    # A timm trunk is read where it is a row pooled as the row pools
    # (test_open_clip_timm_trunk.py); open_clip's default pooling, "avg", is not ViT-B/16's.
    (lambda c: c["model_cfg"]["vision_cfg"].update(timm_model_name="vit_base_patch16_224"),
     "timm_pool 'avg' is not how ViT-B_16 pools"),
    (lambda c: c["model_cfg"]["vision_cfg"].update(layers=[3, 4, 6, 3]), "ModifiedResNet"),
    (lambda c: c["model_cfg"]["vision_cfg"].update(width="64"), "vision_cfg.width is '64'"),
    (lambda c: c["model_cfg"]["vision_cfg"].update(width=2 ** 17, layers=256),
     "describes a model this machine cannot hold"),
    (lambda c: c.pop("model_cfg"), "model_cfg is missing"),
    (lambda c: c["model_cfg"].pop("vision_cfg"), "vision_cfg is missing"),
], ids=["attentional-pool", "pool-type", "no-ln-pre", "timm-trunk", "resnet", "width", "memory",
        "no-model", "no-vision"])
def test_a_config_keras_vit_cannot_build_is_refused_in_one_line(hub_folder, tmp_path, change,
                                                                 named):
    directory = _with_config(hub_folder, tmp_path, change)
    with pytest.raises(CheckpointError, match=named) as error:
        keras_vit.from_pretrained(directory)
    assert "\n" not in str(error.value)


@pytest.mark.parametrize("ratio", [64, 262144])
def test_an_mlp_ratio_the_arrays_do_not_have_is_refused_before_anything_is_built(
        hub_folder, tmp_path, monkeypatch, ratio):
    """The file's MLP is 256 wide (4 x 64): a config of another ratio is refused from the
    headers (or, where its model cannot fit this machine, by the memory check), in one line,
    before the config's model is built."""
    from keras_vit.models import vit

    def no_build(*args, **kwargs):
        raise AssertionError("a model was built")
    monkeypatch.setattr(vit, "_build", no_build)
    directory = _with_config(hub_folder, tmp_path,
                             lambda c: c["model_cfg"]["vision_cfg"].update(mlp_ratio=ratio))
    with pytest.raises(CheckpointError, match=f"mlp_dim: {64 * ratio} in the config, 256 in the "
                                              "arrays|cannot hold") as error:
        keras_vit.from_pretrained(directory)
    assert "\n" not in str(error.value)


def test_a_config_names_its_row_and_its_activation(hub_folder, tmp_path):
    """open_clip's ViT-B-32 configs (its model_configs): "-quickgelu" (OpenAI's weights) is
    the row, the GELU one (LAION's) the row with "-gelu"; both read from config alone."""
    from keras_vit.checkpoints.formats.base import Source
    from keras_vit.checkpoints.formats.open_clip_config import read_open_clip_config
    from keras_vit.variants import FAMILIES

    b32 = {"image_size": 224, "layers": 12, "width": 768, "patch_size": 32}
    for quick_gelu, name in ((True, "CLIP-B/32"), (False, "CLIP-B/32-gelu")):
        model_cfg = {"vision_cfg": b32, "quick_gelu": quick_gelu}
        directory = _with_config(hub_folder, tmp_path / name.replace("/", "_"),
                                 lambda c, model_cfg=model_cfg: c["model_cfg"].update(model_cfg))
        variant, epsilon, _, timm_trunk, _ = read_open_clip_config(Source(directory))
        assert timm_trunk is None
        assert (variant.name, variant.activation, epsilon) == \
            (name, "quick_gelu" if quick_gelu else "gelu", 1e-5)
        assert dataclasses.replace(variant, name="CLIP-B/32", activation="quick_gelu") \
            == FAMILIES["CLIP-B/32"]
