"""Data: dataset sources, their presets, and the tf.data pipelines that feed training."""

from keras_vit.data.datasets import (
                                     HELD_OUT_FRACTION,
                                     SPLIT_SEED,
                                     DatasetSplits,
                                     DatasetUnavailableError,
                                     load_dataset,
                                     load_digits,
                                     load_image_folder,
                                     load_tfds,
)
from keras_vit.data.pipeline import inception_crop, make_pipeline
from keras_vit.data.presets import DEFAULT_PRESET, DEMO_VARIANT, PRESETS, Preset, get_preset
from keras_vit.preprocessing import IMAGE_EXTENSIONS

__all__ = ["DatasetSplits", "DatasetUnavailableError", "load_dataset", "load_digits",
           "load_image_folder", "load_tfds", "make_pipeline", "inception_crop",
           "IMAGE_EXTENSIONS", "HELD_OUT_FRACTION", "SPLIT_SEED", "Preset", "PRESETS",
           "DEFAULT_PRESET", "DEMO_VARIANT", "get_preset"]
