"""`TrainSettings`: every choice of one `train` call, as one frozen record.

`keras_vit.train(dataset, **options)` builds one from its keyword arguments; `train(settings=)`
takes one made beforehand (`dataclasses.replace` changes a field). `resolve` turns it into
what the run fits (`Run`: the architecture, the recipe with every override, the policy) and
its configuration, the JSON that run.json records and a re-run compares (`run_config`).
Plain data: `keras-vit train --help` reads the defaults here without starting TensorFlow.
"""

import dataclasses
import numbers
import os

from keras_vit._support.checks import int_in, positive_int, real_in
from keras_vit.data.splitting import SPLIT_SEED, VALIDATION_FRACTION
from keras_vit.errors import ArgumentError
from keras_vit.runtime.precision import TRAINING_PRECISIONS as PRECISIONS
from keras_vit.runtime.precision import training_policy

__all__ = ["TrainSettings", "Run", "PRECISIONS", "resolve", "run_config"]

# A billion weight updates (or passes over the data) is past any run: at a millisecond a
# step it takes twelve days. Larger counts only overflow a step counter somewhere later.
MAX_STEPS = 10 ** 9
# A peak learning rate above 10 diverges for SGD and AdamW alike (the recipes' are 0.03 and
# 1e-3; LARS-style large-batch SGD stays under 10); beyond it a typo, not a choice.
MAX_LEARNING_RATE = 10.0
# keras.utils.set_random_seed hands the seed to NumPy, whose seeds are unsigned 32-bit.
MAX_SEED = 2 ** 32 - 1


@dataclasses.dataclass(frozen=True)
class TrainSettings:
    """What `keras_vit.train` takes: each field is its keyword argument (documented there)."""

    dataset: str = "digits"
    model: object = None
    weights: str | None = None
    image_size: int | None = None
    batch_size: int | None = None
    steps: int | None = None
    epochs: int | None = None
    lr: float | None = None
    recipe: object = None
    strategy: str = "auto"
    precision: str = "float32"  # keras_vit.runtime.precision's vocabulary (or Keras' policy name)
    output: str = "runs/keras_vit"
    data_dir: str | None = None
    seed: int = 0
    verbose: object = "auto"
    overwrite: bool = False
    validation_fraction: float = VALIDATION_FRACTION
    validation_seed: int = SPLIT_SEED
    execution: str | None = None
    remat: bool = False
    drop_path: float | None = None
    augment: str | None = None
    mixup: float | None = None
    cutmix: float | None = None
    randaugment: object = None
    layer_decay: float | None = None
    ema: float | None = None
    lora_rank: int | None = None
    lora_targets: tuple = ("query", "value")
    teacher: str | None = None
    teacher_weights: str | None = None
    distillation: str | None = None
    distillation_temperature: float | None = None
    distillation_alpha: float | None = None


@dataclasses.dataclass(frozen=True)
class Run:
    """One run, every choice resolved: what `train` hands the fitting code."""

    dataset: str
    variant: object  # a Variant or a BiTVariant
    weights: str | None
    recipe: object  # a Recipe
    strategy: str
    precision: str  # the Keras dtype policy
    output: str
    data_dir: str | None
    seed: int
    verbose: object
    validation_fraction: float = VALIDATION_FRACTION
    validation_seed: int = SPLIT_SEED
    execution: str = "auto"
    lora: dict | None = None  # {"rank": R, "targets": [...]}: LoRA instead of full fine-tuning
    teacher: dict | None = None  # run.json's teacher record: distillation from that model
    remat: bool = False  # each encoder block recomputed in the backward pass (not in the config)


