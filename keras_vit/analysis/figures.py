"""`analyze`: every figure and number of the analysis for a set of images, written to a folder.

The library half of `keras-vit analyze` (keras_vit/cli/analyze.py parses the
arguments and calls it):

    written = analyze(model, ["photos/"], "analysis/")
"""

import json
import os

import numpy as np

from keras_vit.analysis.embeddings import patch_embedding_components, position_embedding_similarity
from keras_vit.analysis.plots import (
    plot_attention_rollout,
    plot_mean_attention_distance,
    plot_patch_embedding_components,
    plot_position_embedding_similarity,
)
from keras_vit.analysis.probe import AttentionProbe
from keras_vit.atomic import atomic_open
from keras_vit.errors import ArgumentError
from keras_vit.layer_names import EMBEDDING
from keras_vit.layers import AddPositionEmbedding
from keras_vit.layers.naflex import NaFlexPositionEmbedding
from keras_vit.normalization import model_input
from keras_vit.preprocessing import MAX_PIXELS, image_paths, load_image

__all__ = ["analyze"]


def analyze(model, images, output_dir, max_images=128, rollout_images=6, batch_size=8,
            max_pixels=MAX_PIXELS):
    """Writes the paper-style analysis of `model` on `images` into `output_dir`.

    Args:
        model: a keras_vit model, plain or hybrid.
        images: image files or folders of them (the first `max_images`, decoded
            and resized to the model's input, each under `max_pixels`), or
            pixels `(N, H, W, C)` in [0, 255] at the model's input size.
        output_dir: the folder to write into (created if missing).
        max_images: images used for the attention distance (the paper uses 128).
        rollout_images: the first images, shown in the rollout figure.
        batch_size: images per forward pass.

    Returns:
        The paths written, in this order: attention_rollout.png,
        attention_distance.png, position_embedding_similarity.png (models
        with a learned position embedding: DINOv3's rotary one has no table to
        compare), patch_embedding_components.png (models with 1 or 3 input
        channels only) and analysis.json (the numbers).
    """
    probe = AttentionProbe(model)
    pixels, titles = _pixels(images, probe.image_size, probe.channels, max_images, max_pixels)
    # The pixels the model's weights expect: [-1, 1], its source's mean/std (DINOv2's
    # ImageNet one), or nothing when it preprocesses itself.
    inputs = np.asarray(model_input(model)(pixels), np.float32)
    os.makedirs(output_dir, exist_ok=True)
    shown = slice(0, rollout_images)
    rollout = probe.attention_rollout(inputs[shown], batch_size=batch_size)
    written = [plot_attention_rollout(
        os.path.join(output_dir, "attention_rollout.png"), pixels[shown], rollout.upsampled,
        titles=titles and titles[shown])]
    distances = probe.mean_attention_distance(inputs, batch_size=batch_size)
    written.append(plot_mean_attention_distance(
        os.path.join(output_dir, "attention_distance.png"), distances, probe.image_size,
        title=f"{model.name}, {len(inputs)} images"))
    if any(isinstance(layer, (AddPositionEmbedding, NaFlexPositionEmbedding))
           for layer in model.layers):
        written.append(plot_position_embedding_similarity(
            os.path.join(output_dir, "position_embedding_similarity.png"),
            position_embedding_similarity(model),
            title=f"{model.name} position embedding similarity"))
    kernel_shape = model.get_layer(EMBEDDING).kernel.shape
    components = None
    if kernel_shape[2] in (1, 3):  # the components are shown as images
        components = patch_embedding_components(
            model, num_components=min(28, kernel_shape[-1], int(np.prod(kernel_shape[:3]))))
        written.append(plot_patch_embedding_components(
            os.path.join(output_dir, "patch_embedding_components.png"), components.components,
            title=f"{model.name} patch-embedding components"))
    report = {
        "model": model.name, "images": len(inputs), "image_size": list(probe.image_size),
        "grid_size": list(probe.grid_size), "stride": list(probe.stride),
        "mean_attention_distance_pixels": np.round(distances, 3).tolist(),
        # The rollout figure's maps before upsampling: the class token's attention over the
        # patches (the patch rows' mean without one), distillation and register tokens left out.
        "attention_rollout_heatmaps": np.round(rollout.heatmap, 6).tolist(),
        "patch_components_explained_variance": None if components is None else
        np.round(components.explained_variance_ratio, 5).tolist(),
    }
    written.append(os.path.join(output_dir, "analysis.json"))
    with atomic_open(written[-1], "w", encoding="utf-8") as file:
        json.dump(report, file, indent=2)
    return written


def _pixels(images, image_size, channels, max_images, max_pixels):
    """`(pixels (N, H, W, C) in [0, 255], a title per image or None)`."""
    if isinstance(images, np.ndarray):
        expected = (*image_size, channels)
        if images.ndim != 4 or tuple(images.shape[1:]) != expected:
            raise ArgumentError(f"images must be pixels (N, {', '.join(map(str, expected))}) "
                                f"for this model, got shape {images.shape}.")
        return images[:max_images].astype(np.float32), None
    if isinstance(images, (str, os.PathLike)):
        images = [images]
    paths = image_paths(images)[:max_images]
    pixels = np.stack([load_image(path, image_size, channels=channels, max_pixels=max_pixels)
                       for path in paths])
    return pixels, [os.path.basename(path) for path in paths]
