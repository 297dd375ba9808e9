"""Data: dataset sources, their presets, and the tf.data pipelines that feed training.

Each name loads its module on first use (keras_vit/_lazy.py): the presets are data
that `keras-vit train --help` quotes without starting TensorFlow.
"""

from keras_vit import _lazy

__getattr__, __dir__, __all__ = _lazy.attach(__name__, {
    **dict.fromkeys(["DatasetSplits", "DatasetUnavailableError", "load_dataset", "load_digits",
                     "load_image_folder", "load_tfds"], "keras_vit.data.datasets"),
    **dict.fromkeys(["split_fingerprint", "HELD_OUT_FRACTION", "SPLIT_SEED",
                     "VALIDATION_FRACTION"], "keras_vit.data.splitting"),
    **dict.fromkeys(["make_pipeline", "inception_crop"], "keras_vit.data.pipeline"),
    **dict.fromkeys(["Preset", "PRESETS", "DEFAULT_PRESET", "DEMO_VARIANT", "get_preset"],
                    "keras_vit.data.presets"),
    "IMAGE_EXTENSIONS": "keras_vit.preprocessing",
}, submodules=("datasets", "pipeline", "presets", "splitting"))
