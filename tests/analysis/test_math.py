"""Known answers for rollout, attention distance, embedding analyses and the few-shot probe."""

import itertools
import math

import numpy as np
import pytest

import keras_vit
from keras_vit.analysis import (
    attention_rollout,
    few_shot_indices,
    few_shot_linear_eval,
    mean_attention_distance,
    patch_embedding_components,
    position_embedding_similarity,
    rollout,
)


@pytest.fixture
def tiny_model():
    """A 2-block ViT with 8-pixel patches on 32 x 48 images (a 4 x 6 grid)."""
    variant = keras_vit.Variant("ViT-tiny_8", width=32, depth=2, mlp_dim=64, heads=4,
                                patch_size=8)
    return keras_vit.ViT(variant, image_size=(32, 48), classes=5)


def _random_attention(shape, seed=0):
    logits = np.random.default_rng(seed).normal(size=shape)
    weights = np.exp(logits)
    return weights / weights.sum(axis=-1, keepdims=True)


# Rollout ---------------------------------------------------------------------

def test_identity_attention_rolls_out_to_identity():
    tokens = 1 + 3 * 5
    attention = np.broadcast_to(np.eye(tokens), (4, 2, 3, tokens, tokens))
    np.testing.assert_allclose(rollout(attention),
                               np.broadcast_to(np.eye(tokens), (2, tokens, tokens)))
    result = attention_rollout(attention, (3, 5), image_size=(24, 40))
    # The class token attends only to itself: nothing reaches the patches.
    np.testing.assert_allclose(result.heatmap, 0.0)
    assert result.upsampled.shape == (2, 24, 40)


def test_rollout_matches_a_written_out_product():
    attention = _random_attention((3, 2, 4, 7, 7))
    mixed = [(a.mean(axis=1) + np.eye(7)) / 2 for a in attention]  # rows of A + I sum to 2
    expected = np.einsum("bij,bjk->bik", mixed[2], np.einsum("bij,bjk->bik", mixed[1], mixed[0]))
    np.testing.assert_allclose(rollout(attention), expected, atol=1e-12)
    no_residual = [a.mean(axis=1) for a in attention]
    np.testing.assert_allclose(rollout(attention, residual=False),
                               no_residual[2] @ no_residual[1] @ no_residual[0], atol=1e-12)
    np.testing.assert_allclose(rollout(attention).sum(-1), 1.0, atol=1e-12)


def test_gap_heatmap_is_the_mean_of_the_patch_rows():
    attention = _random_attention((2, 1, 2, 6, 6))
    result = attention_rollout(attention, (2, 3), num_prefix_tokens=0)
    np.testing.assert_allclose(result.heatmap[0], rollout(attention)[0].mean(0).reshape(2, 3))


def _without_tokens(attention, dropped):
    """Attention with the `dropped` token indices removed as rows and columns, each row
    rescaled to sum to 1, written out row by row (the hand reference for rollout)."""
    kept = [t for t in range(attention.shape[-1]) if t not in dropped]
    out = np.empty(attention.shape[:-2] + (len(kept), len(kept)))
    for i, q in enumerate(kept):
        row = attention[..., q, kept]
        out[..., i, :] = row / row.sum(axis=-1, keepdims=True)
    return out


def test_rollout_skips_register_tokens_as_the_registers_paper_does():
    """A class token, 4 registers, a 2 x 3 grid; the registers draw most of the attention
    (planted, as trained registers do). The heatmap is the class token's row of the rollout
    of the attention with the registers taken out and the rows renormalised, written out
    here layer by layer; keeping them in the product gives a different map."""
    prefix, rows, cols = 5, 2, 3
    attention = _random_attention((3, 2, 4, prefix + rows * cols, prefix + rows * cols))
    attention[..., 1:prefix] *= 20  # registers hoard attention
    attention /= attention.sum(axis=-1, keepdims=True)
    result = attention_rollout(attention, (rows, cols), num_prefix_tokens=prefix)
    mixed = [(a.mean(axis=1) + np.eye(7)) / 2 for a in _without_tokens(attention, {1, 2, 3, 4})]
    expected = np.einsum("bij,bjk->bik", mixed[2], np.einsum("bij,bjk->bik", mixed[1], mixed[0]))
    np.testing.assert_allclose(result.joint, expected, atol=1e-12)
    np.testing.assert_allclose(result.heatmap, expected[:, 0, 1:].reshape(2, rows, cols),
                               atol=1e-12)
    with_registers = rollout(attention)[:, 0, prefix:].reshape(2, rows, cols)
    assert np.abs(with_registers / with_registers.sum((1, 2), keepdims=True)
                  - result.heatmap / result.heatmap.sum((1, 2), keepdims=True)).max() > 1e-3


