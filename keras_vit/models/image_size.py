"""The image size a built model's images are resized to, for every caller that feeds one
(predict, evaluate, export, calibration): its input's, or for a model built with
`dynamic_image_size=True` (any size at call time) the size its position embeddings are
stored for, which is the size it was trained at. A NaFlex model, which takes each image at its
own aspect ratio, is fed images of one size (train, the one-size exports, analyze) at its stored
grid's (keras_vit/runtime/naflex_inputs cuts them into its patches)."""

from keras_vit.errors import ArgumentError
from keras_vit.layer_names import EMBEDDING, PATCHES, POSEMBED_INPUT


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


def naflex_layout(model):
    """(patch size, stored token count) of a NaFlex model (SigLIP 2 NaFlex); None for a model
    that takes images. The stored count is its default sequence budget."""
    names = getattr(model, "input_names", None) or [getattr(t, "name", "") for t in
                                                    getattr(model, "inputs", None) or []]
    if PATCHES not in {str(n).split(":")[0] for n in names}:
        return None
    rows, cols = model.get_layer(POSEMBED_INPUT).grid_size
    return model.get_layer(EMBEDDING).patch_size, rows * cols


def refuse_naflex(model, what):
    """A NaFlex model takes packed patches, not images: refused in one line where `what` needs
    a model of images (preprocessing to its input, timm's config)."""
    if naflex_layout(model) is not None:
        raise ArgumentError(f"{model.name} is a NaFlex model: it takes each image's patches at "
                            "its own aspect ratio (keras_vit.runtime.naflex_inputs), not images, "
                            f"which {what} needs; predict, evaluate, train and export run it.")


def image_size(model):
    """(height, width) a model's images are resized to; (None, None) where its input says
    neither and it is no ViT that takes any size. A NaFlex model: its stored grid's size,
    the one size train and the one-size exports feed it."""
    if naflex_layout(model) is not None:
        return stored_size(model)
    height, width = tuple(model.input_shape[1:3])
    if (height is None or width is None) and takes_any_size(model):
        return stored_size(model)
    return height, width
