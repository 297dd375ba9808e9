"""Choosing how a run is distributed, and the Keras work-arounds tf.distribute needs.

- `get_strategy`: on TensorFlow, one device, MirroredStrategy, MultiWorkerMirroredStrategy
  or TPUStrategy; on JAX, a `keras.distribution` (`jax_distribution.py`) or one device.
- `SGD`, `AdamW` (keras_vit/training/optimizers.py, re-exported here): clip the gradient
  summed over replicas, so a clipped step under a strategy equals the one-device step.
- `multi_worker_fit`: lets Keras' `fit` run under MultiWorkerMirroredStrategy
  (keras-team/keras#20585), by patching private Keras functions for one `fit` call.

Both work-arounds lean on private Keras code, so they check the Keras version
they were written against (`KNOWN_KERAS`) and the private names they use, and
fail with a one-line error naming both instead of misbehaving on another release.
"""

import contextlib
import functools
import os

import keras
import tensorflow as tf

from keras_vit._support.json_files import parse_json
from keras_vit._support.private_keras import KNOWN_KERAS
from keras_vit._support.private_keras import check_private_keras as _check_private_keras
from keras_vit.errors import ArgumentError, DeviceUnavailableError
from keras_vit.training.optimizers import SGD, AdamW
from keras_vit.training.strategies import JAX_STRATEGIES, STRATEGIES, TF_STRATEGIES

__all__ = ["STRATEGIES", "get_strategy", "strategy_name", "SGD", "AdamW", "multi_worker_fit",
           "KNOWN_KERAS"]

# --- choosing a strategy ---------------------------------------------------------------------

def _tf_config():
    config = parse_json(os.environ.get("TF_CONFIG") or "{}", "the TF_CONFIG variable",
                        ArgumentError)
    if not isinstance(config, dict):
        raise ArgumentError(f"the TF_CONFIG variable holds a JSON {type(config).__name__}, not "
                            "the object TensorFlow's cluster description is.")
    return config


def _multiworker_configured():
    cluster = _tf_config().get("cluster", {})
    return sum(len(cluster.get(job, [])) for job in ("chief", "worker")) > 1


def _tpu_configured():
    return bool(os.environ.get("TPU_NAME") or os.environ.get("COLAB_TPU_ADDR")
                or os.path.exists("/dev/accel0"))


def strategy_name(name="auto"):
    """What "auto" resolves to here; other names are checked and returned."""
    if name not in STRATEGIES:
        raise ArgumentError(f"strategy must be one of {STRATEGIES}, got {name!r}.")
    backend = keras.backend.backend()
    if backend != "tensorflow" and name in TF_STRATEGIES:
        raise ArgumentError(f'strategy "{name}" is tf.distribute, which needs the TensorFlow '
                            f'backend; this is {backend}: use "auto", "data-parallel" or '
                            '"model-parallel" (JAX), or set KERAS_BACKEND=tensorflow.')
    if backend == "tensorflow" and name in JAX_STRATEGIES:
        raise ArgumentError(f'strategy "{name}" is keras.distribution on the JAX backend; this '
                            'is TensorFlow: set KERAS_BACKEND=jax, or use "auto", "mirrored", '
                            '"multiworker" or "tpu".')
    if name != "auto" or backend != "tensorflow":
        return name
    if _tpu_configured():
        return "tpu"
    if _multiworker_configured():
        return "multiworker"
    if len(tf.config.list_logical_devices("GPU")) > 1:
        return "mirrored"
    return "none"


@functools.cache
def _mirrored_strategy():
    """One MirroredStrategy per process: a second one numbers its collective all-reduces from
    the start again, so a later run of another model shape in the same process (a notebook's
    second `train`) met the first run's all-reduces under the same keys and failed with a
    shape mismatch."""
    return tf.distribute.MirroredStrategy()


