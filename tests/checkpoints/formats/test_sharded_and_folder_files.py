"""Checkpoint files beyond one plain file: sharded safetensors (`model.safetensors.index.json`
+ shards) as transformers' `save_pretrained` and huggingface_hub's `save_torch_state_dict`
(what timm users shard with) write them, matching the library, a broken index refused in one
line; pickles with upper-case suffixes; FIFOs and devices refused before they are opened."""

import dataclasses
import json
import os

import numpy as np
import pytest

import keras_vit
from keras_vit.variants import get_variant
from tests.checkpoints.formats.test_formats import (
    TOL,
    _assert_refused,
    _hf,
    _images,
    _run_hf,
    _timm_model,
    run_timm,
)

TINY = dataclasses.replace(get_variant("Ti/16"), depth=2, name="tiny")


def _shared_key(index):
    """A tensor whose shard holds others too (the shard is still read once it is unlisted)."""
    shards = list(index["weight_map"].values())
    return next(k for k, shard in index["weight_map"].items() if shards.count(shard) > 1)


def _shards(directory):
    return sorted(n for n in os.listdir(directory) if n.endswith(".safetensors"))


def test_sharded_transformers_folder_matches_transformers(tmp_path):
    kwargs = dict(hidden_size=192, num_hidden_layers=2, num_attention_heads=3,
                  intermediate_size=768, image_size=64, num_labels=5)
    model, torch, directory = _hf(kwargs, tmp_path)
    sharded = tmp_path / "sharded"
    model.save_pretrained(str(sharded), max_shard_size="400KB")
    assert len(_shards(sharded)) > 1 and (sharded / "model.safetensors.index.json").exists()
    images = _images(2, (64, 64))
    ours = keras_vit.ViT(TINY, weights=str(sharded))
    np.testing.assert_allclose(np.asarray(ours(images)), _run_hf(model, torch, images).logits.numpy(),
                               atol=TOL)


def test_sharded_timm_state_dict_matches_timm(tmp_path):
    from huggingface_hub import save_torch_state_dict

    model, _ = _timm_model(TINY, 64, 7)
    save_torch_state_dict(model.state_dict(), str(tmp_path), max_shard_size="400KB")
    assert len(_shards(tmp_path)) > 1
    images = _images(2, (64, 64))
    for weights in (tmp_path, tmp_path / "model.safetensors.index.json"):  # the folder or the index
        ours = keras_vit.ViT(TINY, weights=str(weights), image_size=64, classes=7)
        np.testing.assert_allclose(np.asarray(ours(images)), run_timm(model, images), atol=TOL)


@pytest.mark.parametrize("break_it,match", [
    (lambda d, index: os.remove(d / _shards(d)[-1]), "not beside it"),
    (lambda d, index: index["weight_map"].update(
        {k: "../elsewhere.safetensors" for k in list(index["weight_map"])[:1]}), "not a file name"),
    (lambda d, index: index["weight_map"].pop(_shared_key(index)), "does not hold"),
    (lambda d, index: index.pop("weight_map"), "no \"weight_map\""),
])
def test_a_broken_index_is_refused_in_one_line(tmp_path, break_it, match):
    from huggingface_hub import save_torch_state_dict

    model, _ = _timm_model(TINY, 64, 7)
    save_torch_state_dict(model.state_dict(), str(tmp_path), max_shard_size="400KB")
    path = tmp_path / "model.safetensors.index.json"
    index = json.loads(path.read_text())
    break_it(tmp_path, index)
    path.write_text(json.dumps(index))
    target = keras_vit.ViT(TINY, image_size=64, classes=7)
    _assert_refused(target, path, match)
    with pytest.raises(keras_vit.CheckpointError) as error:
        keras_vit.ViT(TINY, weights=str(path), image_size=64, classes=7)
    assert "\n" not in str(error.value) and "model.safetensors.index.json" in str(error.value)


def test_upper_case_pickle_suffixes_are_pickles_too(tmp_path):
    """Only torch's weights-only loader opens a pickle (tests/checkpoints/formats/test_formats.py shows
    that it runs none of the file's code); a file it cannot read is refused in one line."""
    for name in ("PYTORCH_MODEL.BIN", "Model.Pth"):
        path = tmp_path / name
        path.write_bytes(b"\x80\x04 not opened")
        with pytest.raises(keras_vit.CheckpointError, match="pickled PyTorch file") as error:
            keras_vit.ViT(TINY, weights=str(path))
        assert "\n" not in str(error.value)


def test_a_fifo_or_device_is_refused_before_it_is_opened(tmp_path):
    """Opening a FIFO with no writer blocks for ever: the load runs in a thread, so a
    regression fails here within 30 s instead of hanging the suite."""
    import threading

    fifo = tmp_path / "weights.npz"
    os.mkfifo(fifo)
    folder = tmp_path / "folder"
    folder.mkdir()
    os.mkfifo(folder / "model.safetensors")
    outcomes = {}

    def load(name, weights):
        try:
            keras_vit.ViT(TINY, weights=weights)
            outcomes[name] = "loaded"
        except keras_vit.CheckpointError as error:
            outcomes[name] = str(error)

    os.symlink("/dev/zero", tmp_path / "zero.npz")  # a device behind a name that looks right
    cases = {"fifo": str(fifo), "fifo in a folder": str(folder), "device": str(tmp_path / "zero.npz")}
    threads = [threading.Thread(target=load, args=item, daemon=True) for item in cases.items()]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=30)
    assert set(outcomes) == set(cases), f"still blocked: {set(cases) - set(outcomes)}"
    assert "is a FIFO, not a checkpoint file" in outcomes["fifo"]
    assert "model.safetensors is a FIFO" in outcomes["fifo in a folder"]
    assert "is a character device" in outcomes["device"]
    assert all("\n" not in message for message in outcomes.values())
