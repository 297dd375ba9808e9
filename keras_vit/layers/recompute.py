"""Elementwise steps whose intermediates a JAX training step recomputes instead of storing.

JAX's autodiff keeps each intermediate of an elementwise function for the backward pass, and
XLA's buffer assignment keeps them too: the tanh GELU keeps four (batch * tokens, mlp_dim)
tensors besides its input and output where PyTorch's fused GELU keeps its input alone, and a
LayerNorm under mixed_bfloat16 keeps three float32 (batch, tokens, D) tensors where timm
keeps its input. Recomputing them costs one elementwise pass over an input the backward pass
reads anyway. On a ViT-B/16 bfloat16 train step at batch 8 this takes XLA's temporaries from
2051 to 1695 MiB on CPU, at the same speed (benchmarks/train_step_memory.py). TensorFlow and
torch are left as they are: torch's GELU and LayerNorm kernels keep their inputs alone, and
`tf.recompute_grad` would put a custom gradient into every exported graph.
"""

import keras

__all__ = ["recomputed_in_training"]

# On unless a measurement of what it saves turns it off (benchmarks/train_step_memory.py).
enabled = True


def recomputed_in_training(function, training):
    """`function`, whose intermediates the backward pass recomputes from its inputs when
    `training` under JAX (`jax.checkpoint`, through `keras.remat`); `function` itself else,
    so inference, symbolic calls and the other backends trace the plain function."""
    if enabled and training is True and keras.backend.backend() == "jax":
        # A new function each call: jax.checkpoint caches its trace by the function and the
        # input shapes, and a layer's trace holds the variables' values of the step that
        # traced it, which a later trace of the same shapes (the step compiled again, as a
        # second stage of training does) must not reuse.
        return keras.remat(lambda *inputs: function(*inputs))
    return function
