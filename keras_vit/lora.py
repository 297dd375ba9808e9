"""LoRA (low-rank adaptation) on a ViT, on Keras' own LoRA, and the merge that saving goes through.

`enable_lora(model, rank, targets=("query", "value"))` freezes every weight of the model but the
head and adds rank-`rank` factors to the projections named in `targets`, as keras-hub's
`Backbone.enable_lora` does: the MLP's `Dense` layers through Keras' `Dense.enable_lora`, the
attention's projections through `MultiHeadSelfAttention.enable_lora` (the same arithmetic on the
column blocks of its fused query/key/value kernel, which is one weight).

`merge_lora(model)` is the model with each kernel replaced by `kernel + alpha / rank * a @ b`
and no LoRA left: an ordinary keras_vit model. Every writer of a model file (model.keras and
best.keras of a run, SavedModel, TFLite, save_npz, save_safetensors) writes the merged model,
so the files load where nothing knows LoRA. Keras' own `model.save` of a LoRA model reloads
too, as the merged model: Keras' `Dense` saves its kernel merged, and the attention its plain
kernels with its factors by name, merged by a layer without LoRA as it loads
(`MultiHeadSelfAttention.load_own_variables`; a LoRA layer restores them as they were).
"""


import math

import keras
import numpy as np

from keras_vit._support.checks import positive_int, real_in
from keras_vit.errors import ArgumentError
from keras_vit.layer_names import HEADS
from keras_vit.layers.transformer import (
    LORA_TARGETS as ATTENTION_TARGETS,
)
from keras_vit.layers.transformer import (
    MultiHeadSelfAttention,
    TransformerBlock,
)

__all__ = ["enable_lora", "merge_lora", "has_lora", "parameter_counts", "LORA_TARGETS"]

# "mlp" adapts both of the MLP's Dense layers (Keras' own Dense.enable_lora).
LORA_TARGETS = (*ATTENTION_TARGETS, "mlp")


def enable_lora(model, rank, targets=("query", "value"), lora_alpha=None):
    """Adds LoRA factors of `rank` to `targets` in every encoder block of `model`, and
    freezes every other weight but the head's (both heads of a distilled DeiT); returns `model`.

    `targets`: any of "query", "key", "value", "out" (the attention's projections) and
    "mlp" (both MLP layers). The default, query and value, is LoRA's paper's choice and
    keras-hub's. `lora_alpha` scales the update by `lora_alpha / rank` (default: `rank`,
    a scale of 1, as Keras). The factors `b` start at zero, so the model computes exactly
    what it computed before.
    """
    positive_int(rank, "LoRA rank", what="a positive integer")
    targets = _checked_targets(targets)
    if lora_alpha is not None:  # NaN or infinity would make every output NaN
        real_in(lora_alpha, "lora_alpha", 0, math.inf, low_open=True, high_open=True,
                what="a finite positive number (default: the rank)")
    blocks = _blocks(model)
    if not blocks:
        raise ArgumentError(f"{model.name} has no transformer blocks for LoRA to adapt (a BiT "
                            "ResNet has none); fine-tune it fully.")
    if has_lora(model):
        raise ArgumentError(f"{model.name} has LoRA already; enable it once.")
    width = blocks[0].attention.out_kernel.shape[0]
    if rank > width:  # every projection adapted has `width` inputs: its update's rank is at most that
        raise ArgumentError(f"LoRA rank {rank} exceeds {model.name}'s width {width}, the largest "
                            "rank of an update to the projections LoRA adapts.")
    rank = int(rank)
    for variable in model.weights:  # frozen first: enable_lora's factors are made trainable
        variable.trainable = False
    attention_targets = tuple(t for t in targets if t in ATTENTION_TARGETS)
    for block in blocks:
        if attention_targets:
            block.attention.enable_lora(rank, attention_targets, lora_alpha=lora_alpha)
        if "mlp" in targets:
            for dense in (block.mlp.dense_0, block.mlp.dense_1):
                dense.enable_lora(rank, lora_alpha=lora_alpha)
    for variable in _head_weights(model):
        variable.trainable = True
    return model


def _checked_targets(targets):
    """`targets` as a tuple of LoRA_TARGETS names: a name, or an iterable of names."""
    if isinstance(targets, str):
        targets = (targets,)
    try:
        targets = tuple(targets)
    except TypeError:  # None, a number: no names at all
        targets = None
    if not targets or any(t not in LORA_TARGETS for t in targets):
        raise ArgumentError(f"LoRA targets are some of {', '.join(LORA_TARGETS)}; got "
                            f"{targets if targets is None else list(targets)!r}.")
    return targets


def has_lora(model):
    """Whether any block of `model` has LoRA factors."""
    return any(_lora_layers(block) for block in _blocks(model))


def merge_lora(model):
    """`model` itself when it has no LoRA; else a new model of the same config whose kernels
    hold `kernel + alpha / rank * a @ b` and which has no LoRA factors.

    The LoRA factors live in no config (the attention's) or in configs of layers the model
    builds itself (the MLP's Dense layers), so the model's config rebuilds it without LoRA;
    its variables are then assigned by path.
    """
    if not has_lora(model):
        return model
    merged = {}
    for block in _blocks(model):
        attention = block.attention
        qkv, out = attention.merged_kernels()
        merged[attention.qkv_kernel.path], merged[attention.out_kernel.path] = qkv, out
        for dense in (block.mlp.dense_0, block.mlp.dense_1):
            if dense.lora_enabled:  # Dense.kernel is Keras' own merge under LoRA
                variable = next(v for v in dense.weights if v.name == "kernel")
                merged[variable.path] = keras.ops.convert_to_numpy(dense.kernel)
    copy = model.__class__.from_config(model.get_config())
    values = {variable.path: variable for variable in model.weights}
    for variable in copy.weights:
        value = merged.get(variable.path)
        if value is None:
            value = keras.ops.convert_to_numpy(values[variable.path])
        variable.assign(np.asarray(value, dtype=variable.dtype))
    return copy


def parameter_counts(model):
    """{"trainable": ..., "total": ...}: parameters (not variables) of `model`."""
    def count(variables):
        return int(sum(np.prod(v.shape) for v in variables))

    return {"trainable": count(model.trainable_weights), "total": count(model.weights)}


def _blocks(model):
    return [layer for layer in model.layers if isinstance(layer, TransformerBlock)
            and isinstance(layer.attention, MultiHeadSelfAttention)]


def _lora_layers(block):
    return [layer for layer in (block.attention, block.mlp.dense_0, block.mlp.dense_1)
            if getattr(layer, "lora_factors", None) or getattr(layer, "lora_enabled", False)]


def _head_weights(model):
    """The weights of the head, and of a distilled DeiT's distillation head: the teacher
    teaches "head_dist", which a frozen one would leave at what it was."""
    names = {layer.name for layer in model.layers}
    return [weight for name in HEADS if name in names for weight in model.get_layer(name).weights]
