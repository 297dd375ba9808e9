"""Pickled torch state dicts as the libraries write them by default, read through torch's
weights-only loader (keras_vit/checkpoints/formats/torch_state_dict.py): timm's `save_for_hf`
folder (pytorch_model.bin), timm train.py's `.pth.tar` (CheckpointSaver, with EMA weights),
a transformers folder's pytorch_model.bin, open_clip's `epoch_N.pt` (the dict open_clip_train
saves). Each equals the writing library's own output on the same images (relative 1e-4, as
test_timm_families.py derives it). A pickle that would run code is refused in one line with
nothing on stderr before it, and its code never runs.
"""

import argparse
import copy
import dataclasses
import pickle
import sys

import numpy as np
import pytest

import keras_vit
from keras_vit import CheckpointError
from keras_vit.checkpoints.formats import detect_format
from tests.checkpoints.formats.test_formats import _images, _randomise, _torch
from tests.checkpoints.formats.test_timm_families import _assert_close
from tests.oracle import import_open_clip, run_timm

SIZE = 32
TINY = dataclasses.replace(keras_vit.get_variant("Ti/16"), depth=2, image_size=SIZE)


def _timm_tiny(seed=0):
    torch = _torch()
    import timm

    model = timm.create_model("vit_tiny_patch16_224", pretrained=False, depth=2, img_size=SIZE,
                              num_classes=5)
    return _randomise(model, torch, seed), torch


def test_timms_save_for_hf_folder_is_read(tmp_path):
    theirs, _ = _timm_tiny()  # imports timm as tests/oracle.py does, before its modules
    from timm.models import save_for_hf

    save_for_hf(theirs, str(tmp_path), model_args=dict(depth=2, img_size=SIZE))  # the default
    assert (tmp_path / "pytorch_model.bin").exists()
    assert not list(tmp_path.glob("*.safetensors"))
    assert detect_format(str(tmp_path)) == "timm"
    images = _images(2, (SIZE, SIZE))
    for weights in (tmp_path, tmp_path / "pytorch_model.bin"):
        ours = keras_vit.ViT(TINY, weights=str(weights), classes=5)
        _assert_close(np.asarray(ours(images)), run_timm(theirs, images))


def test_a_timm_training_checkpoint_reads_its_ema_weights(tmp_path):
    """The dict timm's train.py saves (timm.utils.CheckpointSaver._save, written out here:
    timm.utils imports torchvision's C ops, which CPU torch lacks): state_dict, optimizer,
    args (a Namespace), state_dict_ema; keras_vit reads what timm's load_checkpoint reads
    from it (the EMA)."""
    model, torch = _timm_tiny(seed=0)
    from timm.models import load_checkpoint

    ema, _ = _timm_tiny(seed=1)  # EMA weights unlike the model's
    optimizer = torch.optim.AdamW(model.parameters())
    model(torch.zeros(1, 3, SIZE, SIZE)).sum().backward()
    optimizer.step()  # an optimizer state with tensors and step counts beside the weights
    path = tmp_path / "checkpoint-0.pth.tar"
    torch.save({"epoch": 0, "arch": "vit_tiny_patch16_224", "optimizer": optimizer.state_dict(),
                "version": 2, "args": argparse.Namespace(model="vit_tiny_patch16_224", lr=0.1),
                "state_dict": model.state_dict(), "state_dict_ema": ema.state_dict(),
                "metric": 1.0, "saver": {"epoch": 0, "metric": 1.0,
                                         "checkpoint_files": [("checkpoint-0.pth.tar", 1.0)]}},
               str(path))
    reference, _ = _timm_tiny(seed=2)
    load_checkpoint(reference, str(path))  # use_ema=True: timm's default
    images = _images(2, (SIZE, SIZE))
    expected = run_timm(reference.eval(), images)
    np.testing.assert_array_equal(expected, run_timm(ema, images))  # timm read the EMA
    ours = keras_vit.ViT(TINY, weights=str(path), classes=5)
    _assert_close(np.asarray(ours(images)), expected)


def test_a_transformers_pytorch_model_bin_folder_is_read(tmp_path):
    torch = _torch()
    from transformers import ViTConfig, ViTForImageClassification

    theirs = _randomise(ViTForImageClassification(ViTConfig(
        hidden_size=192, num_hidden_layers=2, num_attention_heads=3, intermediate_size=768,
        image_size=SIZE, patch_size=16, num_labels=5)), torch)
    theirs.save_pretrained(str(tmp_path))
    (tmp_path / "model.safetensors").unlink()  # the folder transformers 4 wrote by default
    torch.save(theirs.state_dict(), str(tmp_path / "pytorch_model.bin"))
    assert detect_format(str(tmp_path)) == "transformers"
    images = _images(2, (SIZE, SIZE))
    with torch.no_grad():
        expected = theirs(pixel_values=torch.from_numpy(images.transpose(0, 3, 1, 2).copy())).logits
    ours = keras_vit.ViT(TINY, weights=str(tmp_path), classes=5)
    _assert_close(np.asarray(ours(images)), expected.numpy())


