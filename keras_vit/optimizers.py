"""SGD and AdamW whose global-norm clipping sees the whole global batch's gradient.

Under a tf.distribute strategy, Keras clips each replica's gradient before the
replicas' gradients are summed, so with several replicas the clipped update is
not the one-device update for the same global batch. These optimizers sum the
gradients across replicas first, clip that sum, and hand each replica its
share, so the update equals the single-device one. With one replica, or no
`global_clipnorm`, they are Keras' own optimizers unchanged.
"""

import keras
import tensorflow as tf

__all__ = ["SGD", "AdamW"]


class _ClipAfterAllReduce:
    def _clip_gradients(self, grads):
        context = tf.distribute.get_replica_context()
        replicas = context.num_replicas_in_sync if context is not None else 1
        if not self.global_clipnorm or replicas == 1:
            return super()._clip_gradients(grads)
        total = context.all_reduce("SUM", grads)  # what the update will apply, unclipped
        clipped = super()._clip_gradients(total)
        # The update step all-reduces (sums) the replicas' gradients again: send 1/replicas.
        return [g / replicas for g in clipped]


@keras.saving.register_keras_serializable(package="keras_vit")
class SGD(_ClipAfterAllReduce, keras.optimizers.SGD):
    """`keras.optimizers.SGD`, with `global_clipnorm` applied to the global gradient."""


@keras.saving.register_keras_serializable(package="keras_vit")
class AdamW(_ClipAfterAllReduce, keras.optimizers.AdamW):
    """`keras.optimizers.AdamW`, with `global_clipnorm` applied to the global gradient."""
