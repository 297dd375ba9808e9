"""AttentionProbe: every block's attention weights and tokens from a keras_vit model.

The probe calls the model's own layer objects in order, asking each
`TransformerBlock` for its attention weights. It shares the model's weights
(nothing is copied or rebuilt) and adds nothing to the model's graph, so the
model and the cost of its normal `predict` stay exactly as they were.
"""

import dataclasses

import keras
import numpy as np

from keras_vit._support.checks import positive_int
from keras_vit.analysis.distance import mean_attention_distance
from keras_vit.analysis.rollout import attention_rollout
from keras_vit.errors import ArgumentError, ArgumentTypeError
from keras_vit.layer_names import (
    EMBEDDING,
    EMBEDDING_DROPOUT,
    GAP_POOL,
    MAP_POOL,
    PATCHES,
    POOLED_NORM,
    POSEMBED_INPUT,
    PRE_LOGITS,
    TOKEN_POOL,
)
from keras_vit.layers import (
    AddPositionEmbedding,
    ClassToken,
    PatchEncoder,
    PrefixTokens,
    TransformerBlock,
)
from keras_vit.models.image_size import image_size, naflex_layout
from keras_vit.runtime.naflex_inputs import pack

__all__ = ["AttentionProbe", "ProbeOutputs", "pooled_features"]


@dataclasses.dataclass
class ProbeOutputs:
    """What one probe call returns (NumPy, float32).

    attention: `(layers, batch, heads, tokens, tokens)`, rows sum to 1.
    tokens: `(layers, batch, tokens, D)`, each block's output sequence.
    outputs: the model's output for the batch, e.g. logits `(batch, classes)`.
        For a class-token model it matches `model.predict` to float32
        rounding: the model's last block computes the class token alone, the
        probe computes every token (its attention map needs them all).
    """

    attention: np.ndarray
    tokens: np.ndarray
    outputs: np.ndarray


