"""The recipes' optimizers: Keras' SGD and AdamW, clipping the global gradient and
evaluating the learning-rate schedule once per update.

Under a tf.distribute strategy Keras clips each replica's gradient before the
sum (its `BaseOptimizer._clip_gradients`, which these override); these clip the
gradient summed over replicas, so a clipped step under a strategy equals the
one-device step. They are registered Keras objects (package "keras_vit"), which
a train-made `.keras` file names: `import keras_vit` imports this module, and
it imports Keras alone (TensorFlow only when a TensorFlow step clips).
"""

import keras

from keras_vit._support.private_keras import check_private_keras
from keras_vit.training.regularization import LayerDecay

__all__ = ["SGD", "AdamW"]


class _ClipAfterAllReduce:
    def _clip_gradients(self, grads):
        if keras.backend.backend() != "tensorflow":
            # keras.distribution (JAX) differentiates the global batch: the gradient is
            # already the all-reduced one, and Keras' clipping of it is the right one.
            return super()._clip_gradients(grads)
        import tensorflow as tf

        context = tf.distribute.get_replica_context()
        replicas = context.num_replicas_in_sync if context is not None else 1
        if not self.global_clipnorm or replicas == 1:
            return super()._clip_gradients(grads)
        total = context.all_reduce("SUM", grads)  # what the update will apply, unclipped
        clipped = super()._clip_gradients(total)
        # The update step all-reduces (sums) the replicas' gradients again: send 1/replicas.
        return [g / replicas for g in clipped]


class _OneRatePerUpdate:
    """Evaluates the learning-rate schedule once per update instead of once per variable.

    Keras' TensorFlow weight decay reads `self.learning_rate` for every variable, and each
    read evaluates the schedule (warmup and cosine: a few dozen graph ops) again, so the
    traced train step held the schedule once per variable: about a fifth of the time Keras
    3.15 spends tracing the demo model's step. The step counter does not change inside one
    `apply` (Keras adds 1 at its end), so one evaluation serves the whole update."""

    def apply(self, grads, trainable_variables=None):
        self._rate_of_this_update = _Once()
        try:
            return super().apply(grads, trainable_variables)
        finally:
            self._rate_of_this_update = None

    def _get_current_learning_rate(self):
        once = getattr(self, "_rate_of_this_update", None)
        if once is None:  # outside an update: Keras' own reading
            return super()._get_current_learning_rate()
        if once.rate is None:
            once.rate = super()._get_current_learning_rate()
        return once.rate


class _Once:
    """A plain holder (Keras' tracking wraps lists and dicts set on an optimizer)."""

    __slots__ = ("rate",)

    def __init__(self):
        self.rate = None


def _check_private(name, optimizer_class):
    check_private_keras(name, optimizer_class, "_clip_gradients", "_get_current_learning_rate")


@keras.saving.register_keras_serializable(package="keras_vit")
class SGD(_OneRatePerUpdate, _ClipAfterAllReduce, LayerDecay, keras.optimizers.SGD):
    """`keras.optimizers.SGD`, with `global_clipnorm` applied to the global gradient, and
    `layer_decay` (keras_vit/training/regularization.py)."""

    def __init__(self, *args, **kwargs):
        _check_private("keras_vit's SGD", keras.optimizers.SGD)
        super().__init__(*args, **kwargs)


@keras.saving.register_keras_serializable(package="keras_vit")
class AdamW(_OneRatePerUpdate, _ClipAfterAllReduce, LayerDecay, keras.optimizers.AdamW):
    """`keras.optimizers.AdamW`, with `global_clipnorm` applied to the global gradient, and
    `layer_decay` (keras_vit/training/regularization.py)."""

    def __init__(self, *args, **kwargs):
        _check_private("keras_vit's AdamW", keras.optimizers.AdamW)
        super().__init__(*args, **kwargs)
