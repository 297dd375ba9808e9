"""The encoder block: pre-norm multi-head self-attention and MLP, with residuals.

Sub-layers carry the official checkpoint's names (LayerNorm_0, MultiHeadDotProductAttention_1,
LayerNorm_2, MlpBlock_3) so that weight loading is a table of names, not code.
"""

import math

import keras
import numpy as np
from keras import ops

from keras_vit._support.private_keras import check_private_keras
from keras_vit.errors import ArgumentError
from keras_vit.layers import attention_kernels
from keras_vit.layers.drop_path import DropPath
from keras_vit.layers.layer_scale import LayerScale
from keras_vit.layers.mlp import (  # noqa: F401 (MLP_*: where the package has always found them)
    LAYER_NORM_EPSILON,
    MLP_ACTIVATIONS,
    MLP_HIDDEN_NAME,
    MLP_OUTPUT_NAME,
    MlpBlock,
)
from keras_vit.layers.naflex import masked_scores
from keras_vit.layers.norms import token_norm
from keras_vit.layers.recompute import recomputed_in_training
from keras_vit.layers.rotary import RotaryPositionEmbedding

__all__ = ["MultiHeadSelfAttention", "MlpBlock", "LayerScale", "TransformerBlock",
           "use_fused_attention", "MLP_ACTIVATIONS", "QKV_BIASES", "saved_dtype_policy"]

# The attention's projections LoRA can adapt, in the fused kernel's column order, then the output.
LORA_TARGETS = ("query", "key", "value", "out")
# Which of query, key and value have a bias: all three (the paper), query and value (EVA's, and
# DINOv3's "qkvb" models: timm keeps the key's at zero, not a weight), or none (DINOv3).
QKV_BIASES = {"qkv": (True, True, True), "qv": (True, False, True), "none": (False, False, False)}


