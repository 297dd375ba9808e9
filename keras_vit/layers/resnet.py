"""The ResNetV2 pieces: the hybrids' trunk and BiT, computed as their official code does.

Pieces: `StdConv2D` (weight-standardised convolution, no bias), GroupNorm (32
groups), bottleneck units with the stride on the 3x3 convolution. The
hybrids' trunk (`BottleneckUnit`, `ResNetTrunk`) and BiT (`PreActBottleneckUnit`,
built into a model by `keras_vit.models.bit`) share the convolution and the
GroupNorm layer; they differ here, and only here:

    what               hybrid trunk (vit_jax models_resnet)   BiT (big_transfer; timm resnetv2_*_bit)
    unit order         post-activation: conv -> GN -> ReLU;   pre-activation: GN -> ReLU -> conv; the
                       ReLU after the residual sum            projection reads the pre-activated input;
                                                              nothing after the sum
    projection         conv_proj + gn_proj                    a/proj conv alone
    padding            TF "SAME" (stride 2: 0 before,         symmetric, kernel // 2 each side, as
                       1 after)                               PyTorch (explicit pad, then "valid")
    stem               7x7/2 conv, GN, ReLU, 3x3/2 max        7x7/2 conv, zero pad 1, 3x3/2 max pool
                       pool "SAME"                            unpadded (no GN, no ReLU)
    standardisation    (w - mean) / (std + 1e-5)              (w - mean) / sqrt(var + 1e-8) (timm's;
                                                              big_transfer's PyTorch code: 1e-10)
    GroupNorm epsilon  1e-6 (flax)                            1e-5 (PyTorch's, timm's)
    after the stages   nothing (the ViT follows)              GN, ReLU, global mean, 1x1 conv head

Sub-layers carry the checkpoint's names (`conv_root`, `gn_root`, `block{s}_unit{u}`
> `conv1`..`conv3`, `gn1`..`gn3`, `conv_proj`, `gn_proj` for the hybrids;
`block{s}_unit{uu}` > `a_conv`, `a_norm`, ..., `a_proj` for BiT), so each
checkpoint layout (`keras_vit.checkpoints.layout`) is a table of names.

The hybrid trunk's two epsilons are the official code's by default and arguments of
the trunk (saved in its config): transformers' ViTHybrid computes the same trunk with
GroupNorm epsilon 1e-5 and standardises by sqrt(var + 1e-8)
(`keras_vit.checkpoints.formats.transformers_hybrid.TRUNK_NUMERICS`).
"""

import keras
from keras import ops

from keras_vit.errors import ArgumentError

__all__ = ["StdConv2D", "BottleneckUnit", "ResNetTrunk", "PreActBottleneckUnit",
           "GROUP_NORM_EPSILON", "STD_CONV_EPSILON", "EPSILON_ON", "BIT_GROUP_NORM_EPSILON",
           "BIT_STD_CONV_EPSILON"]

GROUP_NORM_EPSILON = 1e-6  # flax nn.GroupNorm's default; Keras' default 1e-3 breaks parity
GROUP_NORM_GROUPS = 32
STD_CONV_EPSILON = 1e-5  # added to the standard deviation, as the official StdConv does
# Where StdConv2D adds its epsilon: "std", (w - mean) / (std + eps) as the official code; or
# "variance", (w - mean) / sqrt(var + eps) as timm and transformers (a batch norm of the kernel).
EPSILON_ON = ("std", "variance")
# BiT's numbers (the table above): timm's, the reference its weights are tested against.
BIT_GROUP_NORM_EPSILON = 1e-5
BIT_STD_CONV_EPSILON = 1e-8  # added to the variance


