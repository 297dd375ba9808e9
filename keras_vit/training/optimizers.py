"""The recipes' optimizers: Keras' SGD and AdamW, clipping the global gradient.

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


@keras.saving.register_keras_serializable(package="keras_vit")
class SGD(_ClipAfterAllReduce, LayerDecay, keras.optimizers.SGD):
    """`keras.optimizers.SGD`, with `global_clipnorm` applied to the global gradient, and
    `layer_decay` (keras_vit/training/regularization.py)."""

    def __init__(self, *args, **kwargs):
        check_private_keras("keras_vit's SGD", keras.optimizers.SGD, "_clip_gradients")
        super().__init__(*args, **kwargs)


@keras.saving.register_keras_serializable(package="keras_vit")
class AdamW(_ClipAfterAllReduce, LayerDecay, keras.optimizers.AdamW):
    """`keras.optimizers.AdamW`, with `global_clipnorm` applied to the global gradient, and
    `layer_decay` (keras_vit/training/regularization.py)."""

    def __init__(self, *args, **kwargs):
        check_private_keras("keras_vit's AdamW", keras.optimizers.AdamW, "_clip_gradients")
        super().__init__(*args, **kwargs)
