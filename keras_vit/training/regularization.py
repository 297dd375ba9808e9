"""Layer-wise learning-rate decay (as BEiT, MAE and DINOv2 fine-tune), for the recipes' optimizers.

Each variable's learning rate is the schedule's times `decay ** (L + 1 - layer_id)`,
where L is the number of encoder blocks and the layer ids are: 0 for what comes
before the first block (the patch embedding, class token, position embedding, a
hybrid's ResNet trunk), i + 1 for `encoderblock_i`, L + 1 for what follows the
last block (the final LayerNorm, pre_logits, the head). So the head trains at the
full rate and each block below it at `decay` times the rate of the one above.
The ids come from the variables' paths (the layer names the checkpoint layout
fixes), so an optimizer finds them when it is built, and its config holds `decay` alone.

Keras' optimizers have no per-variable rate; `LayerDecay` scales the rate its
`update_step` receives, by the variable's index (the lookup Keras' own optimizers use
for their slots, which finds a variable under a tf.distribute strategy too). Imports
Keras alone: `import keras_vit` registers the optimizers that use it.
"""

import re

from keras_vit._support.private_keras import check_private_keras
from keras_vit.layer_names import CLS, EMBEDDING, POSEMBED_INPUT, PREPROCESSING, RESNET

__all__ = ["LayerDecay", "layer_id", "layer_scales", "EMBEDDING_LAYERS"]

_BLOCK = re.compile(r"(?:^|/)encoderblock_(\d+)(?:/|$)")
# The layers before the first block (keras_vit/models/vit.py names them so).
EMBEDDING_LAYERS = (PREPROCESSING, RESNET, EMBEDDING, CLS, POSEMBED_INPUT)


def layer_id(path, depth):
    """A variable's layer id, from its path ("encoderblock_3/LayerNorm_0/gamma" -> 4)."""
    block = _BLOCK.search(path)
    if block:
        return int(block.group(1)) + 1
    if any(part in EMBEDDING_LAYERS for part in path.split("/")):
        return 0
    return depth + 1


def layer_scales(variables, decay):
    """Each variable's learning-rate factor, `decay ** (L + 1 - layer_id)`, in order."""
    depth = 1 + max((int(block.group(1)) for block in map(_BLOCK.search,
                                                          (v.path for v in variables)) if block),
                    default=-1)
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
