"""Training: recipes, tf.distribute strategies and their work-arounds, the run, its report.

    recipes.py      Recipe, RECIPES, the optimizer and schedule of a recipe
    distribute.py   strategies; SGD/AdamW clipping the global gradient; multi_worker_fit
    jax_distribution.py  keras.distribution on the JAX backend (data and model parallel)
    run.py          train(): fit with resumable state, checkpoints and logs
    report.py       report.json, curves.png, confusion.png

Importing `keras_vit` does not import this package; `keras_vit.train` and the
other training names load it on first use.
"""

from keras_vit.data.presets import DEMO_VARIANT
from keras_vit.training.distribute import (
                                           SGD,
                                           STRATEGIES,
                                           AdamW,
                                           get_strategy,
                                           multi_worker_fit,
                                           strategy_name,
)
from keras_vit.training.recipes import (
                                           PRECISIONS,
                                           RECIPES,
                                           Recipe,
                                           accumulation_steps,
                                           get_recipe,
                                           learning_rate_schedule,
                                           make_optimizer,
)
from keras_vit.training.run import build_model, train

__all__ = ["Recipe", "RECIPES", "DEMO_VARIANT", "get_recipe", "learning_rate_schedule",
           "make_optimizer", "accumulation_steps", "get_strategy", "strategy_name",
           "build_model", "train", "STRATEGIES", "PRECISIONS", "SGD", "AdamW",
           "multi_worker_fit"]
