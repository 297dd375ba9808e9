"""`AddPositionEmbedding(dynamic_grid=True, resize=...)` resizes inside the call exactly as
`resize_position_embedding(..., method=...)` resizes at load, for every method: a model
resizes in the call as its weights' library does (the loader sets `resize`), also in a
compiled graph whose grid is only known at run time. Each method's own values are checked
against its library elsewhere (tests/checkpoints/test_position_resize.py, the timm and
transformers resize tests); this checks the in-call path repeats them.

Tolerance: the call builds its matrices in float32, the load in float64; embeddings of order
1 through at most 8 taps a row: 1e-5 absolute.
"""

import numpy as np
import pytest
import tensorflow as tf

import keras_vit
from keras_vit.layers.tokens import POSITION_RESIZES

GRID, PREFIX, WIDTH = (4, 5), 1, 8
# Larger, smaller, and one axis each way.
OTHER_GRIDS = [(6, 7), (3, 2), (2, 9)]


def _layer(method):
    layer = keras_vit.AddPositionEmbedding(GRID, num_prefix_tokens=PREFIX, dynamic_grid=True,
                                           resize=method)
    layer.build((None, None, WIDTH))
    stored = np.random.default_rng(0).standard_normal(layer.pos_embedding.shape)
    layer.pos_embedding.assign(stored.astype("float32"))
    return layer, stored.astype("float32")


@pytest.mark.parametrize("method", POSITION_RESIZES)
def test_the_call_resizes_as_the_load_does(method):
    layer, stored = _layer(method)

    @tf.function(input_signature=[tf.TensorSpec((None, None, WIDTH)),
                                  tf.TensorSpec((None, None, None, WIDTH))])
    def traced(tokens, grid):  # the grid's size is unknown when traced
        return layer(tokens, grid=grid)

    for rows, cols in OTHER_GRIDS:
        tokens = np.zeros((1, PREFIX + rows * cols, WIDTH), "float32")
        grid = np.zeros((1, rows, cols, WIDTH), "float32")
        expected = keras_vit.resize_position_embedding(stored, GRID, (rows, cols), PREFIX,
                                                       method=method)
        np.testing.assert_allclose(np.asarray(layer(tokens, grid=grid)), expected, atol=1e-5)
        np.testing.assert_allclose(traced(tokens, grid).numpy(), expected, atol=1e-5)


# TensorFlow's antialiased bicubic (keras-hub's registers presets) is torch's antialiased one.
SAME = {("bicubic", "keras_bicubic_antialias")}


def test_the_methods_differ_and_the_layer_keeps_its_own():
    """The test above can fail: no two methods give the same embedding here (but the pair that
    is one resize); and the layer's config carries its method, an unknown one refused in one
    line."""
    stored = _layer("linear")[1]
    resized = {m: keras_vit.resize_position_embedding(stored, GRID, (3, 7), PREFIX, method=m)
               for m in POSITION_RESIZES}
    for a in POSITION_RESIZES:
        for b in POSITION_RESIZES:
            if a < b:
                difference = np.abs(resized[a] - resized[b]).max()
                assert (difference < 1e-5) if (a, b) in SAME else (difference > 1e-3), (a, b)
    config = _layer("torch_bicubic")[0].get_config()
    assert keras_vit.AddPositionEmbedding.from_config(config).resize == "torch_bicubic"
    with pytest.raises(keras_vit.ArgumentError, match="method must be one of") as raised:
        keras_vit.AddPositionEmbedding(GRID, resize="nearest")
    assert "\n" not in str(raised.value)
