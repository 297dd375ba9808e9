"""The models under test, each as an inference call and a training step on fixed inputs.

Every candidate builds the same architecture with random weights and a
1000-class (or `classes`) head: keras_vit's `ViT`, keras-hub's `ViTBackbone`
plus a class-token head, and timm's `VisionTransformer`. Keras models run
under `tf.function`, as a graph, XLA-compiled (`jit_compile`), or for keras_vit
also in the mode keras_vit.runtime.execution chooses on this machine ("auto").
"""

import dataclasses
import sys
import types

import numpy as np

from benchmarks import flops


@dataclasses.dataclass(frozen=True)
class Arch:
    """A plain ViT: transformer sizes, patch, image size, head."""

    width: int
    depth: int
    mlp_dim: int
    heads: int
    patch_size: int
    image_size: int
    classes: int = 1000


VIT_B16 = Arch(768, 12, 3072, 12, 16, 224)
VIT_S16 = Arch(384, 12, 1536, 6, 16, 224)
ARCHS = {"B/16": VIT_B16, "S/16": VIT_S16}
TINY = Arch(64, 2, 128, 2, 8, 32, classes=10)


@dataclasses.dataclass
class Candidate:
    """A named model: `infer(batch)` and `train(batch)` run one step on fixed inputs."""

    name: str
    framework: str
    infer: object
    train: object
    forward_flops: float = 0.0  # per image, as executed; 0: the architecture's full count
    chosen: dict = dataclasses.field(default_factory=dict)  # auto mode: {(kind, batch): mode}


def keras_vit_candidates(arch, modes=("graph", "xla"), dtype_policy=None):
    import keras

    import keras_vit

    if dtype_policy:
        keras.mixed_precision.set_dtype_policy(dtype_policy)
    try:
        variant = keras_vit.Variant("bench", arch.width, arch.depth, arch.mlp_dim, arch.heads,
                                    arch.patch_size)
        model = keras_vit.ViT(variant, image_size=arch.image_size, classes=arch.classes)
    finally:
        if dtype_policy:
            keras.mixed_precision.set_dtype_policy("float32")
    suffix = f", {dtype_policy}" if dtype_policy else ""
    # The class-token model's last block computes the class token alone.
    executed = flops.vit_forward_flops(arch.width, arch.depth, arch.mlp_dim, arch.patch_size,
                                       arch.image_size, arch.classes, class_token_last_block=True)
    return [dataclasses.replace(_keras_candidate(f"keras_vit ({mode}{suffix})", model, arch, mode),
                                forward_flops=executed) for mode in modes]


def keras_hub_candidates(arch, modes=("graph", "xla")):
    import keras
    from keras_hub.models import ViTBackbone

    backbone = ViTBackbone(image_shape=(arch.image_size, arch.image_size, 3),
                           patch_size=arch.patch_size, num_layers=arch.depth,
                           num_heads=arch.heads, hidden_dim=arch.width, mlp_dim=arch.mlp_dim,
                           layer_norm_epsilon=1e-6)
    images = keras.Input((arch.image_size, arch.image_size, 3))
    tokens = backbone(images)
    logits = keras.layers.Dense(arch.classes)(tokens[:, 0])
    model = keras.Model(images, logits)
    return [_keras_candidate(f"keras-hub ViTBackbone ({mode})", model, arch, mode)
            for mode in modes]


def _keras_candidate(name, model, arch, mode):
    """`mode`: "graph", "xla", or "auto": what keras_vit.runtime.execution chooses for each call and
    batch shape on this machine (timed at the first call, the runner's warm-up)."""
    import keras

    if keras.backend.backend() == "jax":
        return _jax_candidate(name.replace(f"({mode}", "(jax"), model, arch)
    import tensorflow as tf

    optimizer = keras.optimizers.SGD(learning_rate=1e-3)
    optimizer.build(model.trainable_variables)

    def forward(jit):
        return tf.function(lambda images: model(images, training=False), jit_compile=jit,
                           autograph=False)

    def train_step(jit):
        @tf.function(jit_compile=jit)
        def step(images, labels):
            with tf.GradientTape() as tape:
                logits = model(images, training=True)
                loss = tf.reduce_mean(keras.losses.sparse_categorical_crossentropy(
                    labels, tf.cast(logits, "float32"), from_logits=True))
            gradients = tape.gradient(loss, model.trainable_variables)
            optimizer.apply(gradients, model.trainable_variables)
            return loss
        return step

    inputs, functions, chosen = {}, {}, {}

    def batch_inputs(batch):
        if batch not in inputs:
            images, labels = _random_batch(arch, batch)
            inputs[batch] = (tf.constant(images), tf.constant(labels))
        return inputs[batch]

    def function(kind, batch):
        if (kind, batch) not in functions:
            jit = mode == "xla"
            if mode == "auto":
                from keras_vit.runtime.execution import choose_jit_compile

                jit = bool(choose_jit_compile(model, batch_inputs(batch)[0].shape, "auto",
                                              training=kind == "train"))
                chosen[(kind, batch)] = "xla" if jit else "graph"
            functions[(kind, batch)] = (forward if kind == "infer" else train_step)(jit)
        return functions[(kind, batch)]

    return Candidate(name, "tensorflow",
                     infer=lambda batch: function("infer", batch)(batch_inputs(batch)[0]).numpy(),
                     train=lambda batch: function("train", batch)(*batch_inputs(batch)).numpy(),
                     chosen=chosen)