def test_a_model_without_a_class_token_reads_the_mean_of_its_patch_rows():
    """SigLIP (no class token; its MAP head's probe is no encoder token) and a prefix of
    registers without a class token: the mean of the patch rows, registers left out."""
    attention = _random_attention((2, 1, 2, 8, 8))
    result = attention_rollout(attention, (2, 3), num_prefix_tokens=2, class_token=False)
    mixed = [(a.mean(axis=1) + np.eye(6)) / 2 for a in _without_tokens(attention, {0, 1})]
    np.testing.assert_allclose(result.heatmap[0], (mixed[1] @ mixed[0])[0].mean(0).reshape(2, 3),
                               atol=1e-12)


def test_rollout_rejects_mismatched_grid():
    with pytest.raises(ValueError, match="3x3 grid"):
        attention_rollout(_random_attention((1, 1, 1, 7, 7)), (3, 3))
    with pytest.raises(ValueError, match="layers, batch, heads"):
        rollout(np.ones((2, 3, 3)))


# Mean attention distance -------------------------------------------------------

def _brute_force_uniform_distance(rows, cols, stride):
    """Mean over query patches of the mean pixel distance to all patches."""
    cells = list(itertools.product(range(rows), range(cols)))
    total = 0.0
    for qy, qx in cells:
        for ky, kx in cells:
            total += math.hypot((qy - ky) * stride, (qx - kx) * stride)
    return total / len(cells) ** 2


@pytest.mark.parametrize("rows, cols, prefix", [(4, 4, 1), (3, 5, 1), (6, 2, 0)])
def test_uniform_attention_gives_the_analytic_mean_distance(rows, cols, prefix):
    tokens = prefix + rows * cols
    attention = np.full((2, 3, 4, tokens, tokens), 1.0 / tokens)
    distances = mean_attention_distance(attention, (rows, cols), stride=16,
                                        num_prefix_tokens=prefix)
    expected = _brute_force_uniform_distance(rows, cols, 16)
    assert distances.shape == (2, 4)
    np.testing.assert_allclose(distances, expected, rtol=1e-12)
    if prefix:
        # Without renormalising, the class token's share counts as distance zero.
        kept = rows * cols / tokens
        np.testing.assert_allclose(
            mean_attention_distance(attention, (rows, cols), 16, prefix, renormalize=False),
            expected * kept, rtol=1e-12)


def test_attention_to_self_has_zero_distance_and_neighbours_one_stride():
    rows, cols = 3, 4
    attention = np.broadcast_to(np.eye(1 + rows * cols), (1, 1, 2, 13, 13))
    np.testing.assert_allclose(mean_attention_distance(attention, (rows, cols), 16), 0.0)
    # Every patch attends to its right-hand neighbour (the last column to its left one).
    shifted = np.zeros((13, 13))
    shifted[0, 0] = 1
    for r, c in itertools.product(range(rows), range(cols)):
        other = c + 1 if c + 1 < cols else c - 1
        shifted[1 + r * cols + c, 1 + r * cols + other] = 1
    distances = mean_attention_distance(shifted[None, None, None], (rows, cols), 8)
    np.testing.assert_allclose(distances, 8.0)


def test_distance_leaves_register_tokens_out():
    """Attention that goes to 4 registers counts neither as distance nor as weight: with a
    class token and 4 registers the distance is the one of the patches alone, by hand."""
    rows, cols, prefix = 2, 2, 5
    patches = _random_attention((1, 1, 2, rows * cols, rows * cols), seed=1)
    attention = np.zeros((1, 1, 2, prefix + 4, prefix + 4))
    attention[..., prefix:, prefix:] = patches * 0.25  # three quarters go to the prefix
    attention[..., prefix:, :prefix] = 0.75 / prefix
    attention[..., :prefix, :] = 1 / (prefix + 4)
    centres = [(r * 7, c * 7) for r in range(rows) for c in range(cols)]
    expected = [np.mean([sum(patches[0, 0, h, q, k] * math.dist(centres[q], centres[k])
                             for k in range(4)) for q in range(4)]) for h in range(2)]
    np.testing.assert_allclose(mean_attention_distance(attention, (rows, cols), 7, prefix)[0],
                               expected, rtol=1e-12)


def test_distance_with_rectangular_stride():
    attention = np.full((1, 1, 1, 2, 2), 0.5)  # two patches side by side
    # Half of each query's attention is at distance 0, half at one column = 10 px.
    np.testing.assert_allclose(mean_attention_distance(attention, (1, 2), (4, 10), 0), 5.0)


# Position-embedding similarity ---------------------------------------------------