@keras.saving.register_keras_serializable(package="keras_vit")
class MultiHeadSelfAttention(keras.layers.Layer):
    """Multi-head self-attention with one fused query/key/value projection.

    Input and output `(batch, tokens, D)`. The three projections live in one `(D, 3 * D)`
    kernel so that a single matrix multiply computes them; the official `query`, `key`, `value`
    kernels `(D, heads, head_dim)` are its column blocks in that order. Queries are scaled by
    `1 / sqrt(head_dim)`. With `return_attention_scores=True` the call also returns the softmax
    weights, `(batch, heads, queries, tokens)`. With `first_token_only=True` only the first
    token queries (keys and values still come from every token) and the output is
    `(batch, 1, D)`. With `valid` `(batch, tokens)` (NaFlex's padding mask) keys where it is
    False get no weight.

    Without attention weights to return (and without attention dropout while training), the
    attention runs on the kernel `attention_kernels.choose_path` picks for the backend, device
    and precision: the fused (flash) kernels of GPUs and TPUs, padded to a length cuDNN trains
    on, or float32 attention in query blocks whose scores are recomputed, not stored, for the
    backward pass. Every path gives the same result to float32 rounding.

    `qkv_bias` says which projections have a bias (`QKV_BIASES`): "qkv", "qv" (the key's is
    zero, not a weight: the bias weight holds the query's and the value's, `(2 * D,)`) or
    "none"; `out_bias=False` drops the output projection's (AIMv2). `rope`, a
    `RotaryPositionEmbedding` config (`{"style": "dinov3", "num_prefix_tokens": 5}`), rotates
    queries and keys by their patch's position; the call's `grid_shape` gives the patch grid.
    """

    def __init__(self, num_heads, dropout=0.0, kernel_initializer="glorot_uniform", qkv_bias="qkv",
                 rope=None, out_bias=True, **kwargs):
        super().__init__(**kwargs)
        if qkv_bias not in QKV_BIASES:
            raise ArgumentError(f"qkv_bias must be one of {sorted(QKV_BIASES)}; got {qkv_bias!r}.")
        self.num_heads = num_heads
        self.dropout = dropout
        self.qkv_bias_mode, self.has_out_bias = qkv_bias, bool(out_bias)
        self.rope = dict(rope) if rope else None
        self.rotary = RotaryPositionEmbedding(**self.rope, dtype=self.dtype_policy) if rope else None
        self.kernel_initializer = keras.initializers.get(kernel_initializer)
        self.attention_dropout = keras.layers.Dropout(dropout, dtype=self.dtype_policy)
        # None: `attention_kernels.choose_path` decides; True/False or a path name (one of
        # attention_kernels.PATHS) force one (tests, benchmarks).
        self.fused_attention = None
        # LoRA factors by projection name, {"query": (a, b), ...} (`enable_lora`); never in
        # the config: saved by name beside the kernels, a layer without LoRA loads them merged
        # (save_own_variables, load_own_variables; keras_vit/lora.py).
        self.lora_factors = {}
        self.lora_scale = 1.0

    def build(self, input_shape):
        width = input_shape[-1]
        if width % self.num_heads:
            raise ArgumentError(f"Width {width} is not divisible by {self.num_heads} heads.")
        self.head_dim = width // self.num_heads
        self.qkv_kernel = self.add_weight(name="qkv_kernel", shape=(width, 3 * width),
                                          initializer=self.kernel_initializer)
        biased = sum(QKV_BIASES[self.qkv_bias_mode])
        self.qkv_bias = self.add_weight(name="qkv_bias", shape=(biased * width,),
                                        initializer="zeros") if biased else None
        self.out_kernel = self.add_weight(name="out_kernel", shape=(width, width),
                                          initializer=self.kernel_initializer)
        self.out_bias = self.add_weight(name="out_bias", shape=(width,), initializer="zeros") \
            if self.has_out_bias else None

    @property
    def biased_projections(self):
        """The projections of query, key and value with a bias, in the fused kernel's order
        (the bias weight holds theirs, concatenated)."""
        return tuple(name for name, has in zip(("query", "key", "value"),
                                               QKV_BIASES[self.qkv_bias_mode]) if has)

    def _full_bias(self, dtype):
        """The (3 * D,) bias of query, key and value, zeros where a projection has none."""
        width = self.qkv_kernel.shape[0]
        if self.qkv_bias_mode == "qkv":
            return ops.cast(self.qkv_bias, dtype)
        if self.qkv_bias is None:
            return ops.zeros((3 * width,), dtype)
        query, value = ops.split(ops.cast(self.qkv_bias, dtype), 2)
        return ops.concatenate([query, ops.zeros((width,), dtype), value])

    def call(self, x, training=None, return_attention_scores=False, first_token_only=False,
             grid_shape=None, valid=None):
        batch, tokens, width = ops.shape(x)[0], ops.shape(x)[1], x.shape[-1]
        kernel = ops.cast(self.qkv_kernel, x.dtype)
        bias = self._full_bias(x.dtype)
        # Projections run on (batch * tokens, D) matrices: `ops.add` of a bias to a 2-D
        # matmul is the MatMul + BiasAdd pair that TensorFlow fuses into one kernel.
        flat = ops.reshape(x, (-1, width))
        if first_token_only:
            query = self._lora("query", x[:, 0], _dense(x[:, 0], kernel[:, :width], bias[:width]))
            key, value = ops.split(_dense(flat, kernel[:, width:], bias[width:]), 2, axis=-1)
            queries = 1
        else:
            # split (not indexing): its gradient is one concat, not three zero-padded copies
            query, key, value = ops.split(_dense(flat, kernel, bias), 3, axis=-1)
            query = self._lora("query", flat, query)
            queries = tokens
        key, value = self._lora("key", flat, key), self._lora("value", flat, value)
        if self.rotary is not None:  # the class token's query (first_token_only) is not rotated
            heads = (self.num_heads, self.head_dim)
            key = ops.reshape(self.rotary(ops.reshape(key, (batch, tokens, *heads)),
                                          grid_shape=grid_shape), (-1, width))
            if not first_token_only:
                query = ops.reshape(self.rotary(ops.reshape(query, (batch, tokens, *heads)),
                                                grid_shape=grid_shape), (-1, width))
        # Padding (NaFlex's `valid` keys) is masked on the explicit path.
        setting = attention_kernels.EXPLICIT if valid is not None else self.fused_attention
        path = attention_kernels.choose_path(x.dtype, training, self.dropout, return_attention_scores,
                                             setting)
        if path != attention_kernels.EXPLICIT:
            # (batch, tokens, heads, head_dim) in and out: no transposes; every kernel
            # computes the softmax in float32 like the explicit path below.
            heads = (self.num_heads, self.head_dim)
            attended = attention_kernels.attend(
                path, ops.reshape(query, (batch, queries, *heads)), ops.reshape(key, (batch, tokens, *heads)),
                ops.reshape(value, (batch, tokens, *heads)), scale=1.0 / math.sqrt(self.head_dim))
            return self._project(attended, batch, queries, width, return_attention_scores, None)
        scale = ops.cast(1.0 / math.sqrt(self.head_dim), x.dtype)
        query = self._heads(query * scale, batch, queries, (0, 2, 1, 3))
        key = self._heads(key, batch, tokens, (0, 2, 3, 1))  # transposed for query @ key
        value = self._heads(value, batch, tokens, (0, 2, 1, 3))
        scores = masked_scores(ops.cast(ops.matmul(query, key), "float32"), valid)
        weights = ops.cast(ops.softmax(scores, axis=-1), x.dtype)
        attended = ops.matmul(self.attention_dropout(weights, training=training), value)
        attended = ops.transpose(attended, (0, 2, 1, 3))
        return self._project(attended, batch, queries, width, return_attention_scores, weights)

    def _project(self, attended, batch, queries, width, return_attention_scores, weights):
        """`(batch, queries, heads, head_dim)` -> the output projection, `(batch, queries, D)`."""
        attended = ops.reshape(attended, (-1, width))
        dtype = attended.dtype
        out = ops.matmul(attended, ops.cast(self.out_kernel, dtype)) if self.out_bias is None \
            else _dense(attended, ops.cast(self.out_kernel, dtype), ops.cast(self.out_bias, dtype))
        out = self._lora("out", attended, out)
        out = ops.reshape(out, (batch, queries, width))
        if return_attention_scores:
            return out, weights
        return out

    def enable_lora(self, rank, targets=LORA_TARGETS, lora_alpha=None):
        """LoRA on the projections named in `targets` ("query", "key", "value", "out"), as
        Keras' `Dense.enable_lora`: each gains float32 factors `a` `(D, rank)` (he_uniform)
        and `b` `(rank, D)` (zeros), adds `lora_alpha / rank * (x @ a) @ b` to its output, and
        its kernel and bias stop training. The fused query/key/value kernel is one weight, so
        Dense's method cannot be called per projection; this is its arithmetic per column block.
        """
        unknown = sorted(set(targets) - set(LORA_TARGETS))
        if unknown or not targets:
            raise ArgumentError(f"LoRA targets of the attention are {', '.join(LORA_TARGETS)}; "
                                f"got {list(targets)!r}.")
        if not self.built:
            raise ArgumentError("enable_lora needs a built layer (build the model first).")
        if self.lora_factors:
            raise ArgumentError(f"{self.name} has LoRA already; enable it once per layer.")
        check_private_keras("LoRA on the fused attention", self, "_tracker")
        width = self.out_kernel.shape[0]
        self._tracker.unlock()  # as Dense.enable_lora: weights added to a built layer
        for name in targets:
            self.lora_factors[name] = (
                self.add_weight(name=f"lora_{name}_a", shape=(width, rank),
                                initializer="he_uniform", dtype="float32"),
                self.add_weight(name=f"lora_{name}_b", shape=(rank, width),
                                initializer="zeros", dtype="float32"))
        self._tracker.lock()
        for variable in self._base_variables():
            variable.trainable = False
        self.lora_scale = (rank if lora_alpha is None else lora_alpha) / rank

    def lora_deltas(self):
        """{projection name: its LoRA update to the kernel, `scale * a @ b`, (D, D)}."""
        return {name: self.lora_scale * ops.matmul(a, b)
                for name, (a, b) in self.lora_factors.items()}

    def merged_kernels(self):
        """(qkv kernel, out kernel) as NumPy arrays with the LoRA updates added: what the
        layer computes, as an ordinary layer's weights."""
        return _merged(self.qkv_kernel, self.out_kernel, self.lora_deltas())

    def save_own_variables(self, store):
        """The four variables of a layer without LoRA ("0" to "3"), and under LoRA its factors
        and scale by name beside them: a layer without LoRA loads the file merged (Keras'
        `load_model` after `model.save`), a LoRA layer loads it exactly (a run's backup)."""
        for i, variable in enumerate(self._base_variables()):
            store[str(i)] = variable
        if self.lora_factors:
            store["lora_scale"] = np.asarray(self.lora_scale, np.float32)
            for name, (a, b) in self.lora_factors.items():
                store[f"lora_{name}_a"], store[f"lora_{name}_b"] = a, b

    def load_own_variables(self, store):
        """What `save_own_variables` wrote, or the positional layout of every variable. Stored
        factors this layer does not have are merged into its kernels; factors it has that the
        store lacks restart with `b` at zero, so the layer computes what the store holds."""
        keys = set(store.keys())
        own = self._trainable_variables + self._non_trainable_variables
        if keys == {str(i) for i in range(len(own))}:  # positional: as Keras lays any layer out
            return super().load_own_variables(store)
        stored = sorted({key[len("lora_"):-2] for key in keys
                         if key.startswith("lora_") and key.endswith(("_a", "_b"))})
        base = self._base_variables()
        expected = {str(i) for i in range(len(base))} | ({"lora_scale"} if stored else set()) | {
            f"lora_{name}_{factor}" for name in stored for factor in "ab"}
        if keys != expected:
            raise ValueError(f"Layer '{self.name}' expected its {len(base)} variables and any LoRA "
                             f"factors, but received {sorted(keys)} during loading.")
        values = [store[str(i)] for i in range(len(base))]
        out = next(i for i, variable in enumerate(base) if variable is self.out_kernel)
        qkv_kernel, out_kernel = values[0], values[out]
        scale = float(np.asarray(store["lora_scale"])) if stored else None
        if stored and stored == sorted(self.lora_factors) and scale == self.lora_scale:
            for name in stored:  # the same LoRA: restored as it was
                a, b = self.lora_factors[name]
                a.assign(store[f"lora_{name}_a"])
                b.assign(store[f"lora_{name}_b"])
        else:
            deltas = {name: scale * np.asarray(store[f"lora_{name}_a"], np.float32)
                      @ np.asarray(store[f"lora_{name}_b"], np.float32) for name in stored}
            qkv_kernel, out_kernel = _merged(qkv_kernel, out_kernel, deltas)
            for _, b in self.lora_factors.values():
                b.assign(ops.zeros(b.shape, b.dtype))
        values[0], values[out] = qkv_kernel, out_kernel
        for variable, value in zip(base, values):
            variable.assign(value)

    def _base_variables(self):
        """The weights in the order they were made (the qkv bias only where there is one)."""
        return tuple(v for v in (self.qkv_kernel, self.qkv_bias, self.out_kernel, self.out_bias)
                     if v is not None)

    def _lora(self, name, inputs, outputs):
        """`outputs` plus the LoRA update of projection `name` (Dense's order of operations:
        through the rank first, never the (D, D) product)."""
        if name not in self.lora_factors:
            return outputs
        a, b = (ops.cast(factor, inputs.dtype) for factor in self.lora_factors[name])
        return outputs + ops.cast(self.lora_scale, inputs.dtype) * ops.matmul(ops.matmul(inputs, a), b)

    def _heads(self, x, batch, tokens, order):
        """`(batch * tokens, D)` -> `(batch, heads, ., .)` with the axes in `order`."""
        return ops.transpose(ops.reshape(x, (batch, tokens, self.num_heads, self.head_dim)), order)

    def compute_output_shape(self, input_shape):
        return input_shape

    def compute_output_spec(self, x, training=None, return_attention_scores=False,
                            first_token_only=False, grid_shape=None, valid=None):
        return _output_spec(self, x, return_attention_scores, first_token_only)

    def get_config(self):
        return {**super().get_config(), "num_heads": self.num_heads, "dropout": self.dropout,
                "kernel_initializer": keras.initializers.serialize(self.kernel_initializer),
                "qkv_bias": self.qkv_bias_mode, "rope": self.rope, "out_bias": self.has_out_bias}


