"""MAPHead: multi-head attention pooling, SigLIP's way of reducing the tokens to one vector.

big_vision's `MAPHead` (timm's `AttentionPoolLatent`): a learned probe token queries the
encoder's tokens with multi-head attention, then an MLP on the LayerNorm of the result is
added to it. The weights are named as big_vision's (`probe`, `MultiHeadDotProductAttention_0`,
`LayerNorm_0`, `MlpBlock_0`), so loading is a table of names.
"""

import math

import keras
from keras import ops

from keras_vit.errors import ArgumentError
from keras_vit.layers.naflex import masked_scores
from keras_vit.layers.transformer import LAYER_NORM_EPSILON, MlpBlock, saved_dtype_policy

__all__ = ["MAPHead"]


@keras.saving.register_keras_serializable(package="keras_vit")
class MAPHead(keras.layers.Layer):
    """`(batch, n, D) -> (batch, D)`: a learned probe attends over the tokens, then
    `y + MLP(LN(y))`.

    The query projection acts on the probe alone, the key and value projections on the
    tokens, in one `(D, 2 D)` kernel (timm's `kv`); queries are scaled by
    `1 / sqrt(head_dim)`. The MLP is the encoder's (`MlpBlock`, same activation).
    """

    def __init__(self, num_heads, mlp_dim, approximate_gelu=True, activation="gelu",
                 layer_norm_epsilon=LAYER_NORM_EPSILON, **kwargs):
        super().__init__(**kwargs)
        self.num_heads = num_heads
        self.mlp_dim = mlp_dim
        self.approximate_gelu = approximate_gelu
        self.activation = activation
        self.layer_norm_epsilon = layer_norm_epsilon
        policy = self.dtype_policy
        self.norm = keras.layers.LayerNormalization(epsilon=layer_norm_epsilon, name="LayerNorm_0",
                                                    dtype=policy)
        self.mlp = MlpBlock(mlp_dim, approximate_gelu=approximate_gelu, activation=activation,
                            name="MlpBlock_0", dtype=policy)

    def build(self, input_shape):
        width = input_shape[-1]
        if width % self.num_heads:
            raise ArgumentError(f"Width {width} is not divisible by {self.num_heads} heads.")
        self.head_dim = width // self.num_heads
        init = keras.initializers.GlorotUniform()
        self.probe = self.add_weight(name="probe", shape=(1, 1, width), initializer=init)
        self.query_kernel = self.add_weight(name="query_kernel", shape=(width, width),
                                            initializer=init)
        self.query_bias = self.add_weight(name="query_bias", shape=(width,), initializer="zeros")
        self.kv_kernel = self.add_weight(name="kv_kernel", shape=(width, 2 * width),
                                         initializer=init)
        self.kv_bias = self.add_weight(name="kv_bias", shape=(2 * width,), initializer="zeros")
        self.out_kernel = self.add_weight(name="out_kernel", shape=(width, width),
                                          initializer=init)
        self.out_bias = self.add_weight(name="out_bias", shape=(width,), initializer="zeros")
        self.norm.build((input_shape[0], 1, width))
        self.mlp.build((input_shape[0], 1, width))

    def call(self, tokens, valid=None):
        dtype = tokens.dtype
        batch, n, width = ops.shape(tokens)[0], ops.shape(tokens)[1], tokens.shape[-1]
        heads, head_dim = self.num_heads, self.head_dim
        probe = ops.reshape(ops.cast(self.probe, dtype), (1, width))
        query = ops.matmul(probe, ops.cast(self.query_kernel, dtype)) + ops.cast(self.query_bias, dtype)
        query = ops.reshape(query * ops.cast(1.0 / math.sqrt(head_dim), dtype), (heads, 1, head_dim))
        kv = ops.matmul(tokens, ops.cast(self.kv_kernel, dtype)) + ops.cast(self.kv_bias, dtype)
        key, value = ops.split(kv, 2, axis=-1)
        key = ops.transpose(ops.reshape(key, (batch, n, heads, head_dim)), (0, 2, 3, 1))
        value = ops.transpose(ops.reshape(value, (batch, n, heads, head_dim)), (0, 2, 1, 3))
        scores = ops.matmul(query[None], key)  # (batch, heads, 1, n)
        # NaFlex's padding (`valid` False, (batch, n)) is never pooled.
        scores = masked_scores(ops.cast(scores, "float32"), valid)
        weights = ops.cast(ops.softmax(scores, axis=-1), dtype)
        attended = ops.reshape(ops.matmul(weights, value), (batch, width))  # heads in order
        pooled = ops.matmul(attended, ops.cast(self.out_kernel, dtype)) + ops.cast(self.out_bias, dtype)
        pooled = pooled[:, None]
        pooled = pooled + self.mlp(self.norm(pooled))
        return pooled[:, 0]

    def compute_output_shape(self, input_shape):
        return (input_shape[0], input_shape[-1])

    def compute_output_spec(self, tokens, valid=None):
        return keras.KerasTensor((tokens.shape[0], tokens.shape[-1]), dtype=self.compute_dtype)

    def get_config(self):
        return {**super().get_config(),
                "dtype": saved_dtype_policy(self, (self.mlp.dense_0, self.mlp.dense_1)),
                "num_heads": self.num_heads, "mlp_dim": self.mlp_dim,
                "approximate_gelu": self.approximate_gelu, "activation": self.activation,
                "layer_norm_epsilon": self.layer_norm_epsilon}
