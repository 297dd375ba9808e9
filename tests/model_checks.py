"""`check_model`: the checks every model of every variant table passes, in one call (the
model-level twin of tests/layer_checks.py).

    check_model(lambda **kw: keras_vit.ViT(variant, **kw), image_size=(32, 48), classes=7,
                expected_params=..., tmp_path=tmp_path)

1. forward shape: `(batch, classes)` logits, finite, from a rectangular image (rows and
   columns kept apart);
2. `.keras`: saved and loaded through keras_vit's one loader (`keras_vit.models.factory`,
   safe mode on), the same outputs bit for bit and the same layer names;
3. `save_npz` -> strict reload: the official-layout file loads into a freshly built model
   (`load_weights` raises on any missing, extra or misshapen key) with the same outputs;
4. parameter count: exactly `expected_params`, the table's count of the model as built.

Every weight is drawn at random first, so outputs cannot agree by zero initialisers alone
(the head starts at zero).
"""

import gc

import keras
import numpy as np

import keras_vit
from keras_vit.models.factory import load_keras

__all__ = ["check_model", "vit_params", "bit_params"]


def check_model(build, image_size, classes, expected_params, tmp_path, seed=0):
    """Runs the four checks on `build(image_size=image_size, classes=classes)`, holding one
    model at a time."""
    model = build(image_size=image_size, classes=classes)
    name = model.name
    assert model.count_params() == expected_params, \
        f"{name}: {model.count_params():,} parameters, the table says {expected_params:,}"
    _randomize(model, seed)
    x = np.random.default_rng(seed + 1).uniform(-1, 1, (2, *image_size, 3)).astype("float32")
    expected = _numpy(model(x))
    assert expected.shape == (2, classes), f"{name}: logits {expected.shape}"
    assert np.all(np.isfinite(expected)) and np.abs(expected).max() > 0, name

    path, npz = tmp_path / f"{name}.keras", str(tmp_path / f"{name}.npz")
    model.save(path)
    keras_vit.save_npz(model, npz)
    layer_names = [layer.name for layer in model.layers]
    # One model alive at a time from here: Keras' load_model reads a .keras file's weights
    # into memory whole (2.9x BiT-R152x4's 3.7 GB at its peak), and beside the saved model
    # that peaked at 15 GB, more than the slow suite's workers left free. A Keras model holds
    # reference cycles: gc frees it, `del` alone does not.
    del model
    gc.collect()

    restored = load_keras(path)
    np.testing.assert_array_equal(_numpy(restored(x)), expected,
                                  err_msg=f"{name}: .keras round trip changes the output")
    assert [layer.name for layer in restored.layers] == layer_names
    del restored
    gc.collect()

    fresh = build(image_size=image_size, classes=classes)
    keras_vit.load_weights(fresh, npz)  # strict: any missing, extra or misshapen key raises
    np.testing.assert_allclose(_numpy(fresh(x)), expected, rtol=1e-6, atol=1e-6,
                               err_msg=f"{name}: save_npz -> load_weights changes the output")


def vit_params(variant, full_count, image_size, classes, depth=None):
    """The parameters of `variant` built with `depth` blocks at `image_size` with `classes`,
    from its count at full depth, 224 px and 1000 classes (the table's)."""
    d, m = variant.width, variant.mlp_dim
    block = 2 * 2 * d + (3 * d * d + 3 * d) + (d * d + d) + (d * m + m) + (m * d + d)
    prefix = int(variant.classifier == "token")
    tokens = prefix + int(np.prod(variant.token_grid(image_size)))
    tokens_224 = prefix + int(np.prod(variant.token_grid((224, 224))))
    depth = variant.depth if depth is None else depth
    return (full_count - (variant.depth - depth) * block - (tokens_224 - tokens) * d
            - (1000 - classes) * (d + 1))


def bit_params(variant, full_count, classes):
    """A BiT's parameters with `classes`, from its count with 1000 (any image size)."""
    return full_count - (1000 - classes) * (variant.channels + 1)


def _randomize(model, seed):
    rng = np.random.default_rng(seed)
    for weight in model.weights:
        weight.assign((0.05 * rng.standard_normal(weight.shape)).astype(weight.dtype))


def _numpy(tensor):
    return keras.ops.convert_to_numpy(tensor)