def resolve(settings):
    """(Run, config) of `settings`: every argument checked, the preset's defaults and the
    overrides applied, nothing built or read from disk."""
    from keras_vit.data import get_preset
    from keras_vit.data.augreg import get_augmentation
    from keras_vit.memory import check_fits
    from keras_vit.runtime.execution import check_execution
    from keras_vit.training.lora import check_lora
    from keras_vit.training.recipes import get_recipe
    from keras_vit.training.transfer import source_architecture
    from keras_vit.variants import Variant, get_architecture

    s = settings
    policy = training_policy(s.precision)
    execution = check_execution(s.execution)
    fraction, seed = s.validation_fraction, s.validation_seed
    if isinstance(fraction, bool) or not isinstance(fraction, numbers.Real) or not 0 < fraction < 1:
        raise ArgumentError("validation_fraction must be a number between 0 and 1 (exclusive), "
                            f"got {fraction!r}.")
    int_in(seed, "validation_seed", 0, MAX_SEED)
    int_in(s.seed, "seed", 0, MAX_SEED)
    preset = get_preset(s.dataset)
    # An earlier run's model (weights naming a .keras file or a run folder) is its own default.
    variant = get_architecture(s.model or source_architecture(s.weights) or preset.model)
    naflex = getattr(variant, "patch_input", "image") == "naflex"
    if naflex and s.teacher is not None:
        raise ArgumentError(f"{variant.name} is a NaFlex model (it takes patches); distillation "
                            "feeds the teacher the student's images: train it without a teacher.")
    weights, recipe = s.weights, s.recipe
    if recipe is None:
        recipe = "finetune" if weights else preset.recipe
    if isinstance(recipe, str):
        recipe = get_recipe(recipe, **preset.overrides(recipe))
    if weights is None and recipe.name == "finetune":
        weights = preset.finetune_weights
    overrides = {"image_size": s.image_size, "batch_size": s.batch_size, "learning_rate": s.lr}
    overrides = {k: v for k, v in overrides.items() if v is not None}
    if s.drop_path is not None:
        overrides["drop_path_rate"] = s.drop_path
    overrides.update({k: v for k, v in (("layer_decay", s.layer_decay), ("ema", s.ema))
                      if v is not None})
    if any(value is not None for value in (s.augment, s.mixup, s.cutmix, s.randaugment)):
        augment = s.augment or "none"
        overrides.update(augment=augment, **dataclasses.asdict(
            get_augmentation(augment, s.mixup, s.cutmix, s.randaugment)))
    if s.steps is not None:
        overrides.update(steps=s.steps, epochs=None)
    elif s.epochs is not None:
        overrides.update(epochs=s.epochs, steps=None)
    recipe = dataclasses.replace(recipe, **overrides)
    if recipe.steps is None and recipe.epochs is None:
        raise ArgumentError("Give steps or epochs.")
    check_recipe_values(recipe)
    if not isinstance(s.remat, bool):
        raise ArgumentError(f"remat must be True or False, got {s.remat!r}.")
    for name, value in (("drop_path", recipe.drop_path_rate), ("layer_decay", recipe.layer_decay),
                        ("remat", s.remat)):
        if value and not isinstance(variant, Variant):
            raise ArgumentError(f"{name} works on a ViT's encoder blocks; {variant.name} is a BiT "
                                "ResNet, which has none.")
    if naflex and recipe.image_size is not None and recipe.image_size % variant.patch_size:
        # train feeds a NaFlex model square images of this size, cut into whole patches
        raise ArgumentError(f"image_size {recipe.image_size} is not whole {variant.patch_size}-"
                            f"pixel patches, which {variant.name} takes.")
    check_fits(variant, recipe.image_size, batch_size=recipe.batch_size)

    config = run_config(s.dataset, variant, weights, recipe, policy, s.seed, float(fraction),
                        int(seed))
    lora = check_lora(s.lora_rank, s.lora_targets,
                      variant.width if isinstance(variant, Variant) else None)
    if lora is not None:  # only then: runs without LoRA keep their run.json as it was
        config["lora"] = lora
    teacher = _teacher_record(s, variant)
    if teacher is not None:  # only then: runs without a teacher keep their run.json
        config["teacher"] = teacher
    run = Run(s.dataset, variant, weights, recipe, s.strategy, policy, s.output, s.data_dir,
              s.seed, s.verbose, float(fraction), int(seed), execution, lora, teacher, s.remat)
    return run, config


def _teacher_record(settings, variant):
    """run.json's record of the distillation (None without a teacher); DeiT's defaults."""
    from keras_vit.training.distillation import check_distillation, teacher_spec

    s = settings
    if s.teacher is None:
        given = [name for name in ("teacher_weights", "distillation", "distillation_temperature",
                                   "distillation_alpha") if getattr(s, name) is not None]
        if given:
            raise ArgumentError(f"{', '.join(given)} need a teacher (--teacher).")
        return None
    kind, temperature, alpha = check_distillation(s.distillation, s.distillation_temperature,
                                                  s.distillation_alpha,
                                                  getattr(variant, "distilled", False))
    return {"model": teacher_spec(s.teacher), "weights": s.teacher_weights, "distillation": kind,
            "temperature": temperature, "alpha": alpha}


def run_config(dataset, variant, weights, recipe, precision, seed,
               validation_fraction=VALIDATION_FRACTION, validation_seed=SPLIT_SEED):
    """What decides a run's result, as JSON values; where the data lives and the strategy don't.
    `precision` is the Keras policy the run computes under (as run.json has always recorded it).

    The split's fingerprints join it once the data is loaded (run_folder.check_split)."""
    if isinstance(dataset, str) and os.path.isdir(dataset):
        dataset = os.path.abspath(dataset)
    return {"dataset": dataset, "model": variant.name if _known(variant)
            else dataclasses.asdict(variant), "weights": weights,
            "recipe": dataclasses.asdict(recipe), "precision": precision, "seed": seed,
            "split": {"validation_fraction": validation_fraction,
                      "validation_seed": validation_seed}}


def _known(variant):
    """Whether `get_architecture` finds `variant` by its name (then run.json records the name)."""
    from keras_vit.variants import get_architecture

    try:
        return get_architecture(variant.name) == variant
    except ValueError:  # a Variant of the user's own, under a name of their own
        return False


def check_recipe_values(recipe):
    """Every length, size and rate positive: a zero batch divides by zero, a negative
    learning rate trains uphill, and neither should get as far as building a model."""
    for name, value in (("steps", recipe.steps), ("epochs", recipe.epochs),
                        ("batch_size", recipe.batch_size), ("image_size", recipe.image_size)):
        if value is not None:
            positive_int(value, name, what="a positive integer")
    for name, value in (("steps", recipe.steps), ("epochs", recipe.epochs)):
        if value is not None:
            int_in(value, name, 1, MAX_STEPS)
    drop = recipe.drop_path_rate
    if isinstance(drop, bool) or not isinstance(drop, numbers.Real) or not 0 <= drop < 1:
        raise ArgumentError(f"drop_path must be a rate in [0, 1), got {drop!r}.")
    for name, value, low_open in (("layer_decay", recipe.layer_decay, False),
                                  ("ema", recipe.ema, True)):
        if value is not None and (isinstance(value, bool) or not isinstance(value, numbers.Real)
                                  or not 0 < value <= 1 or (low_open and value == 1)):
            interval = "(0, 1)" if low_open else "(0, 1]"
            raise ArgumentError(f"{name} must be a number in {interval}, got {value!r}.")
    rate = real_in(recipe.learning_rate, "lr", 0, float("inf"), low_open=True,
                   what="a positive number")
    if rate > MAX_LEARNING_RATE:
        raise ArgumentError(f"lr {rate:g} is above {MAX_LEARNING_RATE:g}, where SGD and AdamW "
                            "diverge; give a peak learning rate such as 0.03 (finetune).")