def _merged(qkv_kernel, out_kernel, deltas):
    """(qkv kernel, out kernel) as NumPy arrays plus `deltas`, {projection: (D, D) update}:
    query, key and value are the fused kernel's column blocks."""
    deltas = {name: ops.convert_to_numpy(delta) for name, delta in deltas.items()}
    qkv = np.array(ops.convert_to_numpy(qkv_kernel), copy=True)
    width = qkv.shape[0]
    for column, name in enumerate(("query", "key", "value")):
        if name in deltas:
            qkv[:, column * width:(column + 1) * width] += deltas[name]
    return qkv, ops.convert_to_numpy(out_kernel) + deltas.get("out", 0)


@keras.saving.register_keras_serializable(package="keras_vit")
class TransformerBlock(keras.layers.Layer):
    """One pre-norm encoder block: `x + MSA(LN(x))`, then `y + MLP(LN(y))`.

    Input and output `(batch, tokens, D)`. With `return_attention_scores=True`
    the call returns `(output, attention_weights)`.

    With `first_token_only=True` the block computes the output of the first
    (class) token alone, `(batch, 1, D)`: its attention over all tokens, then
    its MLP. A classifier that reads only the class token needs nothing else
    from the last block, so `keras_vit.ViT` builds its last block this way
    when it pools the class token: the same result to float32 rounding, with
    about 7% fewer FLOPs for ViT-B/16 at 224.

    `drop_path` is the stochastic depth rate of both residual branches (`DropPath`).
    The families' switches: `activation`, `split_gate` and `mlp_norm` (the MLP's, `MlpBlock`),
    `layer_scale` (LayerScale's on both branches), `qkv_bias` and `rope` (the attention's),
    `norm` (both norms' kind, "layer" or "rms") and `proj_bias` (False: AIMv2's attention output
    and MLP without biases); with `rope`, the call's `grid`, any tensor
    `(batch, rows, columns, ...)` such as the patch embedding's grid, gives the patch grid;
    `valid` `(batch, tokens)`, NaFlex's padding mask, keeps the attention off padding.
    With `remat` set (an attribute, not saved), training stores the block's input alone and
    recomputes the rest in the backward pass: less memory, about a third more compute.
    """

    def __init__(self, num_heads, mlp_dim, dropout=0.0, attention_dropout=0.0,
                 approximate_gelu=True, layer_norm_epsilon=LAYER_NORM_EPSILON, drop_path=0.0,
                 activation="gelu", layer_scale=None, split_gate=False, mlp_norm=False,
                 qkv_bias="qkv", rope=None, norm="layer", proj_bias=True, **kwargs):
        super().__init__(**kwargs)
        # The families' switches (keras_vit/variants/table.py Variant.block_options).
        self.norm, self.proj_bias = norm, bool(proj_bias)
        self.activation = activation
        self.layer_scale = layer_scale
        self.split_gate, self.mlp_norm = bool(split_gate), bool(mlp_norm)
        self.qkv_bias, self.rope = qkv_bias, dict(rope) if rope else None
        self.num_heads = num_heads
        # transformers' google/vit-* models use 1e-12; the official ones 1e-6.
        self.layer_norm_epsilon = layer_norm_epsilon
        self.mlp_dim = mlp_dim
        self.dropout = dropout
        self.attention_dropout = attention_dropout
        self.approximate_gelu = approximate_gelu
        self.drop_path = drop_path
        policy = self.dtype_policy
        self.drop_path_0 = DropPath(drop_path, dtype=policy)
        self.drop_path_1 = DropPath(drop_path, dtype=policy)
        self.norm_0, self.norm_2 = (token_norm(norm, layer_norm_epsilon, name, policy)
                                    for name in ("LayerNorm_0", "LayerNorm_2"))
        self.attention = MultiHeadSelfAttention(num_heads, dropout=attention_dropout,
                                                qkv_bias=qkv_bias, rope=self.rope, out_bias=proj_bias,
                                                name="MultiHeadDotProductAttention_1", dtype=policy)
        self.attention_output_dropout = keras.layers.Dropout(dropout, dtype=policy)
        self.mlp = MlpBlock(mlp_dim, dropout=dropout, approximate_gelu=approximate_gelu,
                            activation=activation, split_gate=split_gate, inner_norm=mlp_norm,
                            use_bias=proj_bias,
                            layer_norm_epsilon=layer_norm_epsilon, name="MlpBlock_3", dtype=policy)
        # Whether training recomputes the block in the backward pass (`--remat`): a way to run
        # it, not part of the architecture, so not in the config.
        self.remat = False
        # Named after the branch each scales, as the other sub-layers are numbered.
        self.layer_scale_1 = self.layer_scale_3 = None
        if layer_scale is not None:
            self.layer_scale_1 = LayerScale(layer_scale, name="LayerScale_1", dtype=policy)
            self.layer_scale_3 = LayerScale(layer_scale, name="LayerScale_3", dtype=policy)

    def build(self, input_shape):
        for layer in (self.norm_0, self.attention, self.norm_2, self.mlp, self.layer_scale_1,
                      self.layer_scale_3):
            if layer is not None:
                layer.build(input_shape)

    def call(self, x, training=None, return_attention_scores=False, first_token_only=False,
             grid=None, valid=None):
        grid_shape = None if grid is None else (ops.shape(grid)[1], ops.shape(grid)[2])
        if self.remat and training and not return_attention_scores:
            return self._rematerialised(x, training, first_token_only, grid_shape, valid)
        return self._block(x, training, return_attention_scores, first_token_only, grid_shape, valid)

    def _rematerialised(self, x, training, first_token_only, grid_shape=None, valid=None):
        """Gradient checkpointing: the backward pass recomputes the block from its input
        instead of keeping its activations (jax.checkpoint, tf.recompute_grad, torch's).

        The recomputation must draw the forward pass's dropout and drop-path masks, and no
        generator's state may change inside it (JAX would leak a traced state; TensorFlow and
        torch would recompute with states the forward pass advanced): each generator draws
        its seed here, outside, and the seeds go in as inputs that the layers' draws return."""
        # the layers that draw in training: dropout and drop path at a rate above 0
        generators = [layer.seed_generator for layer in self._flatten_layers()
                      if getattr(layer, "seed_generator", None) is not None
                      and getattr(layer, "rate", 0) > 0]
        seeds = [generator.next() for generator in generators]

        def block(x, *seeds):
            for generator, seed in zip(generators, seeds):
                generator.next = lambda ordered=True, seed=seed: seed
            try:
                return self._block(x, training, False, first_token_only, grid_shape, valid)
            finally:
                for generator in generators:
                    del generator.next  # the class's method again

        return keras.remat(block)(x, *seeds)

    def _block(self, x, training=None, return_attention_scores=False, first_token_only=False,
               grid_shape=None, valid=None):
        norm_0, norm_2 = (recomputed_in_training(n, training) for n in (self.norm_0, self.norm_2))
        attended = self.attention(norm_0(x), training=training,
                                  return_attention_scores=return_attention_scores,
                                  first_token_only=first_token_only, grid_shape=grid_shape,
                                  valid=valid)
        if return_attention_scores:
            attended, weights = attended
        if first_token_only:
            x = x[:, :1]
        if self.layer_scale_1 is not None:
            attended = self.layer_scale_1(attended)
        x = x + self.drop_path_0(self.attention_output_dropout(attended, training=training),
                                 training=training)
        fed_forward = self.mlp(norm_2(x), training=training)
        if self.layer_scale_3 is not None:
            fed_forward = self.layer_scale_3(fed_forward)
        x = x + self.drop_path_1(fed_forward, training=training)
        if return_attention_scores:
            return x, weights
        return x

    def compute_output_shape(self, input_shape):
        return input_shape

    def compute_output_spec(self, x, training=None, return_attention_scores=False,
                            first_token_only=False, grid=None, valid=None):
        return _output_spec(self, x, return_attention_scores, first_token_only)

    def get_config(self):
        return {
            **super().get_config(),
            "dtype": saved_dtype_policy(self, self.mlp.dense_layers),
            "num_heads": self.num_heads,
            "mlp_dim": self.mlp_dim,
            "dropout": self.dropout,
            "attention_dropout": self.attention_dropout,
            "approximate_gelu": self.approximate_gelu,
            "layer_norm_epsilon": self.layer_norm_epsilon,
            "drop_path": self.drop_path,
            "activation": self.activation,
            "layer_scale": self.layer_scale,
            "split_gate": self.split_gate, "mlp_norm": self.mlp_norm,
            "qkv_bias": self.qkv_bias,
            "rope": self.rope,
            "norm": self.norm,
            "proj_bias": self.proj_bias,
        }


