"""MlpBlock: the encoder block's feed-forward (GELU, QuickGELU or SwiGLU, packed or split, with
an optional norm before its output layer).

Sub-layers carry the official checkpoint's names (Dense_0, Dense_1), so weight loading is a
table of names; the parts the families add are named alike (`Dense_value`, `LayerNorm_0`).
"""

import keras
from keras import ops

from keras_vit.errors import ArgumentError
from keras_vit.layers.lora_dense import FactorKeepingDense
from keras_vit.layers.recompute import recomputed_in_training

__all__ = ["MlpBlock", "MLP_ACTIVATIONS", "MLP_HIDDEN_NAME", "MLP_OUTPUT_NAME", "MLP_VALUE_NAME",
           "MLP_NORM_NAME"]

# The MLP's two dense layers, named as the checkpoint's (weights map by name); the JAX
# model-parallel layout map (training/jax_distribution.py) finds them by these names too.
MLP_HIDDEN_NAME, MLP_OUTPUT_NAME = "Dense_0", "Dense_1"
# A split SwiGLU's value projection (timm's fc1_x; its gate, fc1_g, is Dense_0), and the norm
# before the output layer (EVA-02's sub-LN in the MLP, timm's mlp.norm).
MLP_VALUE_NAME, MLP_NORM_NAME = "Dense_value", "LayerNorm_0"
# The feed-forwards a block computes: GELU (the paper's), OpenAI CLIP's QuickGELU x * sigmoid(1.702 x),
# and SwiGLU: silu(a) * b of the gate a and value b (mlp_dim // 2 features each), packed as the
# two halves of one first layer (timm's SwiGLUPacked / GluMlp: DINOv2 giant, EVA-02 Ti and S) or
# split in two layers (timm's SwiGLU: DINOv3 S+ and H+, EVA-02 B and L).
MLP_ACTIVATIONS = ("gelu", "quick_gelu", "swiglu")
LAYER_NORM_EPSILON = 1e-6  # the official value; Keras' default 1e-3 breaks parity


@keras.saving.register_keras_serializable(package="keras_vit")
class MlpBlock(keras.layers.Layer):
    """Dense(mlp_dim) -> GELU -> dropout -> [LayerNorm] -> Dense(D) -> dropout.

    `approximate_gelu=True` is the tanh approximation the official models
    compute (flax `nn.gelu`); `False` is the exact erf form. `activation`
    "quick_gelu" is OpenAI CLIP's `x * sigmoid(1.702 x)`; "swiglu" is the gated unit:
    `silu(a) * b` (`mlp_dim // 2` features) feeds the second layer, where `(a, b)` are the
    two halves of the first layer's `mlp_dim` outputs, or, with `split_gate=True`, the
    outputs of two layers of `mlp_dim // 2` (`Dense_0` the gate, `Dense_value` the value).
    `inner_norm=True` normalises the hidden features before the output layer (`LayerNorm_0`,
    epsilon `layer_norm_epsilon`). `use_bias=False` builds every layer without a bias (AIMv2).
    """

    def __init__(self, mlp_dim, dropout=0.0, approximate_gelu=True, activation="gelu",
                 split_gate=False, inner_norm=False, layer_norm_epsilon=LAYER_NORM_EPSILON,
                 use_bias=True, **kwargs):
        super().__init__(**kwargs)
        if activation not in MLP_ACTIVATIONS:
            raise ArgumentError(f"activation must be one of {MLP_ACTIVATIONS}, got {activation!r}.")
        if activation == "swiglu" and mlp_dim % 2:
            raise ArgumentError(f"A SwiGLU feed-forward has two halves: mlp_dim {mlp_dim} is odd.")
        if split_gate and activation != "swiglu":
            raise ArgumentError("split_gate splits a SwiGLU's gate from its value; "
                                f"activation is {activation!r}.")
        self.mlp_dim = mlp_dim
        self.dropout = dropout
        self.approximate_gelu = approximate_gelu
        self.activation = activation
        self.split_gate = bool(split_gate)
        self.inner_norm = bool(inner_norm)
        self.layer_norm_epsilon = layer_norm_epsilon
        self.use_bias = bool(use_bias)
        policy = self.dtype_policy
        first = mlp_dim // 2 if self.split_gate else mlp_dim
        self.dense_0 = _dense(first, MLP_HIDDEN_NAME, policy, self.use_bias)
        self.dense_value = _dense(first, MLP_VALUE_NAME, policy, self.use_bias) \
            if self.split_gate else None
        self.norm = keras.layers.LayerNormalization(epsilon=layer_norm_epsilon, name=MLP_NORM_NAME,
                                                    dtype=policy) if self.inner_norm else None
        self.dropout_0 = keras.layers.Dropout(dropout, dtype=policy)
        self.dropout_1 = keras.layers.Dropout(dropout, dtype=policy)

    @property
    def hidden_features(self):
        """The features between the two layers."""
        return self.mlp_dim // 2 if self.activation == "swiglu" else self.mlp_dim

    @property
    def dense_layers(self):
        """The Dense layers, first to last (what `Model.quantize` quantises)."""
        return tuple(d for d in (self.dense_0, self.dense_value, self.dense_1) if d is not None)

    def build(self, input_shape):
        self.dense_1 = _dense(input_shape[-1], MLP_OUTPUT_NAME, self.dtype_policy, self.use_bias)
        self.dense_0.build(input_shape)
        if self.dense_value is not None:
            self.dense_value.build(input_shape)
        hidden = (*input_shape[:-1], self.hidden_features)
        if self.norm is not None:
            self.norm.build(hidden)
        self.dense_1.build(hidden)

    def call(self, x, training=None):
        # On a 2-D (batch * tokens, D) input Dense is MatMul + BiasAdd, which TensorFlow
        # fuses with the GELU into one kernel; a 3-D input would put a reshape between them.
        shape = ops.shape(x)
        x = ops.reshape(x, (-1, x.shape[-1]))
        hidden = self.dense_0(x)
        inputs = (hidden, self.dense_value(x)) if self.split_gate else (hidden,)
        hidden = recomputed_in_training(self._activated, training)(*inputs)
        hidden = self.dropout_0(hidden, training=training)
        if self.norm is not None:
            hidden = recomputed_in_training(self.norm, training)(hidden)
        x = self.dropout_1(self.dense_1(hidden), training=training)
        return ops.reshape(x, shape)

    def _activated(self, hidden, value=None):
        """The first layer's output `hidden` (the gate, with a split SwiGLU's `value`) through
        the activation."""
        if self.activation == "gelu":
            return ops.gelu(hidden, approximate=self.approximate_gelu)
        if self.activation == "quick_gelu":
            return hidden * ops.sigmoid(ops.cast(1.702, hidden.dtype) * hidden)
        if value is not None:  # split swiglu
            return ops.silu(hidden) * value
        gate, value = ops.split(hidden, 2, axis=-1)  # packed swiglu
        return ops.silu(gate) * value

    def compute_output_shape(self, input_shape):
        return input_shape

    def get_config(self):
        return {**super().get_config(), "mlp_dim": self.mlp_dim, "dropout": self.dropout,
                "approximate_gelu": self.approximate_gelu, "activation": self.activation,
                "split_gate": self.split_gate, "inner_norm": self.inner_norm,
                "layer_norm_epsilon": self.layer_norm_epsilon, "use_bias": self.use_bias}


def _dense(units, name, policy, use_bias=True):
    return FactorKeepingDense(units, name=name, dtype=policy, kernel_initializer="glorot_uniform",
                              use_bias=use_bias,
                              bias_initializer=keras.initializers.RandomNormal(stddev=1e-6))
