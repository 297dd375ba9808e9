"""Loads the files a LoRA-trained model was saved as, in a process of its own, and writes each
one's logits on the images in argv[2] to argv[3] (.npz). argv[1] is the folder of files.

The SavedModel and TFLite files are read by TensorFlow alone (no keras_vit import); the
.keras, .npz and .safetensors files by keras_vit's ordinary loaders. Each model loaded must
have no LoRA weight, which keras_vit would have to know."""

import os
import sys

import numpy as np
import tensorflow as tf

folder, images_path, out_path = sys.argv[1:4]
pixels = np.load(images_path)  # [0, 255]
logits = {}

saved = tf.saved_model.load(os.path.join(folder, "saved_model", "1"))
logits["saved_model"] = saved.signatures["serving_default"](images=tf.constant(pixels))["logits"].numpy()
interpreter = tf.lite.Interpreter(os.path.join(folder, "model.tflite"))
runner = interpreter.get_signature_runner()
logits["tflite"] = np.concatenate([runner(images=pixels[i:i + 1])["logits"]
                                   for i in range(len(pixels))])

import keras  # noqa: E402  (after the TensorFlow-only loads above, on purpose)

import keras_vit  # noqa: E402

inputs = keras_vit.preprocess_input(pixels)
for name, model in (("keras", keras.saving.load_model(os.path.join(folder, "model.keras"))),
                    ("npz", keras_vit.ViT("demo", weights=os.path.join(folder, "model.npz"))),
                    ("safetensors", keras_vit.ViT("demo", image_size=pixels.shape[1],
                                                  weights=os.path.join(folder, "model.safetensors"),
                                                  approximate_gelu=True,
                                                  layer_norm_epsilon=1e-6))):
    lora = [v.path for v in model.weights if "lora" in v.path]
    assert not lora, f"{name}: {lora}"
    logits[name] = keras.ops.convert_to_numpy(model(inputs))
np.savez(out_path, **logits)
