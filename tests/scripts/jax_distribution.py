"""Run as a script with KERAS_BACKEND=jax and two virtual devices
(XLA_FLAGS=--xla_force_host_platform_device_count=2): a few clipped, gradient-accumulated
updates on one device, under DataParallel and under ModelParallel, from the same weights
and the same batches. Prints one JSON line (RESULT ...) with the largest weight differences.
Arguments: the strategies to run ("data-parallel", "model-parallel"), and "clipping" to run
the one-device fit once more without clipping.
"""

import dataclasses
import json
import os
import sys

import keras
import numpy as np

from keras_vit.training import DEMO_VARIANT, build_model, get_recipe, make_optimizer
from keras_vit.training.placement import JaxDistributionPlacement, get_placement

assert keras.backend.backend() == "jax", keras.backend.backend()
import jax  # noqa: E402

BATCH, ACCUMULATION, UPDATES = 4, 2, 3
# The demo model with one block: what is split or replicated is each block's alike, and a
# block less is a smaller program for XLA to compile four times.
MODEL = dataclasses.replace(DEMO_VARIANT, depth=1)
rng = np.random.default_rng(0)
images = rng.uniform(-1, 1, (BATCH * ACCUMULATION * UPDATES, 16, 16, 3)).astype(np.float32)
labels = np.eye(10, dtype=np.float32)[rng.integers(0, 10, len(images))]
keras.utils.set_random_seed(0)
initial = [np.asarray(w) for w in build_model(MODEL, None, 16, 10).get_weights()]
# A random head, so that every weight gets a gradient (a zero head blocks the body's).
initial[-2] = rng.normal(0, 0.1, initial[-2].shape).astype(np.float32)


def fit(strategy_name, clip):
    placement = get_placement(strategy_name, MODEL)
    # "none" is one device on any backend; the others are keras.distribution's.
    assert isinstance(placement, JaxDistributionPlacement) == (strategy_name != "none"), placement
    with placement.scope():
        model = build_model(MODEL, None, 16, 10)
        model.set_weights(initial)
        recipe = get_recipe("finetune", learning_rate=0.1, warmup_steps=0, clipnorm=clip,
                            batch_size=BATCH, global_batch_size=BATCH * ACCUMULATION)
        model.compile(optimizer=make_optimizer(recipe, total_updates=10,
                                               accumulation=ACCUMULATION),
                      loss=keras.losses.CategoricalCrossentropy(from_logits=True))
    with placement.run_scope():
        model.fit(images, labels, batch_size=BATCH, epochs=1, verbose=0, shuffle=False)
    qkv = model.get_layer("encoderblock_0").attention.qkv_kernel.value
    return model, {
        "strategy": type(placement.strategy).__name__, "replicas": placement.num_replicas,
        "iterations": int(keras.ops.convert_to_numpy(model.optimizer.iterations)),
        "qkv_devices": len(qkv.sharding.device_set),
        "qkv_shard_shape": list(qkv.sharding.shard_shape(qkv.shape)),
    }


def max_diff(a, b):
    return max(float(np.max(np.abs(x - y))) for x, y in zip(a, b))


result = {"devices": jax.device_count()}
reference, result["none"] = fit("none", 0.05)
reference_weights = reference.get_weights()
result["max_abs_update"] = max_diff(reference_weights, initial)
names = [name for name in sys.argv[1:] if name != "clipping"]
if "clipping" in sys.argv[1:]:
    unclipped, _ = fit("none", None)
    result["clipping_changed_weights_by"] = max_diff(unclipped.get_weights(), reference_weights)
for name in names:
    model, result[name] = fit(name, 0.05)
    result[name]["max_abs_diff"] = max_diff(model.get_weights(), reference_weights)
print("RESULT " + json.dumps(result))
os.sys.stdout.flush()