@keras.saving.register_keras_serializable(package="keras_vit")
class StdConv2D(keras.layers.Conv2D):
    """A bias-free Conv2D whose kernel is standardised on every call.

    `w = (w - mean(w)) / (std(w) + epsilon)` (`epsilon_on="std"`, the
    official ViT hybrids' `StdConv`, epsilon 1e-5), or
    `(w - mean(w)) / sqrt(var(w) + epsilon)` (`epsilon_on="variance"`: BiT, timm and
    transformers);
    mean and population variance over (height, width, in_channels) for each
    output channel. Input `(batch, H, W, Cin)`, output
    `(batch, ceil(H / stride), ceil(W / stride), filters)` with TF "SAME" padding
    (the default; any Conv2D `padding` may be given).
    """

    def __init__(self, filters, kernel_size, strides=1, epsilon=STD_CONV_EPSILON,
                 epsilon_on="std", **kwargs):
        if epsilon_on not in EPSILON_ON:
            raise ArgumentError(f'epsilon_on must be "std" or "variance", got {epsilon_on!r}.')
        kwargs.setdefault("padding", "same")
        kwargs["use_bias"] = False
        super().__init__(filters, kernel_size, strides=strides, **kwargs)
        self.epsilon = epsilon
        self.epsilon_on = epsilon_on

    def convolution_op(self, inputs, kernel):
        # Standardise in float32 even under mixed precision: std of a fp16 kernel loses digits.
        kernel = ops.cast(kernel, "float32")
        mean = ops.mean(kernel, axis=(0, 1, 2), keepdims=True)
        centred = kernel - mean
        variance = ops.mean(ops.square(centred), axis=(0, 1, 2), keepdims=True)
        if self.epsilon_on == "variance":
            scale = ops.sqrt(variance + self.epsilon)
        else:
            scale = ops.sqrt(variance) + self.epsilon
        kernel = ops.cast(centred / scale, inputs.dtype)
        return super().convolution_op(inputs, kernel)

    def get_config(self):
        config = super().get_config()
        config.pop("use_bias", None)
        return {**config, "epsilon": self.epsilon, "epsilon_on": self.epsilon_on}


def _group_norm(name, dtype, epsilon=GROUP_NORM_EPSILON, gamma_initializer="ones"):
    return keras.layers.GroupNormalization(groups=GROUP_NORM_GROUPS, epsilon=epsilon,
                                           gamma_initializer=gamma_initializer, name=name,
                                           dtype=dtype)


@keras.saving.register_keras_serializable(package="keras_vit")
class BottleneckUnit(keras.layers.Layer):
    """The official post-activation bottleneck `ResidualUnit`.

    `(batch, H, W, Cin) -> (batch, ceil(H / s), ceil(W / s), 4 * features)`:
    conv1 1x1 -> gn1 -> ReLU -> conv2 3x3 stride s -> gn2 -> ReLU -> conv3 1x1
    -> gn3 (scale starts at zero), added to the residual, then ReLU. The
    residual is projected (conv_proj 1x1 stride s + gn_proj) when the channel
    count or the resolution changes, i.e. in the first unit of every stage.
    `group_norm_epsilon`, `std_conv_epsilon` and `std_conv_epsilon_on` are the
    numerics (`StdConv2D`); the defaults are the official code's.
    """

    def __init__(self, features, strides=1, group_norm_epsilon=GROUP_NORM_EPSILON,
                 std_conv_epsilon=STD_CONV_EPSILON, std_conv_epsilon_on="std", **kwargs):
        super().__init__(**kwargs)
        self.features = features
        self.strides = strides
        self.numerics = {"group_norm_epsilon": group_norm_epsilon,
                         "std_conv_epsilon": std_conv_epsilon,
                         "std_conv_epsilon_on": std_conv_epsilon_on}
        dtype = self.dtype_policy
        self.conv1 = self._conv(features, 1, name="conv1")
        self.gn1 = _group_norm("gn1", dtype, group_norm_epsilon)
        self.conv2 = self._conv(features, 3, strides=strides, name="conv2")
        self.gn2 = _group_norm("gn2", dtype, group_norm_epsilon)
        self.conv3 = self._conv(4 * features, 1, name="conv3")
        self.gn3 = _group_norm("gn3", dtype, group_norm_epsilon, gamma_initializer="zeros")
        self.conv_proj = self.gn_proj = None

    def _conv(self, filters, kernel_size, strides=1, name=None):
        return StdConv2D(filters, kernel_size, strides=strides,
                         epsilon=self.numerics["std_conv_epsilon"],
                         epsilon_on=self.numerics["std_conv_epsilon_on"], name=name,
                         dtype=self.dtype_policy)

    def build(self, input_shape):
        out_channels = 4 * self.features
        if input_shape[-1] != out_channels or self.strides != 1:
            self.conv_proj = self._conv(out_channels, 1, strides=self.strides, name="conv_proj")
            self.gn_proj = _group_norm("gn_proj", self.dtype_policy,
                                       self.numerics["group_norm_epsilon"])
            self.conv_proj.build(input_shape)
            self.gn_proj.build(self.conv_proj.compute_output_shape(input_shape))
        self.conv1.build(input_shape)
        shape = self.conv1.compute_output_shape(input_shape)
        self.gn1.build(shape)
        self.conv2.build(shape)
        shape = self.conv2.compute_output_shape(shape)
        self.gn2.build(shape)
        self.conv3.build(shape)
        self.gn3.build(self.conv3.compute_output_shape(shape))

    def call(self, x):
        residual = x
        if self.conv_proj is not None:
            residual = self.gn_proj(self.conv_proj(x))
        y = ops.relu(self.gn1(self.conv1(x)))
        y = ops.relu(self.gn2(self.conv2(y)))
        y = self.gn3(self.conv3(y))
        return ops.relu(residual + y)

    def compute_output_shape(self, input_shape):
        return self.conv3.compute_output_shape(self.conv2.compute_output_shape(input_shape))

    def get_config(self):
        return {**super().get_config(), "features": self.features, "strides": self.strides,
                **self.numerics}


