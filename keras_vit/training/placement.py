"""Where a run's variables and batches go: one interface over tf.distribute and keras.distribution.

`get_placement(name, variant)` wraps the strategy `distribute.get_strategy` chooses:

- `TFStrategyPlacement`: a `tf.distribute.Strategy` (TensorFlow; also the default
  one-device strategy on every backend). A model built in its scope keeps it, so
  fit and predict need no further context.
- `JaxDistributionPlacement`: a `keras.distribution` (JAX, `jax_distribution.py`),
  which must be the current distribution while `fit` lays out each batch and the
  optimizer's state.

Both answer the same questions, so the run never asks which one it holds:

    placement = get_placement("auto", variant)
    with placement.scope():
        model = ...                       # built and compiled here
    with placement.run_scope():
        model.fit(...)
    placement.num_replicas, placement.is_chief, placement.worker_output("runs/x")
"""

import abc
import contextlib
import os

import keras
import tensorflow as tf

from keras_vit.errors import ArgumentTypeError
from keras_vit.training import jax_distribution
from keras_vit.training.distribute import get_strategy

__all__ = ["Placement", "TFStrategyPlacement", "JaxDistributionPlacement", "get_placement",
           "as_placement"]


# tf.distribute's and keras.distribution's class names, as --strategy spells them.
STRATEGY_NAMES = {"_DefaultDistributionStrategy": "one device", "OneDeviceStrategy": "one device",
                  "MirroredStrategy": "mirrored", "MultiWorkerMirroredStrategy": "multiworker",
                  "CollectiveAllReduceStrategy": "multiworker", "TPUStrategy": "tpu",
                  "DataParallel": "data-parallel", "ModelParallel": "model-parallel"}


class Placement(abc.ABC):
    """A strategy (`.strategy`) and what a run needs to know of it."""

    def __init__(self, strategy):
        self.strategy = strategy

    def scope(self):
        """The context to build and compile the model in."""
        return self.strategy.scope()

    @abc.abstractmethod
    def run_scope(self):
        """The context `fit` and `predict` need on top of a model built in `scope()`."""

    @property
    @abc.abstractmethod
    def num_replicas(self):
        """How many ways each batch is split."""

    @property
    @abc.abstractmethod
    def is_chief(self):
        """Whether this process writes the run's outputs (all but the non-chief workers)."""

    @property
    @abc.abstractmethod
    def task(self):
        """This process's name among the workers, e.g. "worker-1"."""

    @property
    def name(self):
        """The strategy as report.json and the docs name it: "one device", "mirrored", ..."""
        kind = type(self.strategy).__name__
        return STRATEGY_NAMES.get(kind, kind)

    def worker_output(self, output):
        """Non-chief workers write to `output`/<task> so that files never collide."""
        return output if self.is_chief else os.path.join(output, self.task)

    def __repr__(self):
        return f"{type(self).__name__}({type(self.strategy).__name__})"


class TFStrategyPlacement(Placement):
    """A `tf.distribute.Strategy`: one device, mirrored, multi-worker or TPU."""

    def run_scope(self):
        return contextlib.nullcontext()  # the model remembers its strategy

    @property
    def num_replicas(self):
        return self.strategy.num_replicas_in_sync

    @property
    def is_chief(self):
        if not isinstance(self.strategy, tf.distribute.MultiWorkerMirroredStrategy):
            return True  # one process
        return _is_chief(self.strategy.cluster_resolver)

    @property
    def task(self):
        resolver = getattr(self.strategy, "cluster_resolver", None)
        if resolver is None or resolver.task_type is None:
            return "worker-0"
        return f"{resolver.task_type}-{resolver.task_id or 0}"


def _is_chief(resolver):
    """Whether the task `resolver` (read from TF_CONFIG) describes is the cluster's chief."""
    if resolver.task_type == "chief":
        return True
    # Without a "chief" job, worker 0 is the chief (TensorFlow's own convention).
    return "chief" not in resolver.cluster_spec().as_dict() and not resolver.task_id


class JaxDistributionPlacement(Placement):
    """A `keras.distribution.DataParallel` or `ModelParallel` (the JAX backend)."""

    def run_scope(self):
        return self.strategy.scope()  # the current distribution while fit lays out batches

    @property
    def num_replicas(self):
        return jax_distribution.num_replicas(self.strategy)

    @property
    def is_chief(self):
        return jax_distribution.process_index() == 0

    @property
    def task(self):
        return f"worker-{jax_distribution.process_index()}"


def as_placement(strategy):
    """The placement of `strategy`: a tf.distribute strategy, or a keras.distribution."""
    if isinstance(strategy, Placement):
        return strategy
    # keras.distribution's base class is not public: these are the two it offers for training.
    if isinstance(strategy, (keras.distribution.DataParallel, keras.distribution.ModelParallel)):
        return JaxDistributionPlacement(strategy)
    if isinstance(strategy, tf.distribute.Strategy):
        return TFStrategyPlacement(strategy)
    raise ArgumentTypeError(f"expected a tf.distribute.Strategy or a keras.distribution.DataParallel or "
                    f"ModelParallel, got {type(strategy).__name__}.")


def get_placement(name="auto", variant=None):
    """The placement for strategy `name` (see `distribute.get_strategy`; `variant` checks the
    model split of "model-parallel")."""
    return as_placement(get_strategy(name, variant))