def saved_dtype_policy(layer, sublayers):
    """The `dtype` a composite layer's config saves: its policy, or, once `Model.quantize`
    has quantised some of its `sublayers` (the MLP's `Dense` layers, the only layers in a
    block Keras quantises), a `DTypePolicyMap` of those sub-layers' policies by path, with
    the layer's own policy as the default.

    The sub-layers are made in `__init__` from the parent's config, so without the map they
    would be rebuilt in float on load and the saved int8 variables would not fit them; with it
    each sub-layer, given the map as its dtype, finds its own policy by its path (as
    keras-hub's `Backbone.get_config` does for a whole model).
    """
    policy = layer.dtype_policy
    quantized = [sub for sub in sublayers if sub.quantization_mode is not None]
    if quantized and not isinstance(policy, keras.dtype_policies.DTypePolicyMap):
        policy_map = keras.dtype_policies.DTypePolicyMap(default_policy=policy)
        for sub in quantized:
            policy_map[sub.path] = sub.dtype_policy
        policy = policy_map
    return keras.dtype_policies.serialize(policy)


def use_fused_attention(setting=None):
    """Whether a float32 inference call leaves the explicit matmul-softmax-matmul here;
    `setting` True/False forces it (the choice is `attention_kernels.choose_path`'s)."""
    return attention_kernels.choose_path("float32", setting=setting) != attention_kernels.EXPLICIT


def _dense(x, kernel, bias):
    return ops.add(ops.matmul(x, kernel), bias)  # ops.add, not "+": it emits a fusable BiasAdd


def _output_spec(layer, x, return_attention_scores, first_token_only):
    """Symbolic outputs; without this, `compute_output_shape` hides the attention output."""
    batch, tokens, width = x.shape
    queries = 1 if first_token_only else tokens
    output = keras.KerasTensor((batch, queries, width), dtype=layer.compute_dtype)
    if not return_attention_scores:
        return output
    weights = keras.KerasTensor((batch, layer.num_heads, queries, tokens),
                                dtype=layer.compute_dtype)
    return output, weights
