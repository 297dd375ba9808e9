"""Layer-wise learning-rate decay (as BEiT, MAE and DINOv2 fine-tune), for the recipes' optimizers.

Each variable's learning rate is the schedule's times `decay ** (L + 1 - layer_id)`,
where L is the number of encoder blocks and the layer ids are timm's
(`param_groups_layer_decay` with its ViTs' `group_matcher`): 0 for the stem, every
layer before the first block (the patch embedding, class, distillation and register
tokens, position embedding, CLIP's pre-norm, a hybrid's ResNet trunk); i + 1 for
`encoderblock_i`, and for the final LayerNorm with the last block; L + 1 for what
follows (pooling, pre_logits, the head). So the head trains at the full rate and each
block below it at `decay` times the rate of the one above. The ids come from the
variables' paths, through the layers' roles (keras_vit/layer_names.py), so an
optimizer finds them when it is built, and its config holds `decay` alone.

Keras' optimizers have no per-variable rate; `LayerDecay` scales the rate its
`update_step` receives, by the variable's index (the lookup Keras' own optimizers use
for their slots, which finds a variable under a tf.distribute strategy too). Imports
Keras alone: `import keras_vit` registers the optimizers that use it.
"""

from keras_vit._support.private_keras import check_private_keras
from keras_vit.layer_names import Role, block_index, role_of

__all__ = ["LayerDecay", "layer_id", "layer_scales"]


def layer_id(path, depth):
    """A variable's layer id, from its path ("encoderblock_3/LayerNorm_0/gamma" -> 4), by the
    role of the first layer named in it; `depth` is the model's number of blocks."""
    for part in path.split("/"):
        role = role_of(part)
        if role is Role.BLOCK:
            return block_index(part) + 1
        if role is Role.STEM:
            return 0
        if role is Role.ENCODER_NORM:  # timm's group_matcher: "final norm w/ last block"
            return depth
        if role is not None:
            break
    return depth + 1


def layer_scales(variables, decay):
    """Each variable's learning-rate factor, `decay ** (L + 1 - layer_id)`, in order."""
    depth = 1 + max((index for v in variables for index in map(block_index, v.path.split("/"))
                     if index is not None), default=-1)
    return tuple(float(decay) ** (depth + 1 - layer_id(v.path, depth)) for v in variables)


class LayerDecay:
    """A mixin of a Keras optimizer: `layer_decay=None` (off) or the decay factor in (0, 1].

    The decoupled weight decay of AdamW runs at the schedule's rate, as Keras applies
    it to every variable at once (timm scales it with the layer's rate too)."""

    def __init__(self, *args, layer_decay=None, **kwargs):
        if layer_decay is not None:
            import keras

            check_private_keras("keras_vit's layer-wise learning-rate decay",
                                keras.optimizers.Optimizer, "_get_variable_index")
        super().__init__(*args, **kwargs)
        self.layer_decay = layer_decay
        self._layer_scales = None

    def build(self, variables):
        super().build(variables)
        if self.layer_decay is not None:
            self._layer_scales = layer_scales(variables, self.layer_decay)

    def update_step(self, gradient, variable, learning_rate):
        if self._layer_scales is not None:
            learning_rate = learning_rate * self._layer_scales[self._get_variable_index(variable)]
        return super().update_step(gradient, variable, learning_rate)

    def get_config(self):
        return {**super().get_config(), "layer_decay": self.layer_decay}
