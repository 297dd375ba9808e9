"""Run as a script with KERAS_BACKEND=torch: argv = weights file, images .npy, output folder.

First records the TensorFlow-side modules `import keras_vit` loaded (tests/test_package.py:
none on another backend); then loads the weights into the demo ViT, writes its logits for
the images next to them (logits.npy), and runs a short `keras_vit.train` into the output
folder. Prints one JSON line (RESULT ...)."""

import json
import os
import sys

import keras_vit  # noqa: F401  (first: what the import alone loads is recorded before the rest)

TENSORFLOW_SIDE = ("keras.src.backend.tensorflow", "keras_vit.training", "tensorflow")
imported = sorted(m for m in sys.modules if m.startswith(TENSORFLOW_SIDE))

import keras  # noqa: E402
import numpy as np  # noqa: E402

from keras_vit.layers.transformer import use_fused_attention  # noqa: E402
from keras_vit.training import DEMO_VARIANT, build_model, train  # noqa: E402

assert keras.backend.backend() == "torch", keras.backend.backend()
weights, images, output = sys.argv[1:4]
model = build_model(DEMO_VARIANT, None, 16, 10)
model.load_weights(weights)
logits = keras.ops.convert_to_numpy(model(np.load(images)))
np.save(os.path.join(os.path.dirname(images), "logits.npy"), logits)
report = train("digits", steps=6, output=output, verbose=0)
print("RESULT " + json.dumps({
    "imported_on_import": imported, "fused_attention": use_fused_attention(), "strategy": report["strategy"],
    "optimizer_iterations": report["optimizer_iterations"], "accuracy": report["accuracy"]}))
