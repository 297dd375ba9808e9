"""NaFlex's input layers and padding masks (keras_vit/layers/naflex.py), and the sequence-budget
rule (keras_vit/runtime/naflex_inputs.py), against torch's and timm's own functions.

Tolerance: the position resize is a weighted sum of at most 2 * 16 stored values a token and
axis, in float32 on both sides: rounding ~1e-7 relative, so 1e-5 of the largest value; a
wrong filter width or border rule moves values by 1e-2 or more.
"""

import keras
import numpy as np
import pytest

from keras_vit.errors import ArgumentError
from keras_vit.layers import MAPHead, TransformerBlock
from keras_vit.layers.naflex import NaFlexPositionEmbedding, PatchValidity
from keras_vit.runtime.naflex_inputs import graph_sequence_grid, pack, patchify, sequence_grid
from tests.oracle import import_timm

# Shrinking, growing, both at once, long strips, and the stored grid itself.
GRIDS = [(16, 16), (8, 12), (24, 10), (1, 32), (40, 3), (17, 16), (5, 5)]


def _torch_resized(stored, grid):
    """torch's F.interpolate as timm's NaFlexEmbeds and transformers' Siglip2 call it."""
    torch = pytest.importorskip("torch")
    table = torch.from_numpy(stored).permute(0, 3, 1, 2)  # (1, D, h, w)
    resized = torch.nn.functional.interpolate(table, size=grid, mode="bilinear",
                                              align_corners=False, antialias=True)
    return resized.flatten(2).transpose(1, 2)[0].numpy()  # (rows * cols, D)


def test_the_position_resize_per_image_is_torchs_antialiased_bilinear():
    width, stored_grid = 6, (16, 16)
    layer = NaFlexPositionEmbedding(stored_grid)
    tokens = max(r * c for r, c in GRIDS) + 3  # every image padded
    zeros = np.zeros((len(GRIDS), tokens, width), np.float32)
    layer.build(zeros.shape)
    stored = np.random.default_rng(0).standard_normal((1, *stored_grid, width)).astype(np.float32)
    layer.pos_embedding.assign(stored.reshape(1, -1, width))
    out = np.asarray(layer(zeros, np.asarray(GRIDS, np.int32)))  # one call, every grid
    for i, grid in enumerate(GRIDS):
        count = grid[0] * grid[1]
        expected = _torch_resized(stored, grid)
        np.testing.assert_allclose(out[i, :count], expected, rtol=0, atol=1e-5 * np.abs(stored).max(),
                                   err_msg=f"grid {grid}")
        assert not out[i, count:].any(), f"grid {grid}: padding got a position"


def test_the_validity_mask_marks_each_images_patches():
    tokens = np.zeros((3, 7, 4), np.float32)
    valid = np.asarray(PatchValidity()(tokens, np.asarray([[2, 3], [1, 1], [7, 1]], np.int32)))
    expected = np.asarray([[1] * 6 + [0], [1] + [0] * 6, [1] * 7], np.float32)
    np.testing.assert_array_equal(valid, expected)


def _padded(x, extra, seed):
    noise = np.random.default_rng(seed).standard_normal((x.shape[0], extra, x.shape[2]))
    return np.concatenate([x, 10 * noise.astype(np.float32)], axis=1)


def test_padding_is_never_attended_to_nor_pooled():
    # The same tokens alone and followed by padding of large random values: every real token's
    # output and the pooled vector are the tokens-alone ones.
    rng = np.random.default_rng(1)
    x = rng.standard_normal((2, 5, 8)).astype(np.float32)
    block, head = TransformerBlock(num_heads=2, mlp_dim=16), MAPHead(num_heads=2, mlp_dim=16)
    block(x), head(x)
    for layer in (block, head):
        for w in layer.weights:
            w.assign(rng.normal(0.0, 0.5, w.shape).astype(np.float32))
    padded = _padded(x, 4, seed=2)
    valid = np.concatenate([np.ones((2, 5)), np.zeros((2, 4))], axis=1).astype(np.float32)
    alone, masked = np.asarray(block(x)), np.asarray(block(padded, valid=valid))
    np.testing.assert_allclose(masked[:, :5], alone, rtol=0, atol=1e-5 * np.abs(alone).max())
    pooled_alone, pooled = np.asarray(head(x)), np.asarray(head(padded, valid=valid))
    np.testing.assert_allclose(pooled, pooled_alone, rtol=0, atol=1e-5 * np.abs(pooled_alone).max())
    # and the padding would change both, were it not masked
    assert np.abs(np.asarray(head(padded)) - pooled_alone).max() > 1e-2


def test_the_sequence_grid_is_timms_rule():
    import_timm()
    import tensorflow as tf
    from timm.data.naflex_transforms import get_image_size_for_seq

    graph_grids = {budget: tf.function(lambda h, w, budget=budget: graph_sequence_grid(
        h, w, 16, budget)) for budget in (64, 256, 576, 784, 1024)}
    rng = np.random.default_rng(0)
    sizes = [(224, 224), (480, 640), (1000, 100), (37, 5000), (16, 16), (1, 1), (333, 777)]
    sizes += [tuple(int(v) for v in rng.integers(8, 3000, 2)) for _ in range(30)]
    for budget in (64, 256, 576, 784, 1024):
        for height, width in sizes:
            _, (th, tw) = get_image_size_for_seq((height, width), 16, budget)
            rows, cols = sequence_grid(height, width, 16, budget)
            assert (rows, cols) == (th // 16, tw // 16), (height, width, budget)
            assert rows * cols <= budget
            # and as the graph computes it (tf.data, a SavedModel's signatures)
            in_graph = graph_grids[budget](tf.constant(height), tf.constant(width)).numpy()
            assert tuple(in_graph) == (rows, cols), (height, width, budget)


def test_a_budget_that_is_no_count_is_refused_in_one_line():
    with pytest.raises(ArgumentError, match="max_tokens"):
        sequence_grid(224, 224, 16, 0)


def test_patches_are_laid_out_as_timms_batch_patchify():
    import_timm()
    import torch
    from timm.models.naflexvit import batch_patchify

    image = np.random.default_rng(0).standard_normal((48, 32, 3)).astype(np.float32)
    theirs, grid = batch_patchify(torch.from_numpy(image).permute(2, 0, 1)[None], (16, 16))
    assert grid == (3, 2)
    np.testing.assert_array_equal(patchify(image, 16), theirs[0].numpy())
    batch = pack([image, image[:16]], 16, 8)
    assert batch["patches"].shape == (2, 8, 768)
    np.testing.assert_array_equal(batch["grid"], [[3, 2], [1, 2]])
    assert not batch["patches"][1, 2:].any()


def test_a_model_without_grid_sees_the_stored_grid():
    # The default grid (no grid input) is the stored one: the embedding added as it is.
    layer = NaFlexPositionEmbedding((2, 3))
    tokens = keras.ops.zeros((1, 6, 4))
    out = np.asarray(layer(tokens))
    np.testing.assert_allclose(out, np.asarray(layer.pos_embedding), atol=1e-6)
