"""The Keras layers that apply an `Augmentation` (keras_vit/data/augreg.py) in tf.data.

RandAugment (`keras.layers.RandAugment`) runs on each image inside the training
pipeline's parallel map; MixUp and CutMix (`keras.layers.MixUp`, `CutMix`) on each
batch. Every random draw comes from a stateless seed of the element's own (the
run's seed and the element's place in the stream), never from a layer's seed
state, which parallel `tf.data` calls would race for: a pipeline gives the same
batches under the same seed however its maps are scheduled.
"""

import keras
import tensorflow as tf

from keras_vit._support.private_keras import check_private_keras
from keras_vit.data.augreg import RANDAUGMENT_MAX_MAGNITUDE

__all__ = ["Augmenter"]


class Augmenter:
    """The Keras layers of one `Augmentation`, made once, outside the pipeline's maps."""

    def __init__(self, augmentation):
        self.augmentation = augmentation
        self.randaugment = None
        if augmentation.randaugment is not None:
            layers, magnitude = augmentation.randaugment
            self.randaugment = SeededRandAugment(
                value_range=(0, 255), num_ops=layers,
                factor=magnitude / RANDAUGMENT_MAX_MAGNITUDE)
        self.mixup = keras.layers.MixUp(augmentation.mixup) if augmentation.mixup else None
        self.cutmix = keras.layers.CutMix(augmentation.cutmix) if augmentation.cutmix else None

    def image(self, image, seed):
        """One image (H, W, 3) float in [0, 255], RandAugment-ed with `seed` (shape (2,))."""
        if self.randaugment is None:
            return image
        layer, images = self.randaugment, image[tf.newaxis]  # Keras' ops expect a batch
        transformation = layer.get_random_transformation(images, training=True,
                                                         seed=StatelessSeed(seed))
        return layer.transform_images(images, transformation, training=True)[0]

    def batch(self, images, labels, seed):
        """A batch and its one-hot labels, MixUp-ed or CutMix-ed with `seed` (shape (2,)).

        With both on, each batch takes one of them with even odds, as timm's
        `Mixup(switch_prob=0.5)`."""
        mixers = [layer for layer in (self.mixup, self.cutmix) if layer is not None]
        if not mixers:
            return images, labels
        choose, *seeds = tf.unstack(tf.random.experimental.stateless_split(seed, 1 + len(mixers)))
        mixed = [_mix(layer, images, labels, layer_seed)
                 for layer, layer_seed in zip(mixers, seeds)]
        if len(mixed) == 1:
            return mixed[0]
        first = tf.random.stateless_uniform((), choose) < 0.5
        return (tf.where(first, mixed[0][0], mixed[1][0]),
                tf.where(first, mixed[0][1], mixed[1][1]))


def _mix(layer, images, labels, seed):
    data = {"images": images, "labels": labels}
    transformation = layer.get_random_transformation(data, training=True, seed=StatelessSeed(seed))
    return (layer.transform_images(images, transformation, training=True),
            layer.transform_labels(labels, transformation, training=True))


class StatelessSeed(keras.random.SeedGenerator):
    """A `keras.random.SeedGenerator` without a variable: its k-th draw is a fixed function
    of one seed tensor (shape (2,)), so the Keras random ops it feeds are stateless."""

    def __init__(self, seed):  # no super().__init__(): that would make a seed variable
        self._seeds = tf.cast(seed, "int64")
        self._draws = 0

    def next(self, ordered=True):
        self._draws += 1
        return tf.random.experimental.stateless_fold_in(self._seeds, self._draws)


class SeededRandAugment(keras.layers.RandAugment):
    """`keras.layers.RandAugment` drawing from the seed its caller passes to
    `get_random_transformation`: Keras' own ignores that argument and draws from the
    layer's seed state, through the private `_get_seed_generator` overridden here."""

    def __init__(self, **kwargs):
        check_private_keras("keras_vit's seeded RandAugment", keras.layers.RandAugment,
                            "_get_seed_generator")
        super().__init__(**kwargs)
        object.__setattr__(self, "_call_seed", None)  # set per call; not layer state

    def get_random_transformation(self, data, training=True, seed=None):
        object.__setattr__(self, "_call_seed", seed)
        try:
            return super().get_random_transformation(data, training=training)
        finally:
            object.__setattr__(self, "_call_seed", None)

    def _get_seed_generator(self, backend=None):
        if self._call_seed is None:
            return super()._get_seed_generator(backend)
        return self._call_seed
