"""Training: recipes, optimizers, tf.distribute strategies and their work-arounds, the run, its report.

    recipes.py      Recipe, RECIPES, the optimizer and schedule of a recipe (Keras on first use)
    strategies.py   the strategy names (no TensorFlow: `keras-vit train --help` lists them)
    optimizers.py   SGD/AdamW clipping the global gradient (registered by `import keras_vit`)
    distribute.py   strategies; multi_worker_fit
    placement.py    Placement: one interface over a tf.distribute strategy or a keras.distribution
    jax_distribution.py  keras.distribution on the JAX backend (data and model parallel)
    settings.py     TrainSettings: a train() call's choices, resolved into the run and run.json's config
    run.py          train(): fit with resumable state, checkpoints and logs
    run_folder.py   the run's folder: its outputs, run.json compared before anything is written
    report.py       report.json, curves.png, confusion.png

Each name below loads its module on first use (keras_vit/_lazy.py), so
`import keras_vit.training.optimizers` costs Keras alone. Importing `keras_vit`
imports that module and no other of this package; `keras_vit.train` and the
other training names load the rest on first use.
"""

from keras_vit import _lazy

__getattr__, __dir__, __all__ = _lazy.attach(__name__, {
    **dict.fromkeys(["Recipe", "RECIPES", "get_recipe", "learning_rate_schedule",
                     "make_optimizer", "accumulation_steps"], "keras_vit.training.recipes"),
    **dict.fromkeys(["SGD", "AdamW"], "keras_vit.training.optimizers"),
    **dict.fromkeys(["get_strategy", "strategy_name", "multi_worker_fit"],
                    "keras_vit.training.distribute"),
    "STRATEGIES": "keras_vit.training.strategies",
    **dict.fromkeys(["Placement", "get_placement"], "keras_vit.training.placement"),
    **dict.fromkeys(["build_model", "train"], "keras_vit.training.run"),
    **dict.fromkeys(["TrainSettings", "PRECISIONS"], "keras_vit.training.settings"),
    "DEMO_VARIANT": "keras_vit.variants",  # its home; kept here, where 0.1 had it
}, submodules=("distribute", "jax_distribution", "optimizers", "placement", "recipes", "report", "resume",
               "run", "run_folder", "settings", "strategies"))
