"""`remat` (gradient checkpointing per encoder block): the same loss, gradients and random
draws as without, the block recomputed in the backward pass; train's and resolve's handling."""

import dataclasses

import keras
import numpy as np
import pytest
import tensorflow as tf

from keras_vit.layers import TransformerBlock
from keras_vit.models import ViT
from keras_vit.training.settings import TrainSettings, resolve
from keras_vit.variants import Variant

TINY = Variant("ViT-tiny_4", width=32, depth=2, mlp_dim=64, heads=2, patch_size=4)


def _step(remat, monkeypatch):
    """(loss, gradients, the seed generators' states after, block runs) of one training-mode
    forward and backward pass of a tiny ViT with dropout, attention dropout and drop path."""
    keras.utils.set_random_seed(0)
    model = ViT(TINY, image_size=16, classes=5, dropout=0.1, attention_dropout=0.2,
                drop_path_rate=0.3)
    rng = np.random.default_rng(1)
    for weight in model.weights:
        weight.assign(rng.standard_normal(weight.shape).astype("float32") * 0.1)
    runs = []
    original = TransformerBlock._block

    def counted(self, *args, **kwargs):
        runs.append(self.name)
        return original(self, *args, **kwargs)

    monkeypatch.setattr(TransformerBlock, "_block", counted)
    blocks = [layer for layer in model._flatten_layers() if isinstance(layer, TransformerBlock)]
    for block in blocks:
        block.remat = remat
    images = rng.uniform(-1, 1, (4, 16, 16, 3)).astype("float32")
    with tf.GradientTape() as tape:
        loss = keras.ops.sum(model(images, training=True) ** 2)
    gradients = tape.gradient(loss, model.trainable_variables)
    states = [np.asarray(v) for v in model.non_trainable_variables if "seed" in v.path]
    return float(loss), [np.asarray(g) for g in gradients], states, len(runs)


def test_remat_gives_the_same_loss_gradients_and_draws(monkeypatch):
    loss, gradients, states, runs = _step(False, monkeypatch)
    remat_loss, remat_gradients, remat_states, remat_runs = _step(True, monkeypatch)
    # Two blocks; with remat each runs again in the backward pass (so the setting took effect:
    # a block that was not recomputed would pass the equalities below trivially).
    assert (runs, remat_runs) == (2, 4)
    # The recomputation is the forward pass's arithmetic on the same inputs and the same
    # dropout and drop-path masks (the generators' states set again): equal, not close.
    assert remat_loss == loss
    for plain, rematerialised in zip(gradients, remat_gradients, strict=True):
        np.testing.assert_array_equal(rematerialised, plain)
    assert states  # the generators exist, and the next step draws as without remat
    for plain, rematerialised in zip(states, remat_states, strict=True):
        np.testing.assert_array_equal(rematerialised, plain)


def test_inference_and_attention_scores_are_not_rematerialised(monkeypatch):
    block = TransformerBlock(2, 64)
    block.remat = True
    called = []
    monkeypatch.setattr(TransformerBlock, "_rematerialised", lambda *a, **k: called.append(1))
    x = np.zeros((1, 5, 32), "float32")
    block(x, training=False)
    block(x, training=True, return_attention_scores=True)
    assert called == []
    block(x, training=True)
    assert called == [1]


def test_remat_is_how_not_what():
    """A run with remat is the same run: its config (run.json, compared on a re-run) is
    the one without."""
    run, config = resolve(TrainSettings(model="demo", epochs=1, remat=True))
    plain_run, plain_config = resolve(TrainSettings(model="demo", epochs=1))
    assert run.remat is True and plain_run.remat is False
    assert config == plain_config
    assert dataclasses.replace(run, remat=False) == plain_run


@pytest.mark.parametrize("settings, message", [
    (dict(model="demo", remat="yes"), "remat must be True or False"),
    (dict(model="BiT-R50x1", remat=True), "remat works on a ViT's encoder blocks"),
])
def test_remat_refusals(settings, message):
    with pytest.raises(ValueError, match=message):
        resolve(TrainSettings(epochs=1, **settings))
