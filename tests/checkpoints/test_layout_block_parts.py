"""An encoder block's weights are laid out by their paths under the block (layout.py): a new
part of a block, named as its official scope, brings its keys without a row of its own; a new
part outside the blocks brings them by its layer's name; weights that are not the checkpoint's
(Keras' LoRA factors) bring none."""

import dataclasses

import keras
import pytest

import keras_vit
from keras_vit.checkpoints.layout import layout, part_keys
from keras_vit.layers import TransformerBlock
from keras_vit.variants import get_variant


class _BlockWithAnotherNorm(TransformerBlock):
    """A block with one part more: a LayerNorm after it, named as an official scope would be."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.norm_4 = keras.layers.LayerNormalization(name="LayerNorm_4")

    def build(self, input_shape):
        super().build(input_shape)
        self.norm_4.build(input_shape)

    def call(self, x, **kwargs):
        return self.norm_4(super().call(x, **kwargs))


def test_a_new_part_of_a_block_brings_its_keys_by_its_name():
    tokens = keras.Input((5, 8))
    block = _BlockWithAnotherNorm(2, 16, name="encoderblock_0")
    model = keras.Model(tokens, block(tokens))
    rows = {row.keys: row.variable for row in layout(model)}
    prefix = "Transformer/encoderblock_0/LayerNorm_4/"
    assert rows[(prefix + "scale",)] is block.norm_4.gamma
    assert rows[(prefix + "bias",)] is block.norm_4.beta
    # Every weight of the block is in exactly one row (the attention's fused kernel and bias
    # take the query, key and value keys together).
    laid_out = [id(variable) for variable in rows.values()]
    assert sorted(laid_out) == sorted(id(w) for w in block.weights)


def test_lora_factors_are_not_checkpoint_weights():
    tiny = dataclasses.replace(get_variant("Ti/16"), depth=1, name="tiny")
    model = keras_vit.ViT(tiny, image_size=32, classes=3)
    before = [row.keys for row in layout(model)]
    keras_vit.enable_lora(model, rank=2, targets=("query", "value", "mlp"))
    names = {w.path.rsplit("/", 1)[-1] for w in model.weights}
    assert {"lora_kernel_a", "lora_kernel_b"} <= names  # Keras' factors on the MLP's Dense
    assert [row.keys for row in layout(model)] == before


class _Offset(keras.layers.Layer):
    """A part with a weight that is neither a dense layer's nor a norm's."""

    def build(self, input_shape):
        self.offset = self.add_weight(shape=input_shape[-1:], name="offset")

    def call(self, x):
        return x + self.offset


def test_a_new_part_outside_the_blocks_brings_its_keys_by_its_name():
    tokens = keras.Input((5, 8))
    norm = keras.layers.RMSNormalization(name="a_new_norm")
    dense = keras.layers.Dense(8, name="a_new_projection")
    block = TransformerBlock(2, 16, name="encoderblock_0")
    model = keras.Model(tokens, dense(block(norm(tokens))))
    rows = {row.keys: row.variable for row in layout(model)}
    assert part_keys("a_new_norm")["scale"] == "a_new_norm/scale"
    assert rows[(part_keys("a_new_norm")["scale"],)] is norm.scale  # no bias: an RMSNorm
    assert rows[(part_keys("a_new_projection")["kernel"],)] is dense.kernel
    assert rows[(part_keys("a_new_projection")["bias"],)] is dense.bias
    assert len(rows) == len(model.weights)  # each weight in one row, the block's included

    odd = keras.Model(tokens, _Offset(name="an_offset")(tokens))
    with pytest.raises(TypeError, match="'an_offset' .* neither a dense layer's nor a norm's"):
        layout(odd)