class AttentionProbe:
    """Reads attention weights and token outputs from any keras_vit model.

    Works for plain and hybrid models (every layer before the first encoder
    block, e.g. a ResNet "resnet" stem, is called as it is), with or without a
    class token or a head, at any image size the model was built for; a NaFlex
    model on images of its stored grid's size, fed as their patches.

    Attributes:
        model: the probed model (unchanged).
        grid_size: `(rows, columns)` of the patch grid.
        num_prefix_tokens: the tokens before the patches: the class token, DeiT's
            distillation token, DINOv2's register tokens (0 for SigLIP).
        has_class_token: whether the first of them is a class token. Rollout and
            attention distance read the class token and the patches alone.
        stride: `(pixels per token vertically, horizontally)`.
        image_size: `(height, width)` of the model's input.
        channels: the channels of each image it takes.
        num_layers, num_heads: encoder depth and heads per block.

    Example:
        probe = AttentionProbe(model)
        out = probe(images)            # out.attention: (L, B, heads, T, T)
    """

    def __init__(self, model):
        if not isinstance(model, keras.Model):
            raise ArgumentTypeError(f"AttentionProbe needs a keras.Model, got {type(model).__name__}.")
        self.model = model
        blocks = [layer for layer in model.layers if isinstance(layer, TransformerBlock)]
        if naflex_layout(model) is not None:
            self._read_naflex(model, blocks)
        else:
            self._read_chain(model, blocks)
        self.num_layers = len(blocks)
        self.num_heads = blocks[0].num_heads
        self.image_size = _image_size(model, self.grid_size)
        self.stride = tuple(s // g for s, g in zip(self.image_size, self.grid_size))
        self._forward = _compile(self._forward_eager)

    def _read_chain(self, model, blocks):
        """A model of images: its grid, prefix tokens and channels, and its layers as a chain."""
        positions = [layer for layer in model.layers if isinstance(layer, AddPositionEmbedding)]
        # A model with RoPE alone (DINOv3) keeps its patches as a grid: its shape is the grid.
        grids = [tuple(layer.output.shape[1:3]) for layer in model.layers
                 if isinstance(layer, PatchEncoder) and len(layer.output.shape) == 4]
        if not blocks or len(positions) > 1 or not (positions or grids):
            raise ArgumentError(f"Model {model.name!r} is not a keras_vit ViT: it needs "
                                f"TransformerBlock layers and one AddPositionEmbedding (or a "
                                f"patch grid), found {len(blocks)} and {len(positions)}.")
        if len(model.inputs) != 1 or len(model.outputs) != 1:
            raise ArgumentError("AttentionProbe needs a model with one input and one output.")
        self.grid_size = positions[0].grid_size if positions else grids[0]
        if None in self.grid_size:
            raise ArgumentError("AttentionProbe needs a model built for a fixed image size.")
        # Counted from the token layers, not the position embedding's: DINOv2 with registers
        # and DeiT III add theirs after it (their embedding covers the patches only).
        self.has_class_token = any(isinstance(layer, ClassToken) for layer in model.layers)
        self.num_prefix_tokens = int(self.has_class_token) + sum(
            layer.num_tokens for layer in model.layers if isinstance(layer, PrefixTokens))
        self.channels = model.input_shape[-1]
        self._chain, self._chain_ends_at_output, self._grid_from = _layer_chain(model)
        self._patch_size = None  # images go in as they are

    def _read_naflex(self, model, blocks):
        """A NaFlex model (SigLIP 2 NaFlex) is probed on images of its stored grid's size, fed
        as their patches: every token is a patch, so no mask, and its position embedding is
        the stored grid as it is (grid None). Its chain: the patch and position embeddings,
        the dropout, the blocks; the model itself computes the output from the packed
        images."""
        self.grid_size = model.get_layer(POSEMBED_INPUT).grid_size
        self.has_class_token, self.num_prefix_tokens = False, 0
        self.channels = model.get_layer(EMBEDDING).channels
        self._chain = [model.get_layer(name) for name in
                       (EMBEDDING, POSEMBED_INPUT, EMBEDDING_DROPOUT)] + blocks
        self._chain_ends_at_output, self._grid_from = False, {}
        self._patch_size = model.get_layer(EMBEDDING).patch_size

    def __call__(self, images, batch_size=8):
        """Runs `images` `(batch, height, width, channels)`, already preprocessed.

        Returns `ProbeOutputs` for the whole set. Attention for many images is
        large (layers x heads x tokens^2 floats each); for statistics over many
        images use `iterate`.
        """
        parts = list(self.iterate(images, batch_size))
        return ProbeOutputs(*(np.concatenate([getattr(p, f) for p in parts], axis=axis)
                              for f, axis in (("attention", 1), ("tokens", 1), ("outputs", 0))))

    def iterate(self, images, batch_size=8):
        """Yields `ProbeOutputs` batch by batch, so memory stays bounded."""
        images = self._check_images(images)
        positive_int(batch_size, "batch_size")
        for start in range(0, len(images), batch_size):
            batch = images[start:start + batch_size]
            if self._patch_size is not None:  # a NaFlex model's: the images' patches, no padding
                batch = {name: keras.ops.convert_to_tensor(value) for name, value in pack(
                    list(batch), self._patch_size, self.grid_size[0] * self.grid_size[1]).items()}
            outputs, attention, tokens = self._forward(batch)
            yield ProbeOutputs(attention=_numpy(attention), tokens=_numpy(tokens),
                               outputs=_numpy(outputs))

    def _forward_eager(self, images):
        """`(outputs, attention (L, B, H, T, T), tokens (L, B, T, D))` as tensors."""
        if self._patch_size is None:
            images = x = keras.ops.convert_to_tensor(images, dtype=self.model.inputs[0].dtype)
        else:  # a NaFlex model's packed images: its patches start the chain
            x = images[PATCHES]
        attention, tokens, outputs = [], [], []
        for layer in self._chain:
            if isinstance(layer, TransformerBlock):
                grid = outputs[self._grid_from[layer]] if layer in self._grid_from else None
                x, weights = layer(x, return_attention_scores=True, grid=grid)
                attention.append(weights)
                tokens.append(x)
            elif layer in self._grid_from:  # a dynamic position embedding: the patches' grid
                x = layer(x, grid=outputs[self._grid_from[layer]])
            else:
                x = layer(x)  # inference mode: dropout is off outside training
            outputs.append(x)
        if not self._chain_ends_at_output:  # a head that branches (or NaFlex's): the model
            # computes the output
            x = self.model(images)
        return x, keras.ops.stack(attention), keras.ops.stack(tokens)

    def attention_rollout(self, images, batch_size=8, residual=True):
        """`RolloutResult` for `images`, upsampled to the model's image size."""
        joint, heatmaps, upsampled = [], [], []
        for part in self.iterate(images, batch_size):
            result = attention_rollout(part.attention, self.grid_size, self.num_prefix_tokens,
                                       self.image_size, residual=residual,
                                       class_token=self.has_class_token)
            joint.append(result.joint)
            heatmaps.append(result.heatmap)
            upsampled.append(result.upsampled)
        return type(result)(np.concatenate(joint), np.concatenate(heatmaps),
                            np.concatenate(upsampled))

    def mean_attention_distance(self, images, batch_size=8, renormalize=True):
        """`(layers, heads)` mean attention distance in pixels over all `images`.

        Computed batch by batch, so any number of images fits in memory (the
        paper averages over 128).
        """
        total, count = 0.0, 0
        for part in self.iterate(images, batch_size):
            batch = part.attention.shape[1]
            total = total + batch * mean_attention_distance(
                part.attention, self.grid_size, self.stride, self.num_prefix_tokens,
                renormalize=renormalize)
            count += batch
        return total / count

    def _check_images(self, images):
        images = np.asarray(images)
        expected = (*self.image_size, self.channels)
        if images.ndim != 4 or images.shape[1:] != expected:
            raise ArgumentError(f"Images must have shape (batch, {', '.join(map(str, expected))}) "
                                f"for model {self.model.name!r}, got {images.shape}.")
        if len(images) == 0:
            raise ArgumentError("No images given.")
        return images


def _image_size(model, grid_size):
    # A model that takes any size is probed at its stored grid, where every token is a patch
    # of the grid its attention maps are drawn on.
    height, width = image_size(model)
    if height is None or width is None:
        raise ArgumentError("AttentionProbe needs a model built for a fixed image size.")
    if height % grid_size[0] or width % grid_size[1]:
        raise ArgumentError(f"Image size {height}x{width} is not a whole number of pixels per "
                            f"token on the {grid_size[0]}x{grid_size[1]} grid.")
    return height, width


def _layer_chain(model):
    """The model's layers after the input, checked to form a single chain up to the last
    encoder block; and whether the chain goes on to the model's output. After the encoder a
    head may branch (a distilled DeiT's two heads): the chain then stops there and the model
    itself computes the output. The one other input a chain layer may take is the patch grid
    (of a dynamic position embedding, or of a RoPE block), an earlier layer's output: {layer:
    that layer's place}."""
    chain, previous, grid_from = [], model.inputs[0], {}
    blocks_left = sum(isinstance(layer, TransformerBlock) for layer in model.layers)
    for layer in model.layers:
        if isinstance(layer, keras.layers.InputLayer):
            continue
        takes_grid = getattr(layer, "dynamic_grid", False) or isinstance(layer, TransformerBlock)
        if takes_grid and isinstance(layer.input, list) and layer.input[0] is previous:
            grid = [i for i, earlier in enumerate(chain) if earlier.output is layer.input[1]]
            if grid:
                grid_from[layer] = grid[0]
                chain.append(layer)
                previous = layer.output
                continue
        # keras_vit models are one chain of layers; a branching graph would be
        # silently mis-wired by calling its layers in order, so refuse it.
        if layer.input is not previous:
            if not blocks_left:
                return chain, False, grid_from
            raise ArgumentError(f"Layer {layer.name!r} of model {model.name!r} does not follow the "
                                "previous layer; AttentionProbe supports keras_vit's chain-shaped "
                                "models only.")
        chain.append(layer)
        previous = layer.output
        blocks_left -= isinstance(layer, TransformerBlock)
    if previous is not model.outputs[0]:
        raise ArgumentError(f"The layers of model {model.name!r} do not end at its output.")
    return chain, True, grid_from


def _compile(function):
    """A traced graph function on TensorFlow (fast repeated calls); eager elsewhere."""
    if keras.backend.backend() == "tensorflow":
        import tensorflow as tf  # only on the TensorFlow backend

        return tf.function(function, reduce_retracing=True)
    return function


def _numpy(tensor):
    return np.asarray(keras.ops.convert_to_numpy(tensor), dtype=np.float32)


def pooled_features(model, images, batch_size=32):
    """The pooled representation `(batch, D)` a keras_vit model feeds its head.

    Uses the output of the pooling layer ("token_pool", "gap_pool" or "map_pool"), or of
    the layer after it when the model has one ("pre_logits"; EVA-02's norm of the pooled
    features, timm's fc_norm), as the paper's few-shot probe does. A
    model built with `include_top=False` and pooling already returns these.
    """
    extractor = feature_model(model)
    return np.asarray(extractor.predict(np.asarray(images), batch_size=batch_size, verbose=0),
                      dtype=np.float32)


def feature_model(model):
    """`model` up to the pooled representation its head reads (the output of "pre_logits",
    EVA-02's "pooled_norm", "token_pool", "gap_pool" or SigLIP's attention pooling "map_pool",
    the first the model has), sharing its weights."""
    names = [layer.name for layer in model.layers]
    for name in (PRE_LOGITS, POOLED_NORM, TOKEN_POOL, GAP_POOL, MAP_POOL):
        if name in names:
            return keras.Model(model.inputs, model.get_layer(name).output,
                               name=f"{model.name}_features")
    raise ArgumentError(f"Model {model.name!r} has no pooling layer (token_pool, gap_pool, "
                        "map_pool or pre_logits); build it with pooling='token' or 'gap'.")
