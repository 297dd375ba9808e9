"""Run as a script with KERAS_BACKEND=jax: whole tiny ViTs of every token layout (class token,
distillation token, registers, none with the MAP head, DINOv3's rotary registers), with LoRA
and drop path, at two image sizes through one model (dynamic_image_size), trained one step
with every attention layer on the padded kernel, the blocked kernel and the explicit path,
each block rematerialised or not;
and two steps of Keras' own train step (train_on_batch) with and without remat.
Prints one JSON line (RESULT ...): per model and path, the largest difference of the loss, the
logits and every gradient from the explicit path's, relative to the largest of each.
With the argument "quick": the registers' layout alone, at the second size (the default suite's)."""

import json
import sys

import keras
import numpy as np

assert keras.backend.backend() == "jax", keras.backend.backend()
import jax  # noqa: E402

from keras_vit import enable_lora  # noqa: E402
from keras_vit.layers import MultiHeadSelfAttention, TransformerBlock  # noqa: E402
from keras_vit.layers.attention_kernels import CHUNKED, EXPLICIT, PADDED  # noqa: E402
from keras_vit.models import ViT  # noqa: E402
from keras_vit.variants import Variant  # noqa: E402

LAYOUTS = {
    "class token": {},
    "distillation token": {"distilled": True},
    "registers": {"register_tokens": 4, "embed_prefix_tokens": False},
    "no class token (MAP)": {"classifier": "map"},
    # DINOv3's: a class token and 4 registers that the 2-D RoPE skips, no learned position
    # embedding (EVA-02's and PE's RoPE rotate in the same attention call)
    "rotary, registers (DINOv3)": {"rope": "dinov3", "position_embedding": False,
                                   "register_tokens": 4, "embed_prefix_tokens": False,
                                   "classifier": "gap", "class_token": True},
}
SIZES = ((16, 16), (12, 20))  # 16 patches, then 15 (dynamic_image_size)


def build(fields):
    keras.utils.set_random_seed(0)
    variant = Variant("ViT-tiny_4", width=32, depth=2, mlp_dim=64, heads=2, patch_size=4, **fields)
    model = ViT(variant, image_size=16, classes=5, drop_path_rate=0.3, dynamic_image_size=True)
    rng = np.random.default_rng(1)
    for weight in model.weights:
        weight.assign(rng.standard_normal(weight.shape).astype("float32") * 0.2)
    enable_lora(model, 2, ("query", "value"))
    for weight in model.trainable_weights:  # LoRA's b starts at zero: give it a value
        weight.assign(rng.standard_normal(weight.shape).astype("float32") * 0.2)
    return model


def step(model, images, path, remat):
    """(loss, logits, gradients) of one training-mode pass with every attention on `path`."""
    for layer in model._flatten_layers():
        if isinstance(layer, MultiHeadSelfAttention):
            layer.fused_attention = path
        if isinstance(layer, TransformerBlock):
            layer.remat = remat
    trainable = [v.value for v in model.trainable_variables]
    other = [v.value for v in model.non_trainable_variables]

    def loss(trainable):
        logits, _ = model.stateless_call(trainable, other, images, training=True)
        return jax.numpy.sum(logits ** 2), logits

    (value, logits), gradients = jax.jit(jax.value_and_grad(loss, has_aux=True))(trainable)
    return np.float64(value), np.asarray(logits, np.float64), [np.asarray(g, np.float64)
                                                                for g in gradients]


def trainer_step(remat):
    """(loss, weights) after Keras' own jitted train step (train_on_batch), every block
    rematerialised or not, with dropout and drop path drawing inside the blocks."""
    keras.utils.set_random_seed(0)
    variant = Variant("ViT-tiny_4", width=32, depth=2, mlp_dim=64, heads=2, patch_size=4)
    model = ViT(variant, image_size=16, classes=5, dropout=0.1, attention_dropout=0.1,
                drop_path_rate=0.3)
    for layer in model._flatten_layers():
        if isinstance(layer, TransformerBlock):
            layer.remat = remat
    model.compile(optimizer=keras.optimizers.SGD(0.1),
                  loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    images = np.random.default_rng(3).uniform(-1, 1, (4, 16, 16, 3)).astype("float32")
    losses = [float(model.train_on_batch(images, np.arange(4) % 5)) for _ in range(2)]
    return np.asarray(losses), [np.asarray(w, np.float64) for w in model.weights]


def relative(a, b):
    return float(np.abs(a - b).max() / max(np.abs(b).max(), np.finfo(np.float32).tiny))


def main(quick=False):
    result = {}
    rng = np.random.default_rng(2)
    layouts = {"registers": LAYOUTS["registers"]} if quick else LAYOUTS
    runs = ((PADDED, True), (CHUNKED, False)) if quick else \
        ((PADDED, False), (CHUNKED, False), (PADDED, True), (EXPLICIT, True))
    for layout, fields in layouts.items():
        model = build(fields)
        for height, width in SIZES[-1:] if quick else SIZES:
            images = rng.uniform(-1, 1, (3, height, width, 3)).astype("float32")
            expected = step(model, images, EXPLICIT, False)
            for path, remat in runs:
                got = step(model, images, path, remat)
                result[f"{layout} {height}x{width} {path}{' remat' if remat else ''}"] = {
                    "loss": relative(got[0], expected[0]), "logits": relative(got[1], expected[1]),
                    "gradients": max(relative(g, e) for g, e in zip(got[2], expected[2], strict=True)),
                    "trainable": len(got[2])}
    (losses, weights), (remat_losses, remat_weights) = trainer_step(False), trainer_step(True)
    result["train_on_batch remat"] = {
        "loss": relative(remat_losses, losses),
        "weights": max(relative(r, w) for r, w in zip(remat_weights, weights, strict=True))}
    return result


if __name__ == "__main__":
    print("RESULT " + json.dumps(main(quick="quick" in sys.argv[1:])))
