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


def _timm_rope(style, head_dim, grid, reference_grid, offset=0.0, indexing="ij"):
    import_timm()
    from timm.layers import RotaryEmbeddingCat, RotaryEmbeddingDinoV3

    grid_options = {"grid_offset": offset, "grid_indexing": indexing}
    if style == "dinov3":  # as timm's Eva builds it for vit_*_dinov3 (dynamic_img_size)
        return RotaryEmbeddingDinoV3(head_dim, temperature=100, rotate_half=True,
                                     **grid_options).get_embed(grid)
    # as Eva builds it for eva02_* and vit_pe_core_* (rope_type "cat", in_pixels False, the
    # trained grid)
    module = RotaryEmbeddingCat(head_dim, temperature=10000, in_pixels=False, feat_shape=grid,
                                ref_feat_shape=reference_grid, **grid_options)
    return module.get_embed()


# (style, grid, prefix tokens, trained grid, grid offset, indexing)
CASES = [
    ("dinov3", (4, 4), 5, None, 0.0, "ij"),  # class token and 4 registers
    ("dinov3", (3, 5), 1, None, 0.0, "ij"),  # a grid that is not square
    ("eva", (4, 4), 1, (16, 16), 0.0, "ij"),  # EVA-02 at another size than its trained 16 x 16
    ("eva", (3, 5), 0, None, 0.0, "ij"),
    # The Perception Encoder: indices from 1, the column's frequencies first, on a grid that is
    # not square (rows and columns stretched each by its own count) and on its trained one
    ("eva", (3, 5), 1, (24, 24), 1.0, "xy"),
    ("eva", (4, 4), 1, (4, 4), 1.0, "xy"),
    ("eva", (3, 5), 0, (32, 32), 0.0, "xy"),  # PE-core G: no class token, no offset
    ("dinov3", (3, 5), 1, None, 0.5, "xy"),  # the options in the other style too
]


@pytest.mark.parametrize("style,grid,prefix,reference,offset,indexing", CASES)
def test_the_rotation_is_timms(style, grid, prefix, reference, offset, indexing):
    import_timm()
    import torch
    from timm.layers import apply_rot_embed_cat

    heads, head_dim = 3, 16
    rng = np.random.default_rng(0)
    tokens = prefix + grid[0] * grid[1]
    x = rng.standard_normal((2, heads, tokens, head_dim)).astype("float32")  # timm's layout
    embed = _timm_rope(style, head_dim, list(grid), reference, offset, indexing)
    q = torch.from_numpy(x)
    theirs = torch.cat([q[:, :, :prefix], apply_rot_embed_cat(q[:, :, prefix:], embed,
                                                              half=style == "dinov3")], dim=2)
    layer = RotaryPositionEmbedding(style, num_prefix_tokens=prefix,
                                    reference_grid=reference and reference[0],
                                    grid_offset=offset, grid_indexing=indexing)
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
    with pytest.raises(keras_vit.ArgumentError, match="grid_indexing must be one of ij, xy"):
        RotaryPositionEmbedding("eva", grid_indexing="yx")
    with pytest.raises(keras_vit.ArgumentError, match="grid_offset must be a finite number"):
        RotaryPositionEmbedding("eva", grid_offset=float("nan"))
    with pytest.raises(keras_vit.ArgumentError, match="divisible by 4"):
        RotaryPositionEmbedding("eva")(np.zeros((1, 4, 2, 6), "float32"))


def test_each_grid_option_changes_the_rotation():
    """The options are not ignored: an offset or the other indexing rotates otherwise (on a grid
    that is not square, where swapping the axes cannot give the same angles)."""
    x = np.random.default_rng(2).standard_normal((1, 1 + 15, 2, 16)).astype("float32")

    def rotated(**options):
        layer = RotaryPositionEmbedding("eva", num_prefix_tokens=1, reference_grid=24, **options)
        return np.asarray(layer(x, grid_shape=(3, 5)))

    plain = rotated()
    assert np.abs(rotated(grid_offset=1.0) - plain).max() > 0.1
    assert np.abs(rotated(grid_indexing="xy") - plain).max() > 0.1
