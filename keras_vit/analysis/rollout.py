"""Attention rollout (Abnar & Zuidema 2020), as in the ViT paper's figures 6 and 14."""

import dataclasses

import numpy as np
from keras import ops

from keras_vit.errors import ArgumentError

__all__ = ["RolloutResult", "rollout", "attention_rollout", "overlay"]


@dataclasses.dataclass
class RolloutResult:
    """joint: `(batch, tokens, tokens)` rolled-out attention, rows sum to 1.
    heatmap: `(batch, rows, columns)` attention from the output to each patch.
    upsampled: `(batch, height, width)` the heatmap resized to the image, scaled
    to [0, 1] per image; None when no image size was given.
    """

    joint: np.ndarray
    heatmap: np.ndarray
    upsampled: np.ndarray | None


def rollout(attention, residual=True):
    """Rolls attention out through the layers.

    Args:
        attention: `(layers, batch, heads, tokens, tokens)`, rows summing to 1.
        residual: add the identity for the skip connection before multiplying
            (each layer becomes `(A + I) / 2`, rows renormalised).

    Returns:
        `(batch, tokens, tokens)`: `A_L' @ ... @ A_1'` with `A_l'` the
        head-averaged (and residual-mixed) attention of layer l.
    """
    attention = np.asarray(attention)
    if attention.ndim != 5 or attention.shape[-1] != attention.shape[-2]:
        raise ArgumentError("attention must have shape (layers, batch, heads, tokens, tokens), "
                            f"got {attention.shape}.")
    per_layer = attention.mean(axis=2, dtype=np.float64)  # (layers, batch, tokens, tokens)
    if residual:
        per_layer = per_layer + np.eye(per_layer.shape[-1])
        per_layer = per_layer / per_layer.sum(axis=-1, keepdims=True)
    joint = per_layer[0]
    for layer in per_layer[1:]:
        joint = layer @ joint
    return joint


def attention_rollout(attention, grid_size, num_prefix_tokens=1, image_size=None,
                      residual=True, class_token=None):
    """Rollout heatmaps over the patch grid, and optionally upsampled to the image.

    The heatmap is the class token's row of the rolled-out attention over the
    patch tokens; a model without a class token (global average pooling, or
    SigLIP's attention-pooling MAP head, whose learned probe is no token of the
    encoder) uses the mean of the patch tokens' rows, the tokens its pooling reads.
    Prefix tokens other than the class token (DeiT's distillation token,
    DINOv2's register tokens) are dropped from every layer's attention, as
    rows and columns, before the roll-out, each row renormalised to sum to 1:
    the registers paper (Darcet et al. 2024) reads the class token's attention
    over the patches with the registers left out.

    Args:
        attention: `(layers, batch, heads, tokens, tokens)`, e.g.
            `AttentionProbe(model)(images).attention`.
        grid_size: `(rows, columns)` of the patch grid (`probe.grid_size`).
        num_prefix_tokens: the tokens before the patches (class, distillation and
            register tokens; `probe.num_prefix_tokens`).
        image_size: `(height, width)` to upsample to (bilinear), or None.
        residual: see `rollout`.
        class_token: whether the first prefix token is a class token; None: whether
            there is any prefix token.

    Returns:
        `RolloutResult`; its `joint` covers the tokens kept (the class token, if
        any, then the patches).
    """
    rows, cols = grid_size
    attention = np.asarray(attention)
    if attention.ndim != 5 or attention.shape[-1] != num_prefix_tokens + rows * cols:
        raise ArgumentError(f"Attention of shape {attention.shape} does not match a {rows}x{cols} "
                            f"grid with {num_prefix_tokens} prefix token(s).")
    class_token = num_prefix_tokens > 0 if class_token is None else class_token
    kept = int(class_token)
    if num_prefix_tokens > kept:  # distillation or register tokens: out of every layer
        keep = np.r_[:kept, num_prefix_tokens:attention.shape[-1]]
        attention = attention[..., keep[:, None], keep]
        attention = attention / np.maximum(attention.sum(axis=-1, keepdims=True), 1e-30)
    joint = rollout(attention, residual=residual)
    from_output = joint[:, 0, kept:] if class_token else joint[:, kept:, kept:].mean(axis=1)
    heatmap = from_output.reshape(-1, rows, cols)
    upsampled = None
    if image_size is not None:
        upsampled = upsample(heatmap, image_size)
    return RolloutResult(joint=joint, heatmap=heatmap, upsampled=upsampled)


def upsample(heatmap, image_size):
    """`(batch, rows, columns)` -> `(batch, height, width)`, bilinear, each in [0, 1]."""
    resized = ops.image.resize(np.asarray(heatmap, np.float32)[..., None], tuple(image_size),
                               interpolation="bilinear", data_format="channels_last")
    resized = np.asarray(ops.convert_to_numpy(resized))[..., 0]
    low = resized.min(axis=(1, 2), keepdims=True)
    high = resized.max(axis=(1, 2), keepdims=True)
    return (resized - low) / np.maximum(high - low, 1e-12)


def overlay(images, upsampled, alpha=0.6, colormap="inferno"):
    """Blends images with their upsampled rollout maps for display.

    Args:
        images: `(batch, height, width, channels)` in [0, 255] or [-1, 1]
            (channels 1 or 3).
        upsampled: `(batch, height, width)` in [0, 1].
        alpha: weight of the heat colour.

    Returns:
        `(batch, height, width, 3)` float RGB in [0, 1].
    """
    import matplotlib  # plotting stays optional at import time

    images = _to_unit_rgb(images)
    upsampled = np.asarray(upsampled)
    if upsampled.shape != images.shape[:3]:
        raise ArgumentError(f"Heatmaps {upsampled.shape} do not match images {images.shape[:3]}.")
    heat = matplotlib.colormaps[colormap](upsampled)[..., :3]
    return (1 - alpha) * images + alpha * heat


def _to_unit_rgb(images):
    images = np.asarray(images, dtype=np.float32)
    if images.ndim != 4 or images.shape[-1] not in (1, 3):
        raise ArgumentError(f"Images must be (batch, height, width, 1 or 3), got {images.shape}.")
    if images.min() < 0:  # preprocessed [-1, 1]
        images = (images + 1) / 2
    elif images.max() > 1:  # [0, 255]
        images = images / 255
    images = np.clip(images, 0, 1)
    return np.repeat(images, 3, axis=-1) if images.shape[-1] == 1 else images
