"""What the embeddings learned: position-embedding similarity, patch-filter components."""

import dataclasses

import keras
import numpy as np
from sklearn.decomposition import PCA

from keras_vit.errors import ArgumentError
from keras_vit.layers import AddPositionEmbedding, PatchEncoder
from keras_vit.layers.naflex import NaFlexPatchEmbedding, NaFlexPositionEmbedding

__all__ = ["position_embedding_similarity", "patch_embedding_components",
           "PatchComponents"]


def position_embedding_similarity(model_or_embedding, grid_size=None, num_prefix_tokens=None):
    """Cosine similarity of every patch's position embedding with every other's.

    Args:
        model_or_embedding: a keras_vit model, or a position embedding array
            `(1, prefix + rows * columns, D)` or `(prefix + rows * columns, D)`.
        grid_size: `(rows, columns)`; read from the model when one is given.
        num_prefix_tokens: prefix (class) tokens to skip; read from the model
            when one is given.

    Returns:
        `(rows, columns, rows, columns)`: entry `[i, j]` is the grid of
        similarities of patch (i, j)'s embedding with every patch's - the
        paper's figure 7 (middle), a grid of grids.
    """
    if isinstance(model_or_embedding, keras.Model):
        layer = _single_layer(model_or_embedding, (AddPositionEmbedding, NaFlexPositionEmbedding))
        embedding = keras.ops.convert_to_numpy(layer.pos_embedding)
        grid_size = grid_size or layer.grid_size
        num_prefix_tokens = layer.num_prefix_tokens if num_prefix_tokens is None \
            else num_prefix_tokens
    else:
        embedding = np.asarray(model_or_embedding)
        if grid_size is None or num_prefix_tokens is None:
            raise ArgumentError("With an embedding array, give grid_size and num_prefix_tokens.")
    embedding = np.asarray(embedding, dtype=np.float64)
    if embedding.ndim == 3 and embedding.shape[0] == 1:
        embedding = embedding[0]
    rows, cols = grid_size
    if embedding.ndim != 2 or embedding.shape[0] != num_prefix_tokens + rows * cols:
        raise ArgumentError(f"A {rows}x{cols} grid with {num_prefix_tokens} prefix token(s) needs "
                            f"a ({num_prefix_tokens + rows * cols}, D) embedding, got "
                            f"{embedding.shape}.")
    grid = embedding[num_prefix_tokens:]
    unit = grid / np.maximum(np.linalg.norm(grid, axis=-1, keepdims=True), 1e-12)
    return (unit @ unit.T).reshape(rows, cols, rows, cols)


@dataclasses.dataclass
class PatchComponents:
    """components: `(k, P, P, channels)` principal filters, unit norm, by variance.
    explained_variance_ratio: `(k,)` share of the filters' variance each explains.
    """

    components: np.ndarray
    explained_variance_ratio: np.ndarray


def patch_embedding_components(model_or_kernel, num_components=28):
    """Principal components of the patch-embedding filters (the paper's figure 7, left).

    Each of the D filters of the P x P patch projection is a point in
    P * P * channels dimensions; PCA over the D filters gives the directions
    the embedding varies along most. For hybrid models the "patches" are
    1 x 1 on the ResNet's feature channels, so the components are not images.

    Args:
        model_or_kernel: a keras_vit model, or a kernel `(P, P, channels, D)`.
        num_components: how many to return (at most min(D, P * P * channels)).

    Returns:
        `PatchComponents`.
    """
    if isinstance(model_or_kernel, keras.Model):
        # a NaFlex model's Dense on flattened patches keeps the convolution's kernel
        kernel = keras.ops.convert_to_numpy(_single_layer(
            model_or_kernel, (PatchEncoder, NaFlexPatchEmbedding)).kernel)
    else:
        kernel = np.asarray(model_or_kernel)
    if kernel.ndim != 4:
        raise ArgumentError(f"A patch-embedding kernel has shape (P, P, channels, D), got "
                            f"{kernel.shape}.")
    height, width, channels, filters = kernel.shape
    limit = min(filters, height * width * channels)
    if not 1 <= num_components <= limit:
        raise ArgumentError(f"num_components must be between 1 and {limit} for a kernel of shape "
                            f"{kernel.shape}, got {num_components}.")
    points = kernel.reshape(-1, filters).T.astype(np.float64)  # (D, P * P * channels)
    pca = PCA(n_components=num_components).fit(points)
    components = pca.components_.reshape(num_components, height, width, channels)
    return PatchComponents(components, pca.explained_variance_ratio_)


def _single_layer(model, layer_types):
    layers = [layer for layer in model.layers if isinstance(layer, layer_types)]
    if len(layers) != 1:
        kinds = " or ".join(t.__name__ for t in (
            layer_types if isinstance(layer_types, tuple) else (layer_types,)))
        raise ArgumentError(f"Model {model.name!r} has {len(layers)} {kinds} layers; "
                            "expected exactly one (is it a keras_vit model?).")
    return layers[0]
