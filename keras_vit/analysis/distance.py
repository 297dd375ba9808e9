"""Mean attention distance per layer and head (the ViT paper's figures 7 and 11)."""

import numpy as np

from keras_vit.errors import ArgumentError

__all__ = ["mean_attention_distance", "patch_distances"]


def patch_distances(grid_size, stride):
    """`(N, N)` Euclidean distances in pixels between the centres of the N patches.

    Patches are in row-major order on a `(rows, columns)` grid; `stride` is
    pixels per token, an int or `(vertical, horizontal)`.
    """
    rows, cols = grid_size
    stride_y, stride_x = (stride, stride) if np.isscalar(stride) else stride
    y, x = np.meshgrid(np.arange(rows) * stride_y, np.arange(cols) * stride_x, indexing="ij")
    centres = np.stack([y.ravel(), x.ravel()], axis=-1).astype(np.float64)
    return np.linalg.norm(centres[:, None] - centres[None], axis=-1)


def mean_attention_distance(attention, grid_size, stride, num_prefix_tokens=1,
                            renormalize=True):
    """Mean attention distance in pixels, per layer and head.

    For each query patch q: `sum_k A[q, k] * distance(q, k)`, then the mean
    over query patches and images. The prefix tokens (class, distillation and
    register tokens) have no position on the image, so they are dropped as
    queries and as keys, as the registers paper leaves its registers out. With `renormalize=True`
    (default) each query's weights over the patches are rescaled to sum to 1,
    so the result is a true expected distance whatever share of attention
    went to the prefix tokens; with False that share simply counts as distance
    zero, which lowers the value by that share.

    Args:
        attention: `(layers, batch, heads, tokens, tokens)` or one layer's
            `(batch, heads, tokens, tokens)`.
        grid_size: `(rows, columns)` of the patch grid.
        stride: pixels per token, int or `(vertical, horizontal)`.
        num_prefix_tokens: the tokens before the patches (`probe.num_prefix_tokens`).
        renormalize: see above.

    Returns:
        `(layers, heads)` (or `(heads,)` for one layer) distances in pixels.
    """
    attention = np.asarray(attention)
    if attention.ndim not in (4, 5):
        raise ArgumentError("attention must have shape (layers, batch, heads, tokens, tokens) or "
                            f"(batch, heads, tokens, tokens), got {attention.shape}.")
    rows, cols = grid_size
    if attention.shape[-1] != attention.shape[-2] or \
            attention.shape[-1] != num_prefix_tokens + rows * cols:
        raise ArgumentError(f"Attention over {attention.shape[-2:]} tokens does not match a "
                            f"{rows}x{cols} grid with {num_prefix_tokens} prefix token(s).")
    distances = patch_distances(grid_size, stride)

    def one_layer(layer):  # (batch, heads, tokens, tokens) -> (heads,)
        # One layer at a time in float64: the whole stack at once would need
        # gigabytes for a B/16 batch.
        patches = layer[..., num_prefix_tokens:, num_prefix_tokens:].astype(np.float64)
        if renormalize:
            patches = patches / np.maximum(patches.sum(axis=-1, keepdims=True), 1e-12)
        per_query = (patches * distances).sum(axis=-1)  # (batch, heads, queries)
        return per_query.mean(axis=(0, 2))

    if attention.ndim == 4:
        return one_layer(attention)
    return np.stack([one_layer(layer) for layer in attention])