def get_strategy(name="auto", variant=None):
    """How to distribute: "auto", "mirrored", "multiworker", "tpu", "data-parallel",
    "model-parallel" or "none".

    On TensorFlow, a tf.distribute strategy: "auto" picks a TPU when one is
    configured (TPU_NAME, COLAB_TPU_ADDR or a TPU VM's /dev/accel0),
    MultiWorkerMirroredStrategy when TF_CONFIG lists several workers,
    MirroredStrategy with several GPUs, else the default. On JAX, a
    `keras.distribution.DataParallel` or `ModelParallel` (see
    `jax_distribution.get_distribution`; `variant` checks the model split), or
    the default tf.distribute strategy for one device. A run uses it through
    `placement.get_placement`, one interface over both kinds.
    """
    name = strategy_name(name)
    if keras.backend.backend() == "jax":
        from keras_vit.training import jax_distribution

        distribution = jax_distribution.get_distribution(name, variant)
        return distribution if distribution is not None else tf.distribute.get_strategy()
    if keras.backend.backend() != "tensorflow" and name != "none" and name != "auto":
        raise ArgumentError(f'strategy "{name}" needs the TensorFlow or JAX backend.')
    if name in ("none", "auto"):  # "auto" stays here only on backends without a strategy
        return tf.distribute.get_strategy()
    if name == "mirrored":
        return _mirrored_strategy()
    if name == "multiworker":
        if not _multiworker_configured():
            raise ArgumentError('strategy "multiworker" needs TF_CONFIG describing the cluster, '
                                'e.g. {"cluster": {"worker": ["host1:12345", "host2:12345"]}, '
                                '"task": {"type": "worker", "index": 0}}.')
        return tf.distribute.MultiWorkerMirroredStrategy()
    try:
        resolver = tf.distribute.cluster_resolver.TPUClusterResolver(
            tpu=os.environ.get("TPU_NAME", ""))
        tf.config.experimental_connect_to_cluster(resolver)
        tf.tpu.experimental.initialize_tpu_system(resolver)
    except (ValueError, RuntimeError, tf.errors.OpError) as error:
        raise DeviceUnavailableError("No TPU could be resolved. TensorFlow has no TPU build for "
                                     "this release; on TPUs run keras_vit on Keras' JAX backend "
                                     "(see docs/fine-tuning.md).") from error
    return tf.distribute.TPUStrategy(resolver)


# --- fit under MultiWorkerMirroredStrategy -----------------------------------------------------

@contextlib.contextmanager
def multi_worker_fit(model, strategy, element_spec):
    """Within this context, `model.fit` works under `strategy` (multi-worker).

    Two Keras bugs stop `fit` with several workers (keras-team/keras#20585):
    1. before the first step, `fit` builds metrics and the optimizer by reducing
       the first distributed batch, which fails;
    2. after every step, it reduces the scalar logs with `axis=0`, which fails on a
       scalar ("Invalid reduction dimension 0 for input with 0 dimensions").
    Both are fixed for the duration of the context, and only when `strategy` is a
    MultiWorkerMirroredStrategy; nothing changes otherwise.
    """
    if not isinstance(strategy, tf.distribute.MultiWorkerMirroredStrategy):
        yield
        return
    # Imported here, only for multi-worker runs: a private module that a Keras release may move.
    from keras.src.backend.tensorflow import trainer as tf_trainer

    _check_private_keras("multi_worker_fit", tf_trainer, "reduce_per_replica",
                         "_collective_all_reduce_multi_worker")
    with strategy.scope():  # 1: build from the dataset's spec, no batch needed
        model._symbolic_build(data_batch=element_spec)
    original_build = model._maybe_symbolic_build
    model._maybe_symbolic_build = lambda iterator=None, data_batch=None: None
    original_reduce = tf_trainer.reduce_per_replica

    def reduce_per_replica(values, strategy, reduction="auto"):  # 2: scalars reduce whole
        if reduction in ("auto", "mean") and tf_trainer._collective_all_reduce_multi_worker(strategy):
            return tf.nest.map_structure(
                lambda v: strategy.reduce("MEAN", v, axis=None)
                if isinstance(v, tf.distribute.DistributedValues) or tf.is_tensor(v) else v, values)
        return original_reduce(values, strategy, reduction)

    tf_trainer.reduce_per_replica = reduce_per_replica
    try:
        yield
    finally:
        tf_trainer.reduce_per_replica = original_reduce
        model._maybe_symbolic_build = original_build
