"""PNG figures in the style of the ViT paper's analyses.

Each helper writes one PNG of exactly `figsize * dpi` pixels (no tight
cropping, so sizes are predictable) and returns its path. Figures are drawn
with matplotlib's object API, not pyplot, so no display is needed and the
caller's pyplot state and backend are left alone.
"""


import numpy as np
from matplotlib.figure import Figure

from keras_vit.analysis.rollout import _to_unit_rgb, overlay
from keras_vit.errors import ArgumentError

__all__ = ["plot_attention_rollout", "plot_mean_attention_distance",
           "plot_position_embedding_similarity", "plot_patch_embedding_components"]


def plot_attention_rollout(path, images, upsampled, titles=None, dpi=100, panel_inches=2.0):
    """Each image above its rollout overlay (the paper's figure 6).

    Args:
        path: PNG file to write.
        images: `(batch, height, width, channels)` in [0, 255] or [-1, 1].
        upsampled: `(batch, height, width)` in [0, 1], `RolloutResult.upsampled`.
        titles: optional caption per image.

    Returns:
        `path`. The PNG is `(2 * panel_inches * dpi)` high and
        `(batch * panel_inches * dpi)` wide.
    """
    count = len(images)
    figure = Figure(figsize=(panel_inches * count, 2 * panel_inches), dpi=dpi)
    axes = figure.subplots(2, count, squeeze=False)
    blended = overlay(images, upsampled)
    for i, (image, blend) in enumerate(zip(_to_unit_rgb(images), blended)):
        axes[0, i].imshow(image)
        axes[1, i].imshow(blend)
        if titles is not None:
            axes[0, i].set_title(str(titles[i]), fontsize=8)
    for axis in axes.ravel():
        axis.axis("off")
    figure.subplots_adjust(left=0.02, right=0.98, bottom=0.02, top=0.9, wspace=0.05, hspace=0.05)
    return _save(figure, path)


def plot_mean_attention_distance(path, distances, image_size=None, title=None, dpi=100,
                                 figsize=(4.0, 3.5)):
    """One dot per head at each layer (the paper's figure 7, right).

    Args:
        path: PNG file to write.
        distances: `(layers, heads)` in pixels, from `mean_attention_distance`.
        image_size: `(height, width)`; when given, the y axis ends at the
            image diagonal's half, a scale for "local" and "global".

    Returns:
        `path`; the PNG is `figsize * dpi` pixels.
    """
    distances = np.asarray(distances)
    if distances.ndim != 2:
        raise ArgumentError(f"distances must be (layers, heads), got {distances.shape}.")
    layers, heads = distances.shape
    figure = Figure(figsize=figsize, dpi=dpi)
    axis = figure.subplots()
    for head in range(heads):
        axis.scatter(np.arange(layers), distances[:, head], s=12, label=f"head {head}")
    axis.set_xlabel("layer (network depth)")
    axis.set_ylabel("mean attention distance (pixels)")
    axis.set_xticks(np.arange(layers))
    if image_size is not None:
        axis.set_ylim(0, float(np.hypot(*image_size)) / 2)
    if heads <= 8:
        axis.legend(fontsize=6, loc="lower right")
    if title:
        axis.set_title(title, fontsize=9)
    figure.subplots_adjust(left=0.16, right=0.97, bottom=0.14, top=0.9)
    return _save(figure, path)


def plot_position_embedding_similarity(path, similarity, title=None, dpi=100, figsize=(4.5, 4.0)):
    """A grid of grids: patch (i, j)'s similarity to every patch (the paper's figure 7, middle).

    Args:
        path: PNG file to write.
        similarity: `(rows, columns, rows, columns)` from
            `position_embedding_similarity`.

    Returns:
        `path`; the PNG is `figsize * dpi` pixels.
    """
    similarity = np.asarray(similarity)
    if similarity.ndim != 4:
        raise ArgumentError(f"similarity must be (rows, columns, rows, columns), got "
                            f"{similarity.shape}.")
    rows, cols = similarity.shape[:2]
    figure = Figure(figsize=figsize, dpi=dpi)
    grid = figure.add_gridspec(rows, cols, left=0.08, right=0.82, bottom=0.08, top=0.9,
                               wspace=0.08, hspace=0.08)
    image = None
    for i in range(rows):
        for j in range(cols):
            axis = figure.add_subplot(grid[i, j])
            image = axis.imshow(similarity[i, j], vmin=-1, vmax=1, cmap="viridis")
            axis.set_xticks([])
            axis.set_yticks([])
            if j == 0:
                axis.set_ylabel(str(i + 1), fontsize=6)
            if i == rows - 1:
                axis.set_xlabel(str(j + 1), fontsize=6)
    colorbar_axis = figure.add_axes((0.85, 0.08, 0.03, 0.82))
    figure.colorbar(image, cax=colorbar_axis).set_label("cosine similarity", fontsize=8)
    figure.text(0.45, 0.01, "input patch column", ha="center", fontsize=8)
    figure.text(0.01, 0.5, "input patch row", va="center", rotation="vertical", fontsize=8)
    if title:
        figure.suptitle(title, fontsize=9)
    return _save(figure, path)


def plot_patch_embedding_components(path, components, columns=7, title=None, dpi=100,
                                    panel_inches=0.8):
    """The principal patch-embedding filters as small RGB images (the paper's figure 7, left).

    Args:
        path: PNG file to write.
        components: `(k, P, P, 1 or 3)`, `PatchComponents.components`.
        columns: images per row.

    Returns:
        `path`; the PNG is `(columns * panel_inches * dpi)` wide and
        `(ceil(k / columns) * panel_inches * dpi)` high, plus 0.3 inch for a title.
    """
    components = np.asarray(components)
    if components.ndim != 4 or components.shape[-1] not in (1, 3):
        raise ArgumentError("components must be (k, P, P, 1 or 3) image-like filters, got "
                            f"{components.shape}; hybrid models' 1x1 feature filters are not images.")
    count = len(components)
    rows = -(-count // columns)
    extra = 0.3 if title else 0.0
    figure = Figure(figsize=(columns * panel_inches, rows * panel_inches + extra), dpi=dpi)
    axes = figure.subplots(rows, columns, squeeze=False)
    for axis in axes.ravel():
        axis.axis("off")
    for axis, component in zip(axes.ravel(), components):
        # Each filter stretched to [0, 1] on its own, as the paper displays them.
        low, high = component.min(), component.max()
        shown = (component - low) / max(high - low, 1e-12)
        axis.imshow(shown[..., 0] if shown.shape[-1] == 1 else shown,
                    cmap="gray" if shown.shape[-1] == 1 else None, interpolation="nearest")
    top = 1 - extra / (rows * panel_inches + extra)
    figure.subplots_adjust(left=0.02, right=0.98, bottom=0.02, top=top - 0.02, wspace=0.1,
                           hspace=0.1)
    if title:
        figure.suptitle(title, fontsize=8)
    return _save(figure, path)


def _save(figure, path):
    from keras_vit.atomic import atomic_path

    with atomic_path(path) as tmp:  # makes the folder; a kill leaves no torn figure
        figure.savefig(tmp, dpi=figure.dpi)
    return path