def test_an_open_clip_training_checkpoint_is_read(tmp_path):
    import_open_clip()
    torch = _torch()
    from open_clip.model import CLIP

    from tests.checkpoints.formats.test_open_clip import HUB_CONFIG
    from tests.checkpoints.formats.test_open_clip_timm_trunk import randomise_clip

    model = randomise_clip(CLIP(**copy.deepcopy(HUB_CONFIG)), torch)
    optimizer = torch.optim.AdamW(model.parameters())
    path = tmp_path / "epoch_1.pt"
    # open_clip_train/main.py's checkpoint_dict, saved as it saves it.
    torch.save({"epoch": 1, "name": "run", "state_dict": model.state_dict(),
                "optimizer": optimizer.state_dict()}, str(path))
    assert detect_format(str(path)) == "open_clip"
    vision = HUB_CONFIG["vision_cfg"]
    variant = dataclasses.replace(keras_vit.get_variant("CLIP-B/16"), depth=vision["layers"],
                                  width=vision["width"], heads=vision["width"] // vision["head_width"],
                                  mlp_dim=4 * vision["width"], patch_size=vision["patch_size"],
                                  image_size=SIZE)
    images = _images(2, (SIZE, SIZE))
    with torch.no_grad():
        expected = model.encode_image(torch.from_numpy(images.transpose(0, 3, 1, 2).copy()))
    ours = keras_vit.ViT(variant, weights=str(path), classes=HUB_CONFIG["embed_dim"])
    _assert_close(np.asarray(ours(images)), expected.numpy())


class _Exploit:
    """Unpickling it would create the marker file: torch's weights-only loader never does."""

    marker = None

    def __reduce__(self):
        return (open, (str(self.marker), "w"))


@pytest.mark.parametrize("name", ["pytorch_model.bin", "model.pth", "checkpoint.pth.tar",
                                  "epoch_1.pt"])
def test_a_pickle_that_would_run_code_is_refused_without_running_it(tmp_path, name, capfd):
    torch = _torch()
    _Exploit.marker = tmp_path / "ran"
    path = tmp_path / name
    for planted in ({"state_dict": {"patch_embed.proj.weight": _Exploit()}},
                    {"patch_embed.proj.weight": torch.zeros(4, 3, 16, 16), "x": _Exploit()}):
        torch.save(planted, str(path))
        capfd.readouterr()
        with pytest.raises(CheckpointError, match="weights-only loader refuses") as raised:
            keras_vit.ViT(TINY, weights=str(path))
        assert "\n" not in str(raised.value)
        assert capfd.readouterr().err == ""  # no torch warning before the one line
    path.write_bytes(pickle.dumps(_Exploit()))  # a bare pickle, not torch's zip
    with pytest.raises(CheckpointError, match="pickled PyTorch file"):
        keras_vit.ViT(TINY, weights=str(path))
    assert not _Exploit.marker.exists()


def test_without_torch_a_state_dict_is_refused_naming_the_install(tmp_path, monkeypatch):
    theirs, torch = _timm_tiny()
    path = tmp_path / "model.pth.tar"
    torch.save({"state_dict": theirs.state_dict()}, str(path))
    monkeypatch.setitem(sys.modules, "torch", None)  # `import torch` now raises ImportError
    with pytest.raises(CheckpointError, match="pip install torch") as raised:
        keras_vit.ViT(TINY, weights=str(path), classes=5)
    assert "\n" not in str(raised.value)


@pytest.mark.parametrize("dtype", ["int64", "bool"])
def test_a_checkpoint_weight_that_is_no_float_is_refused_by_name(tmp_path, dtype):
    theirs, torch = _timm_tiny()
    state = dict(theirs.state_dict())
    state["blocks.0.attn.qkv.bias"] = torch.ones(state["blocks.0.attn.qkv.bias"].shape,
                                                 dtype=getattr(torch, dtype))
    path = tmp_path / "checkpoint.pth.tar"
    torch.save({"epoch": 3, "state_dict": state}, str(path))
    with pytest.raises(CheckpointError, match="non-float arrays") as raised:
        keras_vit.ViT(TINY, weights=str(path), classes=5)
    assert "query/bias" in str(raised.value) and dtype in str(raised.value)


@pytest.mark.parametrize("with_safetensors", [False, True], ids=["bin-only", "both"])
def test_a_hub_repository_of_pytorch_model_bin_alone_is_fetched_and_read(
        tmp_path, monkeypatch, with_safetensors):
    """hf:// of a repository timm's save_for_hf wrote (pytorch_model.bin, no safetensors):
    the pickled file is fetched in a second snapshot, only because the first found no
    safetensors, and read through the weights-only loader with its config.json. The Hub is
    tests/hub_server.py on 127.0.0.1: huggingface_hub's own snapshot_download and cache run."""
    pytest.importorskip("huggingface_hub")
    from tests.hub_server import COMMIT, hub_server, use_hub

    theirs, _ = _timm_tiny()
    from safetensors.torch import save_file
    from timm.models import save_for_hf

    remote = tmp_path / "remote"
    save_for_hf(theirs, str(remote), model_args=dict(depth=2, img_size=SIZE))
    if with_safetensors:
        save_file(theirs.state_dict(), str(remote / "model.safetensors"))
    with hub_server({"someone/vit-tiny-bin": remote}) as hub:
        use_hub(monkeypatch, hub.endpoint, tmp_path / "hf-cache")
        ours = keras_vit.ViT(TINY, weights="hf://someone/vit-tiny-bin", classes=5)
    images = _images(2, (SIZE, SIZE))
    _assert_close(np.asarray(ours(images)), run_timm(theirs, images))
    fetched = sorted(request.rsplit("/", 1)[1] for request in hub.requests
                     if request.startswith(f"GET /someone/vit-tiny-bin/resolve/{COMMIT}/"))
    # Each file at most once (the second snapshot finds config.json in the cache), and the
    # pickled file only where there is no safetensors.
    assert fetched == (["config.json", "model.safetensors"] if with_safetensors
                       else ["config.json", "pytorch_model.bin"]), hub.requests
