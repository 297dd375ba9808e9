"""Run as a script with KERAS_BACKEND=jax (tests/layers/test_recompute.py); prints one JSON line
(RESULT ...). For each MLP and norm kind a block can have, a tiny ViT's training-mode loss and
gradients with the elementwise steps recomputed and without (keras_vit/layers/recompute.py),
as the largest difference relative to the largest of each; one mixed_bfloat16 block's saved
residuals (what its backward pass keeps) by kind, with and without; and Keras' train step
traced again (a shorter batch, a second compile)."""

import contextlib
import dataclasses
import io
import json
import re

import keras
import numpy as np

assert keras.backend.backend() == "jax", keras.backend.backend()
import jax  # noqa: E402

from keras_vit.layers import TransformerBlock, recompute  # noqa: E402
from keras_vit.models import ViT  # noqa: E402
from keras_vit.variants import Variant  # noqa: E402

TINY = Variant("ViT-tiny_4", width=32, depth=2, mlp_dim=64, heads=2, patch_size=4)
KINDS = {
    "exact gelu": {"approximate_gelu": False},
    "tanh gelu": {"approximate_gelu": True},
    "quick gelu": {"activation": "quick_gelu"},
    "packed swiglu": {"feed_forward": "swiglu"},
    "split swiglu, inner norm, rms": {"feed_forward": "swiglu_split", "mlp_norm": True,
                                      "norm": "rms"},
}


@contextlib.contextmanager
def recomputing(enabled):
    recompute.enabled = enabled
    try:
        yield
    finally:
        recompute.enabled = True


def gradients(fields, enabled):
    """(loss, gradients) of a training-mode pass of a tiny ViT of `fields`, random weights."""
    keras.utils.set_random_seed(0)
    model = ViT(dataclasses.replace(TINY, **fields), image_size=16, classes=5)
    rng = np.random.default_rng(1)
    for weight in model.weights:
        weight.assign(rng.standard_normal(weight.shape).astype("float32") * 0.3)
    images = rng.uniform(-1, 1, (4, 16, 16, 3)).astype("float32")
    trainable = [v.value for v in model.trainable_variables]
    fixed = [v.value for v in model.non_trainable_variables]

    def loss(trainable):
        logits, _ = model.stateless_call(trainable, fixed, images, training=True)
        return keras.ops.sum(logits ** 2)

    with recomputing(enabled):
        value, grads = jax.jit(jax.value_and_grad(loss))(trainable)
    return float(value), [np.asarray(g) for g in grads]


def relative_difference(a, b):
    return float(np.max(np.abs(a - b)) / max(np.max(np.abs(b)), 1e-30))


def parity():
    out = {}
    for kind, fields in KINDS.items():
        loss, grads = gradients(fields, True)
        plain_loss, plain_grads = gradients(fields, False)
        out[kind] = {"loss": abs(loss - plain_loss) / abs(plain_loss),
                     "gradients": max(relative_difference(g, p)
                                      for g, p in zip(grads, plain_grads, strict=True))}
    return out


def saved_residuals(enabled, tokens=5, width=32, mlp_dim=128):
    """{kind: count} of what one mixed_bfloat16 block's backward pass keeps of the batch's
    activations: "hidden" (mlp_dim wide), "float32 tokens" and "bfloat16 tokens" (width wide)."""
    block = TransformerBlock(2, mlp_dim, approximate_gelu=False, dtype="mixed_bfloat16")
    # bfloat16, as the block before gives it under mixed_bfloat16
    x = keras.ops.cast(np.random.default_rng(0).standard_normal((2, tokens, width)), "bfloat16")
    block.build(x.shape)
    values = [v.value for v in block.trainable_variables]
    fixed = [v.value for v in block.non_trainable_variables]  # the seed generators'

    def loss(values, x):
        out, _ = block.stateless_call(values, fixed, x, training=True)
        return keras.ops.sum(keras.ops.cast(out, "float32"))

    printed = io.StringIO()
    with recomputing(enabled), contextlib.redirect_stdout(printed):
        jax.ad_checkpoint.print_saved_residuals(loss, values, x)
    kinds = {"hidden": 0, "float32 tokens": 0, "bfloat16 tokens": 0}
    for line in printed.getvalue().splitlines():
        if "from the argument" in line:
            continue  # the weights and the input, which any backward pass keeps
        match = re.match(r"(\w+)\[([\d,]*)\]", line)
        dtype, shape = match.group(1), tuple(int(n) for n in match.group(2).split(",") if n)
        if shape[-1:] == (mlp_dim,) and np.prod(shape[:-1]) == 2 * tokens:
            kinds["hidden"] += 1
        elif shape[-1:] == (width,) and np.prod(shape[:-1]) == 2 * tokens:
            kinds[{"f32": "float32 tokens", "bf16": "bfloat16 tokens"}.get(dtype, dtype)] += 1
    return kinds


def traced_again():
    """The losses of Keras' train step at batch 4, at batch 3 (an epoch's last, shorter batch:
    a second trace), and at batch 4 after compiling again (a second stage of training, as
    transfer learning's probe then fine-tune: a trace of the same shapes)."""
    keras.utils.set_random_seed(0)
    model = ViT(TINY, image_size=16, classes=5)
    rng = np.random.default_rng(2)
    losses = []
    for n, compile_first in ((4, True), (3, False), (4, True)):
        if compile_first:
            model.compile(optimizer="sgd",
                          loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))
        losses.append(float(model.train_on_batch(
            rng.uniform(-1, 1, (n, 16, 16, 3)).astype("float32"), rng.integers(0, 5, n))))
    return losses


print("RESULT " + json.dumps({"parity": parity(),
                              "residuals": {"recomputed": saved_residuals(True),
                                            "stored": saved_residuals(False)},
                              "traced again": traced_again()}))