def _jax_candidate(name, model, arch):
    """A Keras model on the JAX backend: `jax.jit` of its stateless call, and a plain SGD step."""
    import jax
    import keras

    state = {"trainable": [v.value for v in model.trainable_variables],
             "non_trainable": [v.value for v in model.non_trainable_variables]}

    @jax.jit
    def forward(trainable, non_trainable, images):
        return model.stateless_call(trainable, non_trainable, images, training=False)[0]

    def loss_fn(trainable, non_trainable, images, labels):
        logits, non_trainable = model.stateless_call(trainable, non_trainable, images, training=True)
        loss = keras.ops.mean(keras.losses.sparse_categorical_crossentropy(
            labels, keras.ops.cast(logits, "float32"), from_logits=True))
        return loss, non_trainable

    @jax.jit
    def train_step(trainable, non_trainable, images, labels):
        (loss, non_trainable), grads = jax.value_and_grad(loss_fn, has_aux=True)(
            trainable, non_trainable, images, labels)
        trainable = [v - 1e-3 * g.astype(v.dtype) for v, g in zip(trainable, grads)]  # SGD
        return loss, trainable, non_trainable

    inputs = {}

    def batch_inputs(batch):
        if batch not in inputs:
            inputs[batch] = tuple(jax.numpy.asarray(a) for a in _random_batch(arch, batch))
        return inputs[batch]

    def infer(batch):
        return forward(state["trainable"], state["non_trainable"], batch_inputs(batch)[0]).block_until_ready()

    def train(batch):
        loss, state["trainable"], state["non_trainable"] = train_step(
            state["trainable"], state["non_trainable"], *batch_inputs(batch))
        return loss.block_until_ready()

    return Candidate(name, "jax", infer, train)


def runtime_candidates(arch, runtimes, folder):
    """keras_vit's model exported (keras_vit/export/runtimes.py, the preprocessing inside) and
    run for inference only: ONNX Runtime in float32 and int8 (static, calibrated on 8 random
    batches: the weights are random, so only the speed means something), OpenVINO's CPU plugin
    in float32 and bfloat16 (its INFERENCE_PRECISION_HINT) and NNCF's int8 (calibrated so too).
    Returns (candidates, isa notes)."""
    import os

    import keras_vit
    from keras_vit.export import runtimes as export

    variant = keras_vit.Variant("bench", arch.width, arch.depth, arch.mlp_dim, arch.heads,
                                arch.patch_size)
    model = keras_vit.ViT(variant, image_size=arch.image_size, classes=arch.classes)
    pixels = {}

    def batch_pixels(batch):
        if batch not in pixels:
            pixels[batch] = ((_random_batch(arch, batch)[0] + 1) * 127.5).astype(np.float32)
        return pixels[batch]

    out, notes = [], []
    if "onnxruntime" in runtimes:
        import onnxruntime

        float_path = export.export_onnx(model, os.path.join(folder, "model.onnx"))
        int8_path = export.export_onnx(model, os.path.join(folder, "int8.onnx"), quantize="int8",
                                       calibration=batch_pixels(8))
        for label, path in (("float32", float_path), ("int8", int8_path)):
            session = onnxruntime.InferenceSession(path, providers=["CPUExecutionProvider"])
            out.append(Candidate(
                f"onnxruntime ({label})", "onnxruntime", train=None,
                infer=lambda batch, s=session: s.run(["logits"], {"images": batch_pixels(batch)})))
        notes.append(f"onnxruntime {onnxruntime.__version__}: CPUExecutionProvider (MLAS picks "
                     "its kernels by CPUID; the API does not report which)")
    if "openvino" in runtimes:
        import openvino as ov

        path = export.export_openvino(model, os.path.join(folder, "model.xml"))
        int8_path = export.export_openvino(model, os.path.join(folder, "int8.xml"),
                                           quantize="int8", calibration=batch_pixels(8))
        core = ov.Core()
        for label, hint, file in (("float32", "f32", path), ("bf16", "bf16", path),
                                  ("int8", "f32", int8_path)):
            compiled = core.compile_model(file, "CPU", {"INFERENCE_PRECISION_HINT": hint})
            out.append(Candidate(f"openvino ({label})", "openvino", train=None,
                                 infer=lambda batch, c=compiled: c(batch_pixels(batch))))
            compiled(batch_pixels(1))  # the kernels are chosen at the first call
            kernels = sorted({info["primitiveType"].astype(str)
                              for info in (op.get_rt_info()
                                           for op in compiled.get_runtime_model().get_ops())
                              if info["layerType"].astype(str) in ("FullyConnected", "MatMul",
                                                                    "Convolution")})
            notes.append(f"openvino {ov.__version__} {label}: capabilities "
                         f"{core.get_property('CPU', 'OPTIMIZATION_CAPABILITIES')}, matrix "
                         f"kernels {kernels}")
    return out, notes


