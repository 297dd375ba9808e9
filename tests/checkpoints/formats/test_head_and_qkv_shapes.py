"""A timm state dict whose arrays cannot be the ViT's: a fused qkv with rows left over (once
silently truncated to three equal parts), a one-dimensional qkv (an IndexError once), a head
of zero classes (once taken for no head and a fresh 1000-class head built). Each is refused
naming the file and the arrays (the loader's report, one line on the command line). The file
is keras_vit's own timm-layout writer's of a one-block ViT-Ti, then edited."""

import dataclasses

import numpy as np
import pytest

import keras_vit
from keras_vit import CheckpointError
from keras_vit.checkpoints.formats.safetensors import open_safetensors, write_safetensors

VARIANT = dataclasses.replace(keras_vit.get_variant("Ti/16"), depth=1)


@pytest.fixture(scope="module")
def arrays(tmp_path_factory):
    path = tmp_path_factory.mktemp("timm") / "tiny.safetensors"
    keras_vit.save_safetensors(keras_vit.ViT(VARIANT, image_size=32, classes=3), path)
    reader = open_safetensors(str(path))
    try:
        return reader.read()
    finally:
        reader.close()


@pytest.mark.parametrize("edit, named", [
    (lambda a: a.update({"blocks.0.attn.qkv.weight": np.zeros((3 * 192 + 1, 192), "f4")}),
     r"query/kernel: expected \(192, 3, 64\), found \(192, 577\)"),
    (lambda a: a.update({"blocks.0.attn.qkv.weight": np.zeros((3 * 192,), "f4")}),
     r"query/kernel: expected \(192, 3, 64\), found \(192,\)"),
    (lambda a: a.update({"head.weight": np.zeros((0, 192), "f4"),
                         "head.bias": np.zeros((0,), "f4")}), "a head of 0 classes"),
], ids=["qkv-extra-rows", "qkv-one-dimensional", "zero-classes"])
def test_arrays_no_vit_has_are_refused_in_one_line(arrays, tmp_path, edit, named):
    edited = dict(arrays)
    edit(edited)
    path = str(tmp_path / "edited.safetensors")
    write_safetensors(edited, path, metadata={"format": "pt"})
    with pytest.raises(CheckpointError, match=named) as error:
        keras_vit.ViT(VARIANT, weights=path, image_size=32)
    # The loader's report lists each mismatch on a line; the command line folds it into one.
    assert str(error.value).startswith(path)
