"""The image size a built model's images are resized to, for every caller that feeds one
(predict, evaluate, export, calibration): its input's, or for a model built with
`dynamic_image_size=True` (any size at call time) the size its position embeddings are
stored for, which is the size it was trained at."""

from keras_vit.layer_names import EMBEDDING, POSEMBED_INPUT


def takes_any_size(model):
    """Whether `model` resizes its position embeddings to each image at call time."""
    try:
        return bool(getattr(model.get_layer(POSEMBED_INPUT), "dynamic_grid", False))
    except (ValueError, AttributeError):  # no such layer, or no get_layer (a stand-in)
        return False


def stored_size(model):
    """(height, width) in pixels of the grid a ViT's position embeddings are stored for."""
    grid = model.get_layer(POSEMBED_INPUT).grid_size
    patch = model.get_layer(EMBEDDING).patch_size
    return grid[0] * patch, grid[1] * patch


def image_size(model):
    """(height, width) a model's images are resized to; (None, None) where its input says
    neither and it is no ViT that takes any size."""
    height, width = tuple(model.input_shape[1:3])
    if (height is None or width is None) and takes_any_size(model):
        return stored_size(model)
    return height, width
