"""keras.distribution for training on the JAX backend: data parallel, model parallel, multi-host.

On JAX, `train` distributes with Keras' own engine instead of tf.distribute:

- "data-parallel": `keras.distribution.DataParallel` over every device (of every host);
  each step's batch is split across them, the weights are replicated.
- "model-parallel": `keras.distribution.ModelParallel` on a ("batch", "model") mesh,
  with the `LayoutMap` of `layout_map`: the encoder blocks' attention and MLP kernels
  are split over the "model" axis (Megatron style, written from the layers' own names),
  everything else is replicated. The model axis spans one host's devices, the batch
  axis the hosts.
- "auto": data-parallel when there are several devices, else one device.

Several hosts: start every process with the Keras variables (read by
`keras.distribution.initialize`, which calls `jax.distributed.initialize`)

    KERAS_DISTRIBUTION_JOB_ADDRESSES=10.0.0.1:1234   # the coordinator (process 0)
    KERAS_DISTRIBUTION_NUM_PROCESSES=2
    KERAS_DISTRIBUTION_PROCESS_ID=0                   # 0 .. N-1, one per process

or, on a Cloud TPU VM slice, with nothing: JAX finds its peers itself there
(`keras-vit train --strategy data-parallel` on every host of the slice).

Under a keras.distribution the gradient of a step is the gradient of the global
batch (JAX's compiler inserts the all-reduce), so Keras' own global-norm clipping
already clips the global gradient; the replica-context work-around of
`distribute.py` is a no-op here (no tf.distribute replica context exists).
"""

import os

import keras

from keras_vit.errors import ArgumentError
from keras_vit.layers.transformer import MLP_HIDDEN_NAME, MLP_OUTPUT_NAME

__all__ = ["DISTRIBUTIONS", "initialize_multi_host", "get_distribution", "layout_map",
           "num_replicas", "process_index"]

DISTRIBUTIONS = ("data-parallel", "model-parallel")

# Weight paths (variable.path) -> axes, for one encoder block; "model" splits that dimension.
# Column-split first matmul, row-split second: each pair needs one all-reduce, as in Megatron.
# The fused (D, 3D) qkv kernel is split by columns: correct for any split, and with the
# model axis dividing the heads each device computes whole heads of q, k and v after one
# re-shard that the compiler inserts.
# The attention's variable names (qkv_kernel, ...) are unique in a keras_vit model; the
# MLP's dense layers are found by the names the layer module gives them.
_BLOCK_LAYOUT = {
    r".*/qkv_kernel": (None, "model"),
    r".*/qkv_bias": ("model",),
    r".*/out_kernel": ("model", None),
    rf".*/{MLP_HIDDEN_NAME}/kernel": (None, "model"),
    rf".*/{MLP_HIDDEN_NAME}/bias": ("model",),
    rf".*/{MLP_OUTPUT_NAME}/kernel": ("model", None),
}

_MULTI_HOST_VARIABLES = ("KERAS_DISTRIBUTION_JOB_ADDRESSES", "KERAS_DISTRIBUTION_NUM_PROCESSES")


def _check_backend(name):
    if keras.backend.backend() != "jax":
        raise ArgumentError(f'strategy "{name}" is keras.distribution on the JAX backend; this is '
                            f'the {keras.backend.backend()} backend (set KERAS_BACKEND=jax before '
                            'importing keras), or use "auto", "mirrored", "multiworker" or "tpu".')


def initialize_multi_host():
    """Joins the other hosts (jax.distributed) when the launch says there are several.

    Does nothing for a single process. Must run before JAX first touches a device.
    """
    import jax

    if any(os.environ.get(name) for name in _MULTI_HOST_VARIABLES):
        if not jax.distributed.is_initialized():
            keras.distribution.initialize()


def process_index():
    """This process's index among the hosts (0: the one that writes the run's outputs)."""
    import jax

    return jax.process_index()


def get_distribution(name="auto", variant=None):
    """A `keras.distribution.Distribution` for `name`, or None for one device.

    `variant` (a `Variant`) is needed for "model-parallel", to check that the model
    axis divides the heads and the MLP width.
    """
    _check_backend(name)
    initialize_multi_host()
    devices = keras.distribution.list_devices()
    if name == "auto":
        name = "data-parallel" if len(devices) > 1 else "none"
    if name == "none":
        return None
    if name == "data-parallel":
        return keras.distribution.DataParallel(devices=devices)
    if name != "model-parallel":
        raise ArgumentError(f"distribution must be one of {('auto', 'none', *DISTRIBUTIONS)}, "
                            f"got {name!r}.")
    import jax

    model_axis = jax.local_device_count()
    if variant is not None and (variant.heads % model_axis or variant.mlp_dim % model_axis):
        raise ArgumentError(f'strategy "model-parallel" splits {variant.name} over {model_axis} '
                            f'devices, which must divide its {variant.heads} heads and MLP width '
                            f'{variant.mlp_dim}; use "data-parallel".')
    mesh = keras.distribution.DeviceMesh((len(devices) // model_axis, model_axis),
                                         ("batch", "model"), devices)
    return keras.distribution.ModelParallel(layout_map=layout_map(mesh), batch_dim_name="batch")


def layout_map(device_mesh):
    """The `LayoutMap` that splits every encoder block's matmuls over the mesh's "model" axis."""
    layouts = keras.distribution.LayoutMap(device_mesh)
    for pattern, axes in _BLOCK_LAYOUT.items():
        layouts[pattern] = axes
    return layouts


def num_replicas(distribution):
    """How many ways each batch is split (the data-parallel degree)."""
    if distribution is None:
        return 1
    mesh = distribution.device_mesh
    return mesh.shape[mesh.axis_names.index(distribution.batch_dim_name)]
