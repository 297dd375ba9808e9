"""Training recipes: the paper's fine-tuning recipe and a from-scratch one.

A `Recipe` holds every hyper-parameter of a run; `make_optimizer` turns one
into its optimizer, learning-rate schedule, clipping and gradient accumulation.
"""

import dataclasses

from keras_vit.errors import ArgumentError

# Keras and the optimizers are imported by the functions that build them: the recipes
# themselves are data that `keras-vit train --help` quotes without starting TensorFlow.

__all__ = ["Recipe", "RECIPES", "get_recipe", "accumulation_steps", "learning_rate_schedule",
           "make_optimizer"]


@dataclasses.dataclass(frozen=True)
class Recipe:
    """Every hyper-parameter of a training run. Steps count optimizer updates."""

    name: str
    optimizer: str  # "sgd" (momentum) or "adamw"
    learning_rate: float  # peak, reached at the end of the linear warmup
    warmup_steps: int  # optimizer updates; capped at a fifth of the run
    steps: int | None  # optimizer updates in the run (None: use `epochs`)
    epochs: int | None
    batch_size: int  # examples per forward pass, over all replicas
    global_batch_size: int | None  # reached by gradient accumulation (None: batch_size)
    image_size: int | None  # None: the checkpoint's resolution, else 224
    momentum: float = 0.9
    beta_1: float = 0.9
    beta_2: float = 0.999
    weight_decay: float = 0.0
    clipnorm: float | None = 1.0  # global-norm gradient clipping
    label_smoothing: float = 0.0
    dropout: float = 0.0
    crop_area: tuple | None = (0.05, 1.0)  # inception crop area range; None: no crop
    flip: bool = True
    # AugReg's regularisation and augmentation (keras_vit/data/augreg.py): stochastic depth
    # of the last block (ViT's blocks rise linearly from 0 to it), the setting's name, and
    # what it resolves to (or what --randaugment, --mixup, --cutmix gave instead).
    drop_path_rate: float = 0.0
    augment: str = "none"
    randaugment: tuple | None = None  # (layers, magnitude)
    mixup: float = 0.0  # MixUp alpha; 0: off
    cutmix: float = 0.0  # CutMix alpha; 0: off
    # Layer-wise learning-rate decay (keras_vit/training/regularization.py; None: off), and the
    # momentum of the weights' moving average (Keras' use_ema; None: off), which model.keras holds.
    layer_decay: float | None = None
    ema: float | None = None


RECIPES = {
    # The official transfer recipe (vit_jax / big_vision): SGD momentum 0.9, no weight
    # decay, global-norm clip 1, warmup + cosine, batch 512, 384 px, 500 steps, warmup 100.
    "finetune": Recipe("finetune", "sgd", learning_rate=0.01, warmup_steps=100, steps=500,
                       epochs=None, batch_size=32, global_batch_size=512, image_size=384),
    # Training from scratch: AdamW with decoupled weight decay 0.1, warmup, dropout and
    # label smoothing (the paper's pre-training uses Adam 0.9/0.999 and wd 0.1).
    "scratch": Recipe("scratch", "adamw", learning_rate=1e-3, warmup_steps=500, steps=None,
                      epochs=100, batch_size=64, global_batch_size=None, image_size=224,
                      weight_decay=0.1, label_smoothing=0.1, dropout=0.1),
}

def get_recipe(name, **overrides):
    """A copy of `RECIPES[name]` with `overrides` (fields of `Recipe`) applied."""
    if name not in RECIPES:
        from keras_vit._support.names import did_you_mean

        raise ArgumentError(f"Unknown recipe {name!r};{did_you_mean(name, RECIPES)} choose one of "
                            f"{sorted(RECIPES)}.")
    unknown = set(overrides) - {f.name for f in dataclasses.fields(Recipe)}
    if unknown:
        raise ArgumentError(f"Unknown recipe fields: {sorted(unknown)}.")
    return dataclasses.replace(RECIPES[name], **overrides)


def accumulation_steps(global_batch_size, batch_size):
    """How many forward passes of `batch_size` make one update of `global_batch_size`."""
    if not global_batch_size or global_batch_size <= batch_size:
        return 1
    if global_batch_size % batch_size:
        raise ArgumentError(f"The global batch {global_batch_size} is not a multiple of the batch "
                            f"size {batch_size}; pick a batch size that divides it (e.g. 32, 64).")
    return global_batch_size // batch_size


def learning_rate_schedule(peak, total_steps, warmup_steps):
    """Linear warmup from 0 to `peak` over `warmup_steps`, then cosine decay to 0 at `total_steps`.

    Steps are the optimizer's iterations (forward passes when accumulating).
    """
    import keras

    if total_steps <= warmup_steps:
        raise ArgumentError(f"total_steps ({total_steps}) must exceed warmup_steps ({warmup_steps}).")
    if not warmup_steps:
        return keras.optimizers.schedules.CosineDecay(peak, decay_steps=total_steps, alpha=0.0)
    return keras.optimizers.schedules.CosineDecay(
        initial_learning_rate=0.0, decay_steps=total_steps - warmup_steps, alpha=0.0,
        warmup_target=peak, warmup_steps=warmup_steps)


def make_optimizer(recipe, total_updates, accumulation=1):
    """The recipe's optimizer, with its schedule, clipping and gradient accumulation.

    `total_updates` counts weight updates; with `accumulation > 1` Keras' schedules
    see every forward pass, so the schedule is stretched by that factor.
    """
    from keras_vit.training.optimizers import SGD, AdamW

    warmup = min(recipe.warmup_steps, total_updates // 5)
    schedule = learning_rate_schedule(recipe.learning_rate, total_updates * accumulation,
                                      warmup * accumulation)
    common = {"learning_rate": schedule, "global_clipnorm": recipe.clipnorm,
              "gradient_accumulation_steps": accumulation if accumulation > 1 else None,
              "layer_decay": recipe.layer_decay}
    if recipe.ema is not None:
        # Keras keeps the average beside the weights and, at the end of fit
        # (finalize_variable_values), writes it into them: model.keras holds the average.
        common.update(use_ema=True, ema_momentum=recipe.ema)
    if recipe.optimizer == "sgd":
        if recipe.weight_decay:
            common["weight_decay"] = recipe.weight_decay
        return SGD(momentum=recipe.momentum, **common)
    if recipe.optimizer == "adamw":
        return AdamW(weight_decay=recipe.weight_decay, beta_1=recipe.beta_1,
                     beta_2=recipe.beta_2, **common)
    raise ArgumentError(f'Recipe optimizer must be "sgd" or "adamw", got {recipe.optimizer!r}.')
