"""Loading a timm file holds one row's arrays at a time, never the whole file beside the model
(benchmarks/load_memory.py measures the same on DINOv2-g's 4.5 GB; docs/performance.md).

Memory is counted with tracemalloc, which sees every NumPy buffer and every `bytes` read
from the file, and the NumPy copy TensorFlow makes of each value it assigns.
"""

import dataclasses
import tracemalloc

import numpy as np
import pytest

import keras_vit
from keras_vit.checkpoints.errors import CheckpointError
from keras_vit.checkpoints.formats.safetensors import read_safetensors, write_safetensors

# 8 blocks, so that the largest tensor (an MLP kernel, 128 x 512) is 1/24 of the file.
SMALL = dataclasses.replace(keras_vit.get_variant("Ti/16"), name="small", width=128, depth=8,
                            mlp_dim=512, heads=2, patch_size=8)


def _timm_file(tmp_path):
    model = keras_vit.ViT(SMALL, image_size=32, classes=10)
    rng = np.random.default_rng(0)
    for w in model.weights:  # a fresh model's zero biases would load unseen
        w.assign(rng.standard_normal(w.shape).astype("float32") * 0.1)
    path = tmp_path / "small.safetensors"
    keras_vit.save_safetensors(model, path)
    return model, str(path)


def _weights(model):
    return [w.numpy().copy() for w in model.weights]


def test_a_timm_file_loads_one_row_at_a_time(tmp_path):
    written, path = _timm_file(tmp_path)
    arrays = read_safetensors(path)
    file_bytes = sum(a.nbytes for a in arrays.values())
    largest = max(a.nbytes for a in arrays.values())
    del arrays
    model = keras_vit.ViT(SMALL, image_size=32, classes=10)
    tracemalloc.start()
    try:
        keras_vit.load_weights(model, path)
        after, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    # What remains after the load is the weights themselves: TensorFlow's assign adopts the
    # NumPy copy it makes of each value as the variable's new buffer. Above that, one row at
    # a time holds the bytes read and at most one converted copy (a transpose, the
    # query/key/value concatenation): 2x the largest tensor; 4x leaves room for the
    # bookkeeping. Reading the whole file first held all of it (measured: 1.3x the file).
    transient = peak - after
    assert transient <= 4 * largest < file_bytes / 4, (transient, largest, file_bytes)
    for ours, theirs in zip(_weights(model), _weights(written)):
        np.testing.assert_array_equal(ours, theirs)


def test_a_non_finite_value_in_the_last_row_leaves_the_model_untouched(tmp_path):
    # The rows are checked in a first pass, before the second assigns any of them.
    _, path = _timm_file(tmp_path)
    arrays = read_safetensors(path)
    last = f"blocks.{SMALL.depth - 1}.mlp.fc2.bias"
    arrays[last] = arrays[last].copy()
    arrays[last][3] = np.nan
    write_safetensors(arrays, path)
    model = keras_vit.ViT(SMALL, image_size=32, classes=10)
    before = _weights(model)
    with pytest.raises(CheckpointError, match="non-finite values:\n.*MlpBlock_3/Dense_1/bias: 1 NaN"):
        keras_vit.load_weights(model, path)
    for ours, theirs in zip(_weights(model), before):
        np.testing.assert_array_equal(ours, theirs)