def test_hand_made_position_embedding_gives_the_known_grid():
    rows, cols = 3, 4
    # Each patch's embedding: one-hot of its row, plus one-hot of its column, in 7 dims.
    grid = np.zeros((rows * cols, rows + cols))
    for r, c in itertools.product(range(rows), range(cols)):
        grid[r * cols + c, r] = 1
        grid[r * cols + c, rows + c] = 1
    class_token = np.random.default_rng(0).normal(size=(1, rows + cols))
    embedding = np.concatenate([class_token, grid])[None]
    similarity = position_embedding_similarity(embedding, (rows, cols), num_prefix_tokens=1)
    assert similarity.shape == (rows, cols, rows, cols)
    for r1, c1, r2, c2 in itertools.product(range(rows), range(cols), range(rows), range(cols)):
        expected = ((r1 == r2) + (c1 == c2)) / 2  # cosine of two 2-hot vectors
        assert similarity[r1, c1, r2, c2] == pytest.approx(expected)


def test_similarity_reads_the_model(tiny_model):
    layer = tiny_model.get_layer("posembed_input")
    rows, cols = layer.grid_size
    values = np.random.default_rng(3).normal(size=layer.pos_embedding.shape).astype("float32")
    layer.pos_embedding.assign(values)
    grid = values[0, 1:].astype(np.float64)
    unit = grid / np.linalg.norm(grid, axis=1, keepdims=True)
    np.testing.assert_allclose(position_embedding_similarity(tiny_model),
                               (unit @ unit.T).reshape(rows, cols, rows, cols), atol=1e-6)


def test_similarity_rejects_a_wrong_grid():
    with pytest.raises(ValueError, match="3x3 grid"):
        position_embedding_similarity(np.ones((1, 8, 4)), (3, 3), 1)


# Patch-embedding components -------------------------------------------------------

def test_components_recover_a_planted_subspace():
    rng = np.random.default_rng(0)
    basis = np.linalg.qr(rng.normal(size=(4 * 4 * 3, 2)))[0]  # orthonormal (48, 2)
    filters = rng.normal(size=(64, 2)) * [5.0, 1.0] @ basis.T  # 64 filters in that plane
    kernel = filters.T.reshape(4, 4, 3, 64)
    result = patch_embedding_components(kernel, num_components=3)
    assert result.components.shape == (3, 4, 4, 3)
    np.testing.assert_allclose(result.explained_variance_ratio[:2].sum(), 1.0, atol=1e-9)
    top_two = result.components[:2].reshape(2, -1)
    # The components span the planted plane: projecting them onto it keeps their norm.
    np.testing.assert_allclose(np.linalg.norm(top_two @ basis, axis=1), 1.0, atol=1e-9)


def test_components_of_a_model(tiny_model):
    result = patch_embedding_components(tiny_model, num_components=5)
    assert result.components.shape == (5, 8, 8, 3)
    assert np.all(np.diff(result.explained_variance_ratio) <= 1e-12)
    with pytest.raises(ValueError, match="num_components"):
        patch_embedding_components(tiny_model, num_components=33)


# Few-shot linear evaluation -------------------------------------------------------

def _clusters(classes, per_class, dims, seed, spread=0.3):
    rng = np.random.default_rng(seed)
    centres = rng.normal(size=(classes, dims)) * 5
    labels = np.repeat(np.arange(classes), per_class)
    return centres[labels] + spread * rng.normal(size=(len(labels), dims)), labels


def test_separable_features_score_100_percent():
    x_train, y_train = _clusters(10, 20, 32, seed=0)
    x_test, y_test = _clusters(10, 50, 32, seed=0)  # same centres
    x_test = x_test + 0.3 * np.random.default_rng(9).normal(size=x_test.shape)  # fresh noise
    assert few_shot_linear_eval(x_train, y_train, x_test, y_test) == 1.0
    assert few_shot_linear_eval(x_train, y_train, x_test, y_test, shots=5, seed=1) == 1.0


def test_shuffled_labels_score_about_chance():
    x_train, y_train = _clusters(10, 100, 32, seed=0)
    x_test, y_test = _clusters(10, 200, 32, seed=0)
    shuffled = np.random.default_rng(1).permutation(y_train)
    accuracy = few_shot_linear_eval(x_train, shuffled, x_test, y_test)
    # 2000 test images, chance 0.1: a binomial standard deviation is ~0.007.
    assert abs(accuracy - 0.1) < 0.05


def test_k_shot_subsets():
    labels = np.repeat(np.arange(4), 10)
    chosen = few_shot_indices(labels, 3, seed=5)
    assert np.array_equal(np.bincount(labels[chosen]), [3, 3, 3, 3])
    assert np.array_equal(chosen, few_shot_indices(labels, 3, seed=5))
    assert not np.array_equal(chosen, few_shot_indices(labels, 3, seed=6))
    with pytest.raises(ValueError, match="fewer than 11 shots"):
        few_shot_indices(labels, 11)


def test_few_shot_rejects_bad_input():
    x, y = _clusters(3, 4, 5, seed=0)
    with pytest.raises(ValueError, match="integer class ids"):
        few_shot_linear_eval(x, y.astype(float), x, y)
    with pytest.raises(ValueError, match="differ in width"):
        few_shot_linear_eval(x, y, x[:, :4], y)
