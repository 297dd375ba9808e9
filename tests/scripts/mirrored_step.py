"""Run as a script: MirroredStrategy over 2 logical CPUs vs one device.

Prints a JSON line with the largest weight difference after one step on the same
global batch, whether variables are mirrored, and a short fit's replica count.
"""

import dataclasses
import json
import sys

import tensorflow as tf

# Logical devices must be configured before TensorFlow initialises its runtime.
cpu = tf.config.list_physical_devices("CPU")[0]
tf.config.set_logical_device_configuration(cpu, [tf.config.LogicalDeviceConfiguration()] * 2)

import keras  # noqa: E402
import numpy as np  # noqa: E402

from keras_vit.training import DEMO_VARIANT, build_model, get_recipe, make_optimizer, train  # noqa: E402
from keras_vit.training.distribute import get_strategy  # noqa: E402

# The demo model with one block: each block is mirrored alike, and fewer variables make the
# four traced steps quicker to build.
MODEL = dataclasses.replace(DEMO_VARIANT, depth=1)
rng = np.random.default_rng(0)
images = rng.uniform(-1, 1, (8, 16, 16, 3)).astype(np.float32)
labels = np.eye(10, dtype=np.float32)[rng.integers(0, 10, 8)]
keras.utils.set_random_seed(0)
initial = [w.numpy() for w in build_model(MODEL, None, 16, 10).weights]
# A random head, so that every weight gets a gradient (a zero head blocks the body's).
initial[-2] = rng.normal(0, 0.1, initial[-2].shape).astype(np.float32)


def one_step(strategy, clip):
    with strategy.scope():
        model = build_model(MODEL, None, 16, 10)
        model.set_weights(initial)
        recipe = get_recipe("finetune", learning_rate=0.1, warmup_steps=0, clipnorm=clip)
        model.compile(optimizer=make_optimizer(recipe, total_updates=10),
                      loss=keras.losses.CategoricalCrossentropy(from_logits=True))
    data = tf.data.Dataset.from_tensor_slices((images, labels)).batch(8)  # the global batch
    model.fit(data, epochs=1, verbose=0, shuffle=False)
    return model


# keras_vit's own MirroredStrategy (both logical CPUs), which the --fit run below uses again
# for a model of another shape: the second run's all-reduces must not meet the first's.
mirrored = get_strategy("mirrored")
result = {"replicas": mirrored.num_replicas_in_sync}
for clip in (None, 1.0):
    single = one_step(tf.distribute.get_strategy(), clip)
    distributed = one_step(mirrored, clip)
    variables = [w.value for w in distributed.weights]
    result[f"clip={clip}"] = {
        "all_mirrored": all(type(v).__name__ == "MirroredVariable" and len(v.values) == 2
                            for v in variables),
        "max_abs_diff": max(float(np.max(np.abs(a.numpy() - b.numpy())))
                            for a, b in zip(single.weights, distributed.weights)),
        "max_abs_update": max(float(np.max(np.abs(a.numpy() - b)))
                              for a, b in zip(single.weights, initial)),
    }
if "--fit" in sys.argv:
    report = train("digits", epochs=1, strategy="mirrored", output=sys.argv[-1], verbose=0)
    result.update(fit_replicas=report["replicas"], fit_strategy=report["strategy"],
                  fit_accuracy=report["accuracy"])
print("RESULT " + json.dumps(result))