@keras.saving.register_keras_serializable(package="keras_vit")
class ResNetTrunk(keras.layers.Layer):
    """The hybrid models' ResNetV2 trunk: root block, then bottleneck stages (0.1: `ResNetStem`).

    `stages` gives the units per stage, e.g. (3, 4, 9) for R50+ViT-B/16; ()
    is the root block alone (R+ViT-Ti/16). Stage s has 64 * width * 2**(s-1)
    bottleneck features (4x that many output channels); stage 1 keeps the
    resolution, every later stage halves it.

    Input `(batch, H, W, C)`. Output `(batch, h, w, channels)` with
    `h = Variant.feature_size(H)` (ceil(H / stride), stride 4, 8, 16 or 32),
    or with `return_stages=True` a dict of every stage's output: "stem"
    (after the max-pool, /4) and "block1".."blockN".

    `group_norm_epsilon`, `std_conv_epsilon` and `std_conv_epsilon_on` are
    the numerics of every GroupNorm and `StdConv2D`; the defaults are the
    official code's; a model built from transformers' ViTHybrid weights gets
    theirs (1e-5, 1e-8, "variance").
    """

    def __init__(self, stages=(3, 4, 9), width=1, group_norm_epsilon=GROUP_NORM_EPSILON,
                 std_conv_epsilon=STD_CONV_EPSILON, std_conv_epsilon_on="std", **kwargs):
        super().__init__(**kwargs)
        self.stages = tuple(int(n) for n in stages)
        if any(n < 1 for n in self.stages):
            raise ArgumentError(f"Every ResNet stage needs at least one unit, got {self.stages}.")
        if std_conv_epsilon_on not in EPSILON_ON:
            raise ArgumentError('std_conv_epsilon_on must be "std" or "variance", got '
                                f"{std_conv_epsilon_on!r}.")
        self.width = width
        self.numerics = {"group_norm_epsilon": group_norm_epsilon,
                         "std_conv_epsilon": std_conv_epsilon,
                         "std_conv_epsilon_on": std_conv_epsilon_on}
        root = 64 * width
        dtype = self.dtype_policy
        self.conv_root = StdConv2D(root, 7, strides=2, epsilon=std_conv_epsilon,
                                   epsilon_on=std_conv_epsilon_on, name="conv_root", dtype=dtype)
        self.gn_root = _group_norm("gn_root", dtype, group_norm_epsilon)
        self.pool = keras.layers.MaxPooling2D(3, strides=2, padding="same", name="pool",
                                              dtype=dtype)
        self.units = []  # [(block index, unit index, layer)]
        for s, count in enumerate(self.stages, start=1):
            for u in range(1, count + 1):
                stride = 2 if s > 1 and u == 1 else 1
                self.units.append((s, u, BottleneckUnit(root * 2 ** (s - 1), stride,
                                                        **self.numerics,
                                                        name=f"block{s}_unit{u}", dtype=dtype)))

    def build(self, input_shape):
        self.conv_root.build(input_shape)
        shape = self.conv_root.compute_output_shape(input_shape)
        self.gn_root.build(shape)
        shape = self.pool.compute_output_shape(shape)
        for _, _, unit in self.units:
            unit.build(shape)
            shape = unit.compute_output_shape(shape)

    def call(self, images, return_stages=False):
        x = ops.relu(self.gn_root(self.conv_root(images)))
        x = self.pool(x)
        outputs = {"stem": x}
        for s, _, unit in self.units:
            x = unit(x)
            outputs[f"block{s}"] = x
        return outputs if return_stages else x

    def _stage_shapes(self, input_shape):
        """The shape of each output `call(..., return_stages=True)` gives, by name."""
        shape = self.pool.compute_output_shape(self.conv_root.compute_output_shape(input_shape))
        shapes = {"stem": tuple(shape)}
        for s, _, unit in self.units:
            shape = unit.compute_output_shape(shape)
            shapes[f"block{s}"] = tuple(shape)
        return shapes

    def compute_output_shape(self, input_shape):
        return list(self._stage_shapes(input_shape).values())[-1]

    def compute_output_spec(self, images, return_stages=False):
        # From the shapes alone: Keras would otherwise trace the whole trunk in a graph to
        # learn them each time a model is built (~3 CPU-s for the R50 trunk).
        specs = {name: keras.KerasTensor(shape, dtype=self.compute_dtype)
                 for name, shape in self._stage_shapes(images.shape).items()}
        return specs if return_stages else list(specs.values())[-1]

    def get_config(self):
        return {**super().get_config(), "stages": list(self.stages), "width": self.width,
                **self.numerics}


