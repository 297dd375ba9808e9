"""`train` on a NaFlex model (SigLIP 2 NaFlex's architecture, shrunk): its pipeline's images, of
one size, reach the model as their patches and grid (runtime/naflex_inputs.batch_patches).

The reference is the same architecture taking images (`patch_input="image"`, a patch
convolution and a learned position embedding at the same grid) trained from the same official
arrays on the same batches: at its stored grid a NaFlex model computes that function, so the
two runs' losses and weights agree to float32 rounding, while patches cut in another order
(columns first, or channels first as transformers' Gemma layout) give another function and
another run. Measured here: equal bit for bit. The bounds: a relative 1e-5 on the logged
losses (means of float32 cross-entropies of logits computed by the same operations in another
order), and 1e-3 of the largest change training made on every weight (three AdamW updates
whose gradients agree to rounding).
"""

import csv
import dataclasses
import json

import keras
import numpy as np
import pytest

import keras_vit
from keras_vit.checkpoints.layout import official_arrays
from keras_vit.errors import ArgumentError
from keras_vit.training.recipes import get_recipe
from tests.oracle import import_timm

PATCH, SIZE = 4, 16  # digits upscaled to 16 px: a 4 x 4 grid, the stored one
NAFLEX = dataclasses.replace(keras_vit.get_variant("SigLIP2-B/16-naflex"), name="tiny-naflex",
                             width=32, depth=2, heads=2, mlp_dim=64, patch_size=PATCH,
                             image_size=SIZE, map_heads=2, map_mlp_dim=64)
# the same architecture taking images
IMAGES = dataclasses.replace(NAFLEX, name="tiny-naflex-as-images", patch_input="image")


def test_a_training_batch_is_timms_patches():
    """What train feeds: each image's patches in timm's NaFlex layout (`batch_patchify`: row
    by row, each patch flattened as row, column, channel) and its grid, on a 12 x 20 image."""
    import tensorflow as tf

    from keras_vit.runtime.naflex_inputs import batch_patches

    import_timm()  # timm's import on CPU torch (tests/oracle.py)
    import torch
    from timm.models.naflexvit import batch_patchify

    images = np.random.default_rng(0).normal(size=(2, 12, 20, 3)).astype(np.float32)
    ours = batch_patches(tf.constant(images), PATCH)
    theirs, grid = batch_patchify(torch.from_numpy(images).permute(0, 3, 1, 2), (PATCH, PATCH))
    np.testing.assert_array_equal(ours["patches"].numpy(), theirs.numpy())
    np.testing.assert_array_equal(ours["grid"].numpy(), [grid, grid])
    with pytest.raises(ArgumentError, match="not whole 4-pixel patches"):
        batch_patches(tf.constant(images[:, :10]), PATCH)


def _run(tmp_path, variant, weights, steps=3):
    output = tmp_path / variant.name
    recipe = get_recipe("finetune", global_batch_size=None, batch_size=16, image_size=SIZE)
    keras_vit.train(dataset="digits", model=variant, weights=weights, recipe=recipe,
                    steps=steps, output=str(output), seed=3, verbose=0)
    with open(output / "log.csv") as file:
        log = list(csv.DictReader(file))
    return log, keras.saving.load_model(output / "model.keras")


def test_a_naflex_model_trains_as_the_same_model_taking_images(tmp_path):
    initial = keras_vit.ViT(NAFLEX, classes=10)
    rng = np.random.default_rng(0)
    for weight in initial.weights:
        weight.assign(rng.normal(0, 0.3, weight.shape).astype(np.float32))
    weights = tmp_path / "initial.npz"  # official arrays, as vit_jax writes them
    np.savez(weights, **official_arrays(initial))

    naflex_log, naflex = _run(tmp_path, NAFLEX, str(weights))
    images_log, images = _run(tmp_path, IMAGES, str(weights))
    assert set(naflex.input) == {"patches", "grid"} and images.input_shape == (None, SIZE, SIZE, 3)
    assert len(naflex_log) == len(images_log) >= 1
    for ours, theirs in zip(naflex_log, images_log):
        for column in ("loss", "val_loss", "accuracy", "val_accuracy"):
            np.testing.assert_allclose(float(ours[column]), float(theirs[column]), rtol=1e-5)
    start, ours, theirs = (official_arrays(m) for m in (initial, naflex, images))
    assert set(ours) == set(theirs)
    moved = max(float(np.abs(theirs[k] - start[k]).max()) for k in theirs if k in start
                and start[k].shape == theirs[k].shape)
    assert moved > 0  # it trained
    for key in ours:
        np.testing.assert_allclose(ours[key], theirs[key], rtol=0, atol=1e-3 * moved, err_msg=key)


def test_train_refuses_a_naflex_model_it_cannot_feed(tmp_path):
    with pytest.raises(ArgumentError, match="image_size 18 is not whole 4-pixel patches"):
        keras_vit.train(dataset="digits", model=NAFLEX, image_size=18, recipe="scratch",
                        steps=1, output=str(tmp_path / "run"))
    with pytest.raises(ArgumentError, match="NaFlex model .* train it without a teacher"):
        keras_vit.train(dataset="digits", model=NAFLEX, teacher="demo", recipe="scratch",
                        steps=1, output=str(tmp_path / "run"))
    assert not (tmp_path / "run").exists()


def test_lora_layer_decay_and_augreg_train_a_naflex_model(tmp_path):
    """With LoRA (rank 2 on query and value), layer decay and AugReg's light1, the run records
    all three, and only the LoRA factors and the head train: every other weight of the saved
    (merged) model is the initial one, the query and value kernels excepted."""
    initial = keras_vit.ViT(NAFLEX, classes=10)
    weights = tmp_path / "initial.npz"
    np.savez(weights, **official_arrays(initial))
    output = tmp_path / "run"
    recipe = get_recipe("finetune", global_batch_size=None, batch_size=16, image_size=SIZE)
    keras_vit.train(dataset="digits", model=NAFLEX, weights=str(weights), recipe=recipe,
                    steps=2, output=str(output), lora_rank=2, layer_decay=0.75,
                    augment="light1", verbose=0)
    with open(output / "report.json") as file:
        report = json.load(file)
    assert report["lora"] == {"rank": 2, "targets": ["query", "value"]}
    assert report["recipe"]["layer_decay"] == 0.75 and report["recipe"]["randaugment"] == [2, 0]
    start = official_arrays(initial)
    trained = official_arrays(keras.saving.load_model(output / "model.keras"))
    moved = {key for key in start if not np.array_equal(start[key], trained[key])}
    assert moved and all("/query/kernel" in key or "/value/kernel" in key or
                         key.startswith("head/") for key in moved), sorted(moved)
