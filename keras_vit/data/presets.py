"""Dataset presets: what `train` uses for a dataset unless told otherwise.

A preset names the default model, the recipe used without pretrained weights,
the weights the fine-tuning recipe starts from, and per-recipe overrides.
Datasets without a preset get `DEFAULT_PRESET` (ViT-B/16 fine-tuned from
ImageNet-21k). Add a dataset here to give it its own defaults.
"""

import dataclasses

from keras_vit.variants import DEMO_VARIANT  # its home; kept here, where 0.1 had it

__all__ = ["Preset", "PRESETS", "DEFAULT_PRESET", "DEMO_VARIANT", "get_preset"]


@dataclasses.dataclass(frozen=True)
class Preset:
    """The defaults of `train(dataset=...)` for one dataset."""

    model: object = "B/16"  # a variant name or a `Variant`
    recipe: str = "finetune"  # the recipe when no weights are given
    finetune_weights: str | None = "imagenet21k"  # what the finetune recipe starts from
    # Recipe name -> fields of `keras_vit.training.Recipe` replaced for this dataset.
    recipe_overrides: dict = dataclasses.field(default_factory=dict)

    def overrides(self, recipe_name):
        return dict(self.recipe_overrides.get(recipe_name, {}))


DEFAULT_PRESET = Preset()

PRESETS = {
    # The tiny "demo" ViT (keras_vit/variants/table.py) on 16 px images (the 8x8 digits upsampled)
    # reaches >= 0.97 held-out accuracy from scratch in a few CPU minutes.
    "digits": Preset(
        model="demo", recipe="scratch", finetune_weights=None,
        recipe_overrides={"scratch": dict(
            learning_rate=3e-3, warmup_steps=44, epochs=80, batch_size=64, image_size=16,
            weight_decay=0.05, crop_area=(0.8, 1.0), flip=False)}),
}


def get_preset(dataset):
    """The preset of `dataset` (a name), or `DEFAULT_PRESET`."""
    return PRESETS.get(dataset, DEFAULT_PRESET) if isinstance(dataset, str) else DEFAULT_PRESET
