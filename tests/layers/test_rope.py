"""RotaryPositionEmbedding against timm's own rotary modules, applied as timm's EvaAttention
applies them: the prefix tokens (class, registers) kept, the patch tokens rotated by
`apply_rot_embed_cat` with the module's `get_embed` for the grid.

Tolerance: float32 rounding. Both sides compute the same float32 angles (at most ~30 rad, so
an ulp of ~2e-6) and their sines; the rotation is two products and a sum of O(1) values, so
the outputs differ by a few 1e-6 at most; a wrong frequency, layout or coordinate moves them
by 1e-2 or more.
"""

import numpy as np
import pytest

from keras_vit.layers.rotary import RotaryPositionEmbedding
from tests.oracle import import_timm

ATOL = 2e-5


def _timm_rope(style, head_dim, grid, reference_grid):
    import_timm()
    from timm.layers import RotaryEmbeddingCat, RotaryEmbeddingDinoV3

    if style == "dinov3":  # as timm's Eva builds it for vit_*_dinov3 (dynamic_img_size)
        return RotaryEmbeddingDinoV3(head_dim, temperature=100, rotate_half=True).get_embed(grid)
    # as Eva builds it for eva02_* (rope_type "cat", in_pixels False, the trained grid)
    module = RotaryEmbeddingCat(head_dim, temperature=10000, in_pixels=False, feat_shape=grid,
                                ref_feat_shape=reference_grid)
    return module.get_embed()


@pytest.mark.parametrize("style,grid,prefix,reference", [
    ("dinov3", (4, 4), 5, None),  # class token and 4 registers
    ("dinov3", (3, 5), 1, None),  # a grid that is not square
    ("eva", (4, 4), 1, (16, 16)),  # EVA-02 at another size than its trained 16 x 16
    ("eva", (3, 5), 0, None),
])
def test_the_rotation_is_timms(style, grid, prefix, reference):
    import_timm()
    import torch
    from timm.layers import apply_rot_embed_cat

    heads, head_dim = 3, 16
    rng = np.random.default_rng(0)
    tokens = prefix + grid[0] * grid[1]
    x = rng.standard_normal((2, heads, tokens, head_dim)).astype("float32")  # timm's layout
    embed = _timm_rope(style, head_dim, list(grid), reference)
    q = torch.from_numpy(x)
    theirs = torch.cat([q[:, :, :prefix], apply_rot_embed_cat(q[:, :, prefix:], embed,
                                                              half=style == "dinov3")], dim=2)
    layer = RotaryPositionEmbedding(style, num_prefix_tokens=prefix,
                                    reference_grid=reference and reference[0])
    ours = np.asarray(layer(x.transpose(0, 2, 1, 3), grid_shape=grid)).transpose(0, 2, 1, 3)
    np.testing.assert_allclose(ours[:, :, :prefix], x[:, :, :prefix])  # not rotated
    assert np.abs(ours - x).max() > 0.1  # the patches are
    np.testing.assert_allclose(ours, theirs.numpy(), atol=ATOL)


def test_a_square_grid_is_read_from_the_token_count():
    x = np.random.default_rng(1).standard_normal((2, 1 + 9, 2, 8)).astype("float32")
    layer = RotaryPositionEmbedding("dinov3", num_prefix_tokens=1)
    np.testing.assert_array_equal(np.asarray(layer(x)), np.asarray(layer(x, grid_shape=(3, 3))))


def test_a_bad_style_or_head_width_is_refused_in_one_line():
    import keras_vit

    with pytest.raises(keras_vit.ArgumentError, match="RoPE style"):
        RotaryPositionEmbedding("2d")
    with pytest.raises(keras_vit.ArgumentError, match="divisible by 4"):
        RotaryPositionEmbedding("eva")(np.zeros((1, 4, 2, 6), "float32"))