def timm_candidates(arch, compiled=False, bf16=False):
    """timm's VisionTransformer eager, with `compiled` also under `torch.compile`, and with
    `bf16` also (eager) under `torch.autocast("cpu", torch.bfloat16)`, timm's own mixed
    precision, beside keras_vit's mixed_bfloat16."""
    out = [_timm_candidate(arch, False)]
    if compiled:
        out.append(_timm_candidate(arch, True))
    if bf16:
        out.append(_timm_candidate(arch, False, autocast=True))
    return out


def _timm_candidate(arch, compiled, autocast=False):
    import torch

    VisionTransformer = import_timm().models.vision_transformer.VisionTransformer
    module = VisionTransformer(img_size=arch.image_size, patch_size=arch.patch_size,
                               embed_dim=arch.width, depth=arch.depth, num_heads=arch.heads,
                               mlp_ratio=arch.mlp_dim / arch.width, num_classes=arch.classes)
    optimizer = torch.optim.SGD(module.parameters(), lr=1e-3)
    # torch.compile (inductor) needs a C++ compiler on a CPU; a failure shows at the first
    # call, which the runner reports as this candidate being unavailable.
    model = torch.compile(module) if compiled else module
    inputs = {}

    def batch_inputs(batch):
        if batch not in inputs:
            images, labels = _random_batch(arch, batch)
            inputs[batch] = (torch.from_numpy(images).permute(0, 3, 1, 2).contiguous(),
                             torch.from_numpy(labels).long())
        return inputs[batch]

    def precision():
        return torch.autocast("cpu", torch.bfloat16, enabled=autocast)

    def infer(batch):
        module.eval()
        images = batch_inputs(batch)[0]  # made outside inference mode: training reuses it
        with torch.inference_mode(), precision():
            return model(images).float().numpy()

    def train(batch):
        module.train()
        images, labels = batch_inputs(batch)
        optimizer.zero_grad(set_to_none=True)
        with precision():
            loss = torch.nn.functional.cross_entropy(model(images).float(), labels)
        loss.backward()
        optimizer.step()
        return loss.item()

    name = "timm VisionTransformer" + (" (torch.compile)" if compiled else "") \
        + (" (autocast bfloat16)" if autocast else "")
    return Candidate(name, "torch", infer, train)


def import_timm():
    """Imports timm next to a CPU torch.

    The registry's torchvision wheels are CUDA builds whose C ops fail to
    register against CPU torch, and timm imports torchvision eagerly; an empty
    `torchvision._meta_registrations` lets the import through (timm's ViT uses
    no torchvision op).
    """
    try:
        import timm
        return timm
    except (ImportError, RuntimeError):
        pass
    for name in [n for n in sys.modules if n == "torchvision" or n.startswith(("torchvision.", "timm"))]:
        del sys.modules[name]
    sys.modules["torchvision._meta_registrations"] = types.ModuleType("torchvision._meta_registrations")
    import timm
    return timm


def _random_batch(arch, batch):
    rng = np.random.default_rng(batch)
    images = rng.uniform(-1, 1, (batch, arch.image_size, arch.image_size, 3)).astype(np.float32)
    labels = rng.integers(0, arch.classes, batch).astype(np.int32)
    return images, labels