def bit_conv(filters, kernel_size, strides=1, name=None, dtype=None):
    """BiT's weight-standardised convolution, without padding (pad first: `symmetric_pad`)."""
    return StdConv2D(filters, kernel_size, strides=strides, epsilon=BIT_STD_CONV_EPSILON,
                     epsilon_on="variance", padding="valid", name=name, dtype=dtype)


def bit_group_norm(name, dtype=None):
    return _group_norm(name, dtype, epsilon=BIT_GROUP_NORM_EPSILON)


def symmetric_pad(x, pad):
    """Zeros, `pad` on each side of height and width: BiT's padding (PyTorch's, not TF "SAME")."""
    return ops.pad(x, [[0, 0], [pad, pad], [pad, pad], [0, 0]])


@keras.saving.register_keras_serializable(package="keras_vit")
class PreActBottleneckUnit(keras.layers.Layer):
    """BiT's pre-activation bottleneck unit (big_transfer `PreActBottleneck`).

    `(batch, H, W, Cin) -> (batch, ceil(H / s), ceil(W / s), 4 * features)`:
    p = ReLU(a_norm(x)); a_conv 1x1 -> b_norm -> ReLU -> b_conv 3x3 stride s
    (padded 1 each side) -> c_norm -> ReLU -> c_conv 1x1, added to the
    shortcut: x, or a_proj(p) (1x1 stride s) when the channel count or the
    resolution changes (a stage's first unit). No activation after the sum.
    """

    def __init__(self, features, strides=1, **kwargs):
        super().__init__(**kwargs)
        self.features = features
        self.strides = strides
        dtype = self.dtype_policy
        self.a_norm = bit_group_norm("a_norm", dtype)
        self.a_conv = bit_conv(features, 1, name="a_conv", dtype=dtype)
        self.b_norm = bit_group_norm("b_norm", dtype)
        self.b_conv = bit_conv(features, 3, strides=strides, name="b_conv", dtype=dtype)
        self.c_norm = bit_group_norm("c_norm", dtype)
        self.c_conv = bit_conv(4 * features, 1, name="c_conv", dtype=dtype)
        self.a_proj = None

    def build(self, input_shape):
        out_channels = 4 * self.features
        if input_shape[-1] != out_channels or self.strides != 1:
            self.a_proj = bit_conv(out_channels, 1, strides=self.strides, name="a_proj",
                                   dtype=self.dtype_policy)
            self.a_proj.build(input_shape)
        self.a_norm.build(input_shape)
        self.a_conv.build(input_shape)
        shape = self.a_conv.compute_output_shape(input_shape)
        self.b_norm.build(shape)
        shape = _padded(shape, 1)
        self.b_conv.build(shape)
        shape = self.b_conv.compute_output_shape(shape)
        self.c_norm.build(shape)
        self.c_conv.build(shape)

    def call(self, x):
        preact = ops.relu(self.a_norm(x))
        shortcut = x if self.a_proj is None else self.a_proj(preact)
        y = self.a_conv(preact)
        y = self.b_conv(symmetric_pad(ops.relu(self.b_norm(y)), 1))
        y = self.c_conv(ops.relu(self.c_norm(y)))
        return y + shortcut

    def compute_output_shape(self, input_shape):
        shape = self.b_conv.compute_output_shape(_padded(input_shape, 1))
        return (*shape[:-1], 4 * self.features)

    def get_config(self):
        return {**super().get_config(), "features": self.features, "strides": self.strides}


def _padded(shape, pad):
    return (shape[0], *(None if s is None else s + 2 * pad for s in shape[1:3]), shape[3])


# 0.1 called the trunk ResNetStem: its .keras files name "keras_vit>ResNetStem", which
# loads as ResNetTrunk, and the Python name warns (keras_vit/_lazy.py). Both go in 0.3.
keras.saving.get_custom_objects()["keras_vit>ResNetStem"] = ResNetTrunk


def __getattr__(name):
    from keras_vit._lazy import moved_name

    return moved_name(__name__, name)
