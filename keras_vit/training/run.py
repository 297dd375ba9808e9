"""`train`: fit a ViT on a dataset and write every output of the run into one folder.

`train(dataset, ...)` builds the model inside a placement (training/placement.py: a
tf.distribute strategy, or a keras.distribution on JAX), fits it
with a backup-and-restore state (so re-running after a crash resumes), keeps
the best checkpoint, logs one CSV row per epoch, and writes the evaluation
report and plots. Every output lives in one `output` folder:

    backup/        the state a re-run resumes from (keras_vit/training/resume.py)
    best.keras     the checkpoint with the best validation accuracy
    log.csv        one row per epoch (loss, accuracy, val_* on the validation split,
                   learning_rate, seconds)
    report.json    test-split accuracy, per-class precision/recall/F1, confusion matrix,
                   skipped files; the split record and which split each number comes from
    curves.png, confusion.png
    model.keras    the final model
    labels.txt     the class names, one a line, in the head's order (read by predict, export)
    run.json       the run's configuration, its split record, and whether it finished

Three splits: `fit` trains on the training examples, and its validation data
(which chooses best.keras) is `validation_fraction` of them, carved out
stratified with `validation_seed`; the test split is read once, for the final
report. run.json records the split's fractions, seed and fingerprints.

Re-running: `run.json` is compared with the new call before anything is
written. The same configuration resumes an interrupted run, or, when the run
finished, returns its report and rewrites nothing; a different configuration
is refused (`RunConflictError`) unless `overwrite=True`, which deletes the
previous run's outputs first, so `report.json` only ever describes what ran.
The split is part of the configuration: once the data is loaded, its
fingerprints are checked against run.json's, so a resumed run goes on only on
the same examples (a dataset folder whose files changed is another run).

Each is written atomically (keras_vit/atomic.py); a re-run repairs what a kill
left before resuming (keras_vit/training/resume.py).
"""

import contextlib
import csv
import dataclasses
import io
import json
import math
import numbers
import os
import shutil
import tempfile
import time

import keras
import numpy as np
import tensorflow as tf

from keras_vit import reports as report
from keras_vit._support.checks import positive_int
from keras_vit._support.files import read_text
from keras_vit._support.json_files import parse_json, read_json
from keras_vit.atomic import atomic_open
from keras_vit.data import VALIDATION_FRACTION, get_preset, load_dataset, make_pipeline
from keras_vit.data.augment import Augmentation, get_augmentation
from keras_vit.data.splitting import SPLIT_SEED
from keras_vit.errors import ArgumentError, DatasetError, PathError, RunConflictError
from keras_vit.execution import check_execution, choose_jit_compile
from keras_vit.memory import check_fits, peak_memory
from keras_vit.models import ViT
from keras_vit.normalization import OFFICIAL_NORMALIZATION, input_normalization
from keras_vit.training import resume
from keras_vit.training.distillation import (
    check_distillation,
    check_teacher,
    load_teacher,
    make_distiller,
    student_of,
    teacher_spec,
)
from keras_vit.training.distribute import multi_worker_fit
from keras_vit.training.lora import check_lora, enable_lora, parameter_counts
from keras_vit.training.placement import get_placement
from keras_vit.training.prebuild import build_training_state
from keras_vit.training.recipes import PRECISIONS, Recipe, accumulation_steps, get_recipe, make_optimizer
from keras_vit.training.resume import check_outputs
from keras_vit.training.transfer import backbone_weights, source_architecture
from keras_vit.variants import Variant, get_architecture

__all__ = ["train", "build_model", "RunConflictError", "RUN_OUTPUTS"]

# What a run writes into its folder; --overwrite deletes these and nothing else, and in a
# folder without a keras_vit run's log.csv or run.json they belong to something else.
RUN_OUTPUTS = ("backup", "best.keras", "log.csv", "report.json", "curves.png", "confusion.png",
               "model.keras", "labels.txt", "run.json")
RUN_FILE = "run.json"

MAX_EPOCHS_FOR_STEPS = 10  # a --steps run is cut into at most this many logged epochs
# Decoded examples up to this many bytes are cached in memory after the first epoch.
CACHE_BYTES = 2**28


@dataclasses.dataclass(frozen=True)
class _Run:
    """One run, every choice resolved: what `train` hands the fitting code."""

    dataset: str
    variant: Variant
    weights: str | None
    recipe: Recipe
    strategy: str
    precision: str
    output: str
    data_dir: str | None
    seed: int
    verbose: object
    validation_fraction: float = VALIDATION_FRACTION
    validation_seed: int = SPLIT_SEED
    execution: str = "auto"
    lora: dict | None = None  # {"rank": R, "targets": [...]}: LoRA instead of full fine-tuning
    teacher: dict | None = None  # run.json's teacher record: distillation from that model


def build_model(variant, weights, image_size, classes, dropout=0.0, drop_path_rate=0.0):
    """A ViT (or a BiT) for `classes`; with weights, the pre-trained head is replaced by a
    zero one. `weights` may also name a `.keras` file or an earlier run's folder: its
    backbone is kept and the head is always a new zero one (training/transfer.py)."""
    with backbone_weights(weights) as weights:
        if not isinstance(variant, Variant):  # a BiTVariant: BiT trains without dropout
            from keras_vit.models import BiT

            return BiT(variant, weights=weights, image_size=image_size, classes=classes)
        return ViT(variant, weights=weights, image_size=image_size, classes=classes,
                   dropout=dropout, drop_path_rate=drop_path_rate)


def _plan(recipe, num_train, steps, epochs, accumulation):
    """(epochs, forward passes per epoch, weight updates in the whole run)."""
    data_epoch = max(1, num_train // recipe.batch_size)
    if steps is not None:
        passes = steps * accumulation
        epochs = min(MAX_EPOCHS_FOR_STEPS, math.ceil(passes / data_epoch))
        per_epoch = math.ceil(passes / epochs / accumulation) * accumulation
        return epochs, per_epoch, steps
    per_epoch = max(accumulation, data_epoch // accumulation * accumulation)
    return epochs, per_epoch, epochs * per_epoch // accumulation


def train(dataset="digits", model=None, weights=None, image_size=None, batch_size=None,
          steps=None, epochs=None, lr=None, recipe=None, strategy="auto", precision="float32",
          output="runs/keras_vit", data_dir=None, seed=0, verbose="auto", overwrite=False,
          validation_fraction=VALIDATION_FRACTION, validation_seed=SPLIT_SEED, execution=None,
          drop_path=None, augment=None, mixup=None, cutmix=None, randaugment=None,
          layer_decay=None, ema=None, lora_rank=None,
          lora_targets=("query", "value"), teacher=None, teacher_weights=None,
          distillation=None, distillation_temperature=None, distillation_alpha=None):
    """Trains (or fine-tunes) a ViT and writes every output into `output`.

    Defaults come from the dataset's preset (`keras_vit.data.PRESETS`): digits
    trains the tiny "demo" ViT from scratch; other datasets fine-tune ViT-B/16
    from ImageNet-21k.

    Args:
        dataset: "digits" (built in, offline), a folder of class sub-folders,
            or a TFDS name ("tf_flowers", "cifar10", ...).
        model: a variant name ("B/16"), a `Variant`, "demo" (the tiny ViT), or a
            BiT ResNet ("BiT-R50x1", the paper's CNN baseline).
            Defaults to the preset's ("demo" for digits, else "B/16").
        weights: a catalogue tag or `.npz` path; defaults to the preset's
            fine-tuning weights ("imagenet21k"; none for digits) with the
            fine-tuning recipe, None for training from scratch.
        recipe: "finetune" (default with weights) or "scratch", or a `Recipe`;
            defaults to the preset's recipe without weights.
        image_size: overrides the recipe's resolution.
        batch_size: overrides the recipe's per-step (global) batch size.
        steps: overrides the recipe's length in weight updates; when given it
            wins over `epochs`.
        epochs: overrides the recipe's length in epochs.
        lr: overrides the recipe's peak learning rate.
        strategy: "auto", "none"; on TensorFlow "mirrored", "multiworker", "tpu"
            (tf.distribute); on JAX "data-parallel", "model-parallel"
            (keras.distribution; "auto" is data-parallel over several devices).
        precision: "float32", "mixed_bfloat16" or "mixed_float16".
        output: the run's folder. Re-running with the same folder and the same
            configuration resumes; when that run finished, its report is
            returned and nothing is rewritten. Another configuration on the
            same folder raises `RunConflictError`.
        data_dir: TFDS data_dir holding prepared datasets.
        seed: random seed.
        lora_rank: train LoRA factors of this rank (and the head) instead of every weight
            (`keras_vit.enable_lora`); the saved models hold the merged weights.
        lora_targets: the projections LoRA adapts ("query", "key", "value", "out", "mlp").
        verbose: `model.fit`'s verbosity (1: a progress bar updated every step).
        overwrite: delete a previous run's outputs in `output` and start again.
        validation_fraction: the share of the training examples held back as the
            validation split, which chooses best.keras (stratified by class).
        validation_seed: the seed that draws the validation split; the test
            split does not depend on it.
        execution: how TensorFlow runs the training step on a CPU: "auto" (the
            faster of "graph" and "xla" for this model and batch on this machine,
            timed once and remembered: `keras_vit.execution`), "graph" or "xla".
            How, not what: it is not part of the run's configuration.
        drop_path: stochastic depth rate of the last block (ViT's blocks rise
            linearly from 0 to it; `keras_vit.ViT(drop_path_rate=)`); BiT has none.
        augment: an AugReg setting by its paper name ("none", "light1",
            "light2", "medium1", "medium2", "strong1", "strong2":
            `keras_vit.data.augment.AUGREG`): RandAugment and MixUp, in the
            training pipeline, deterministic under `seed`.
        mixup: MixUp's alpha (0: off), instead of the setting's; with
            `cutmix` too, each batch takes one of the two.
        cutmix: CutMix's alpha (0: off; the settings have none).
        randaugment: "N,M" or (N, M), RandAugment's layers and magnitude
            (0 to 30), instead of the setting's; "none" for none.
        layer_decay: layer-wise learning-rate decay in (0, 1] (BEiT, MAE): block
            i of L trains at `layer_decay ** (L - i)` times the rate, the
            embeddings at `layer_decay ** (L + 1)`, the head at the full rate.
        ema: the momentum of an exponential moving average of the weights
            (Keras' `use_ema`, e.g. 0.9999), which model.keras holds (best.keras,
            chosen during training, holds the trained weights).
        teacher: distil from this frozen model (`keras.distillation.Distiller`): a
            `.keras` file, an earlier run's folder, or an architecture name with
            `teacher_weights`; its classes must be the dataset's. It is fed the
            student's images, resized and normalised as its own weights expect
            (keras_vit/training/distillation.py).
        teacher_weights: the weights of a teacher named by its architecture (what
            `weights` accepts; the head they hold is the teacher's).
        distillation: "soft" (KL at a temperature, Keras' LogitsDistillation) or
            "hard" (cross-entropy on the teacher's argmax, DeiT's); default soft, and
            hard for a distilled DeiT student, whose distillation head learns from the
            teacher and class head from the labels.
        distillation_temperature: soft distillation's temperature (default 3.0, DeiT's);
            Keras multiplies the KL by its square.
        distillation_alpha: the distillation loss's weight in [0, 1]; the labels' loss
            gets `1 - alpha` (default 0.5).

    Returns:
        The report dict that is also written to `output/report.json`.
    """
    if precision not in PRECISIONS:
        raise ArgumentError(f"precision must be one of {PRECISIONS}, got {precision!r}.")
    execution = check_execution(execution)
    if isinstance(validation_fraction, bool) \
            or not isinstance(validation_fraction, numbers.Real) or not 0 < validation_fraction < 1:
        raise ArgumentError("validation_fraction must be a number between 0 and 1 (exclusive), "
                            f"got {validation_fraction!r}.")
    if isinstance(validation_seed, bool) or not isinstance(validation_seed, numbers.Integral):
        raise ArgumentError(f"validation_seed must be an integer, got {validation_seed!r}.")
    preset = get_preset(dataset)
    # An earlier run's model (weights naming a .keras file or a run folder) is its own default.
    variant = get_architecture(model or source_architecture(weights) or preset.model)
    if recipe is None:
        recipe = "finetune" if weights else preset.recipe
    if isinstance(recipe, str):
        recipe = get_recipe(recipe, **preset.overrides(recipe))
    if weights is None and recipe.name == "finetune":
        weights = preset.finetune_weights
    overrides = {"image_size": image_size, "batch_size": batch_size, "learning_rate": lr}
    overrides = {k: v for k, v in overrides.items() if v is not None}
    if drop_path is not None:
        overrides["drop_path_rate"] = drop_path
    overrides.update({k: v for k, v in (("layer_decay", layer_decay), ("ema", ema)) if v is not None})
    if any(value is not None for value in (augment, mixup, cutmix, randaugment)):
        augment = augment or "none"
        overrides.update(augment=augment, **dataclasses.asdict(
            get_augmentation(augment, mixup, cutmix, randaugment)))
    if steps is not None:
        overrides.update(steps=steps, epochs=None)
    elif epochs is not None:
        overrides.update(epochs=epochs, steps=None)
    recipe = dataclasses.replace(recipe, **overrides)
    if recipe.steps is None and recipe.epochs is None:
        raise ArgumentError("Give steps or epochs.")
    _check_recipe_values(recipe)
    for name, value in (("drop_path", recipe.drop_path_rate), ("layer_decay", recipe.layer_decay)):
        if value and not isinstance(variant, Variant):
            raise ArgumentError(f"{name} works on a ViT's encoder blocks; {variant.name} is a BiT "
                                "ResNet, which has none.")
    check_fits(variant, recipe.image_size, batch_size=recipe.batch_size)

    config = _run_config(dataset, variant, weights, recipe, precision, seed,
                         float(validation_fraction), int(validation_seed))
    lora = check_lora(lora_rank, lora_targets)
    if lora is not None:  # only then: runs without LoRA keep their run.json as it was
        config["lora"] = lora
    teacher_record = _teacher_record(teacher, teacher_weights, distillation,
                                     distillation_temperature, distillation_alpha, variant)
    if teacher_record is not None:  # only then: runs without a teacher keep their run.json
        config["teacher"] = teacher_record
    finished = None if overwrite else _check_previous_run(output, config)
    if finished is not None:
        return finished

    keras.utils.set_random_seed(seed)
    previous_policy = keras.mixed_precision.global_policy()
    keras.mixed_precision.set_global_policy(precision)
    try:
        return _fit_and_report(_Run(dataset, variant, weights, recipe, strategy, precision,
                                    output, data_dir, seed, verbose, float(validation_fraction),
                                    int(validation_seed), execution, lora, teacher_record),
                               config, overwrite)
    finally:
        keras.mixed_precision.set_global_policy(previous_policy)


def _teacher_record(teacher, weights, kind, temperature, alpha, variant):
    """run.json's record of the distillation (None without a teacher); DeiT's defaults."""
    if teacher is None:
        given = [name for name, value in (("teacher_weights", weights), ("distillation", kind),
                                          ("distillation_temperature", temperature),
                                          ("distillation_alpha", alpha)) if value is not None]
        if given:
            raise ArgumentError(f"{', '.join(given)} need a teacher (--teacher).")
        return None
    kind, temperature, alpha = check_distillation(kind, temperature, alpha,
                                                  getattr(variant, "distilled", False))
    return {"model": teacher_spec(teacher), "weights": weights, "distillation": kind,
            "temperature": temperature, "alpha": alpha}


def _run_config(dataset, variant, weights, recipe, precision, seed,
                validation_fraction=VALIDATION_FRACTION, validation_seed=SPLIT_SEED):
    """What decides a run's result, as JSON values; where the data lives and the strategy don't.

    The split's fingerprints join it once the data is loaded (`_check_split`)."""
    if isinstance(dataset, str) and os.path.isdir(dataset):
        dataset = os.path.abspath(dataset)
    return {"dataset": dataset, "model": variant.name if _known(variant)
            else dataclasses.asdict(variant), "weights": weights,
            "recipe": dataclasses.asdict(recipe), "precision": precision, "seed": seed,
            "split": {"validation_fraction": validation_fraction,
                      "validation_seed": validation_seed}}


def _known(variant):
    """Whether `get_architecture` finds `variant` by its name (then run.json records the name)."""
    try:
        return get_architecture(variant.name) == variant
    except ValueError:  # a Variant of the user's own, under a name of their own
        return False


def _flatten(config, prefix=""):
    flat = {}
    for key, value in config.items():
        if isinstance(value, dict):
            flat.update(_flatten(value, f"{prefix}{key}."))
        else:
            flat[f"{prefix}{key}"] = value
    return flat


def _read_run_file(output):
    path = os.path.join(output, RUN_FILE)
    if not os.path.exists(path):
        return None
    try:
        state = read_json(path, "a run record", RunConflictError)
        return state if isinstance(state.get("config"), dict) else None
    except (OSError, RunConflictError, AttributeError):
        return None


def _check_previous_run(output, config):
    """None to go on (fresh or resumed); a finished run's report to stop. Writes nothing."""
    previous = _read_run_file(output)
    if previous is not None and _never_started(output, previous):
        return None  # a command refused or stopped before its first epoch: not a run
    if previous is None:
        _check_output(output)  # files of something else than a keras_vit run: say which
        if any(os.path.exists(os.path.join(output, n)) for n in ("backup", "report.json")):
            raise RunConflictError(
                f"{output} holds a run without a readable {RUN_FILE}, so this command cannot tell "
                "whether it is the same run; start a new run with --overwrite (deletes it) or "
                "another --output.")
        return None
    old, new = (_flatten(parse_json(json.dumps(c), "a run's configuration", RunConflictError))
                for c in (previous["config"], config))  # through JSON: tuples and lists alike
    differences = [f"{key} {old.get(key)!r} -> {new.get(key)!r}"
                   for key in sorted(set(old) | set(new)) if old.get(key) != new.get(key)]
    if differences:
        raise RunConflictError(
            f"{output} holds another run ({'; '.join(differences)}); re-run its own command to "
            "resume it, or start a new run with --overwrite (deletes it) or another --output.")
    report_path = os.path.join(output, "report.json")
    # A finished run whose outputs a kill or a disk tore goes on instead: resuming rebuilds them.
    if previous.get("finished") and os.path.exists(report_path) and not check_outputs(output):
        report_ = read_json(report_path, "a run report", RunConflictError)
        print(f"keras_vit: the run in {output} already finished; nothing was trained or "
              "rewritten (start a new run with --overwrite or another --output).")
        return report_
    return None


def _check_split(output, split):
    """Refuses to resume a run on other examples than it started on (a dataset folder whose
    files changed since): run.json's fingerprints against the data just loaded."""
    previous = _read_run_file(output)
    if previous is None or _never_started(output, previous):
        return
    recorded = previous.get("split", {}).get("fingerprints", {})
    changed = [f"{name} split {recorded.get(name)} -> {value}"
               for name, value in split["fingerprints"].items() if recorded.get(name) != value]
    if changed:
        raise RunConflictError(
            f"{output} holds a run on other examples ({'; '.join(changed)}: the dataset changed "
            "since); start a new run with --overwrite (deletes it) or another --output.")


def _never_started(output, previous):
    """Whether `output`'s run.json is all its run left: no epoch logged, backed up or kept."""
    return (not previous.get("finished") and not resume.backups(os.path.join(output, "backup"))
            and not report.read_log(os.path.join(output, "log.csv"))
            and not any(os.path.exists(os.path.join(output, name))
                        for name in ("best.keras", "model.keras", "report.json")))


def _delete_run(output):
    """Removes what a run writes (RUN_OUTPUTS), nothing else the folder holds."""
    for name in RUN_OUTPUTS:
        path = os.path.join(output, name)
        if os.path.isdir(path) and not os.path.islink(path):
            shutil.rmtree(path)
        elif os.path.lexists(path):
            os.unlink(path)


def _write_json(path, value):
    with atomic_open(path) as f:  # a kill leaves the old file or the new one
        json.dump(value, f, indent=2)


def _write_labels(path, class_names):
    names = [str(name) for name in class_names]
    bad = [name for name in names if "\n" in name or "\r" in name or not name]
    if bad:
        raise DatasetError(f"Class names must be non-empty single lines, got {bad[:3]!r}.")
    with atomic_open(path, encoding="utf-8") as f:
        f.write("".join(f"{name}\n" for name in names))


def _check_recipe_values(recipe):
    """Every length, size and rate positive: a zero batch divides by zero, a negative
    learning rate trains uphill, and neither should get as far as building a model."""
    for name, value in (("steps", recipe.steps), ("epochs", recipe.epochs),
                        ("batch_size", recipe.batch_size), ("image_size", recipe.image_size)):
        if value is not None:
            positive_int(value, name, what="a positive integer")
    drop = recipe.drop_path_rate
    if isinstance(drop, bool) or not isinstance(drop, numbers.Real) or not 0 <= drop < 1:
        raise ArgumentError(f"drop_path must be a rate in [0, 1), got {drop!r}.")
    for name, value, low_open in (("layer_decay", recipe.layer_decay, False),
                                  ("ema", recipe.ema, True)):
        if value is not None and (isinstance(value, bool) or not isinstance(value, numbers.Real)
                                  or not 0 < value <= 1 or (low_open and value == 1)):
            interval = "(0, 1)" if low_open else "(0, 1]"
            raise ArgumentError(f"{name} must be a number in {interval}, got {value!r}.")
    rate = recipe.learning_rate
    if isinstance(rate, bool) or not isinstance(rate, numbers.Real) or not math.isfinite(rate) \
            or rate <= 0:
        raise ArgumentError(f"lr must be a positive number, got {rate!r}.")


def _fit_and_report(run, config, overwrite):
    """Checks every argument (the data, the placement, the model and its weights) before
    writing anything to the output: a refused call leaves the folder as it was."""
    placement = get_placement(run.strategy, run.variant)
    output = placement.worker_output(run.output)
    if not overwrite:
        _check_output(output)
    splits = load_dataset(run.dataset, data_dir=run.data_dir,
                          validation_fraction=run.validation_fraction,
                          validation_seed=run.validation_seed)
    if splits.num_classes < 2:
        raise DatasetError(f"Dataset {run.dataset!r} has one class ({splits.class_names[0]!r}); "
                           "a classifier needs at least two.")
    if not overwrite:
        _check_split(output, splits.split)
    model, plan = _compiled_model(run, placement, splits)
    if overwrite:
        _delete_run(output)
    with _output_folder(output):
        return _fit_in(output, run, placement, splits, config, model, plan)


def _compiled_model(run, placement, splits):
    """The model, built (its weights read) and compiled in the placement; and the run's plan."""
    recipe = run.recipe
    accumulation = accumulation_steps(recipe.global_batch_size, recipe.batch_size)
    plan = (*_plan(recipe, splits.num_train, recipe.steps, recipe.epochs, accumulation),
            accumulation)
    with placement.scope():
        model = build_model(run.variant, run.weights, recipe.image_size, splits.num_classes,
                            recipe.dropout, recipe.drop_path_rate)
        if run.lora is not None:
            enable_lora(model, run.lora["rank"], run.lora["targets"])
        jit_compile = choose_jit_compile(
            model, (recipe.batch_size, *model.input_shape[1:]), run.execution, training=True)
        if run.teacher is not None:  # fit trains the Distiller; its student is the model
            model = make_distiller(_checked_teacher(run.teacher, splits), model,
                                   run.teacher["distillation"], run.teacher["temperature"],
                                   run.teacher["alpha"])
        model.compile(optimizer=make_optimizer(recipe, plan[2], accumulation),
                      loss=keras.losses.CategoricalCrossentropy(
                          from_logits=True, label_smoothing=recipe.label_smoothing),
                      metrics=["accuracy"],
                      jit_compile="auto" if jit_compile is None else jit_compile)
    return model, plan


def _checked_teacher(record, splits):
    """The teacher `record` names, loaded; refused unless it scores the dataset's classes."""
    return check_teacher(load_teacher(record["model"], record["weights"]), record["model"],
                         splits.num_classes, splits.name)


def _teacher_report(model, record):
    """The report's teacher: run.json's record, and what the loaded teacher is."""
    if record is None:
        return None
    teacher = model.teacher  # behind the layers feeding it the student's input, if any
    inner = teacher.layers[-1] if teacher.name.endswith("_on_student_input") else teacher
    return {**record, "architecture": inner.name, "classes": int(inner.output_shape[-1]),
            "image_size": inner.input_shape[1]}


def _check_output(output):
    """Refuses an output that is a file, or a folder holding outputs of something else."""
    if os.path.exists(output) and not os.path.isdir(output):
        raise RunConflictError(f"output {output!r} is a file; a run writes a folder of outputs there.")
    if not os.path.isdir(output):
        return
    if _read_run_file(output) is not None:  # a keras_vit run's folder, checked by train()
        return
    log_path = os.path.join(output, "log.csv")
    if os.path.exists(log_path):
        try:
            text = read_text(log_path, "a run's log", RunConflictError)
            header = next(csv.reader(io.StringIO(text, newline="")), None)
        except RunConflictError:
            raise
        except (OSError, UnicodeDecodeError, csv.Error) as error:
            raise RunConflictError(f"{log_path} cannot be read as a run's log ({error}).") from error
        if header is not None and "epoch" not in header:
            raise RunConflictError(f"{log_path} is not the log of a keras_vit run (no 'epoch' column); "
                                   "choose another output folder, or move the file away.")
    if not report.read_log(log_path):  # no epoch yet: nothing here can be a previous run's
        foreign = [name for name in RUN_OUTPUTS if name != "log.csv"
                   and os.path.exists(os.path.join(output, name))]
        if foreign:
            raise RunConflictError(f"output {output!r} already holds {', '.join(foreign)} but no "
                                   "log.csv of a keras_vit run: they are not this run's to overwrite. "
                                   "Choose another output folder, or move them away.")


@contextlib.contextmanager
def _output_folder(output):
    """Creates `output` and checks it is writable; if the run then fails, removes the
    folders it created as long as they are still empty, so an error leaves nothing behind."""
    created, folder = [], os.path.abspath(output)
    while not os.path.exists(folder):
        created.append(folder)
        folder = os.path.dirname(folder)
    try:
        os.makedirs(output, exist_ok=True)
        with tempfile.TemporaryFile(dir=output):
            pass
    except OSError as error:
        _remove_empty(created)
        raise PathError(f"Cannot write to the output folder {output!r}: "
                        f"{error.strerror or error}.") from error
    try:
        yield
    except BaseException:
        _remove_empty(created)
        raise


def _remove_empty(folders):
    for folder in folders:  # deepest first
        try:
            os.rmdir(folder)
        except OSError:
            return


def _fit_in(output, run, placement, splits, config, model, plan):
    # Recorded before the first epoch, so a killed run is recognised when its command comes again.
    # The teacher as loaded (its architecture and classes) beside the config's record of it.
    teacher = _teacher_report(model, run.teacher)
    extra = {} if teacher is None else {"teacher": teacher}
    _write_json(os.path.join(output, RUN_FILE), {"config": config, "split": splits.split,
                                                 **extra, "finished": False})
    recipe = run.recipe
    epochs, per_epoch, total_updates, accumulation = plan
    student = student_of(model)  # what a distilled run saves and scores; else the model
    image_size = student.input_shape[1]

    def one_hot(images, labels):
        return images, tf.one_hot(labels, splits.num_classes)
    # Decided by what the cache would hold, the decoded images at their own size (a folder
    # of photos is cached before its resize): unknown sizes are not cached.
    sizes = (splits.train_bytes, splits.validation_bytes, splits.test_bytes)
    small = None not in sizes and sum(sizes) < CACHE_BYTES
    # The pixels the model's weights expect ([-1, 1], or their source's mean/std).
    normalization = input_normalization(student)
    normalization = None if normalization == OFFICIAL_NORMALIZATION else normalization
    augmentation = Augmentation(recipe.randaugment, recipe.mixup, recipe.cutmix)
    train_data = make_pipeline(splits.train, image_size, recipe.batch_size, True,
                               crop_area=recipe.crop_area, flip=recipe.flip, cache=small,
                               seed=run.seed, normalization=normalization,
                               augmentation=augmentation, num_classes=splits.num_classes)
    # Validation data chooses best.keras (the val_* of log.csv); the test split is only read
    # for the final report, after fit, so no choice of the run has seen it.
    validation_data = make_pipeline(splits.validation, image_size, recipe.batch_size, False,
                                    cache=small, normalization=normalization).map(one_hot)
    test_images = make_pipeline(splits.test, image_size, recipe.batch_size, False,
                                normalization=normalization).map(lambda x, y: x)

    log_path = os.path.join(output, "log.csv")
    with placement.scope():  # the optimizer's variables are built where fit builds them
        initial_epoch, best_so_far = resume.resume(model, output)
        build_training_state(model)
    step_timer = _StepTimer()
    callbacks = [
        _EpochExtras(),
        step_timer,
        keras.callbacks.CSVLogger(log_path, append=True),
        # After the CSV row: a kill between the two runs the epoch again, and resume()
        # drops its row first, so log.csv never misses or repeats an epoch.
        resume.Backup(os.path.join(output, "backup")),
        resume.BestCheckpoint(os.path.join(output, "best.keras"), best_so_far),
    ]
    with placement.run_scope(), multi_worker_fit(model, placement.strategy,
                                                   train_data.element_spec):
        model.fit(train_data, epochs=epochs, initial_epoch=initial_epoch,
                  steps_per_epoch=per_epoch, validation_data=validation_data,
                  callbacks=callbacks, verbose=run.verbose, shuffle=False)  # the pipeline shuffles
        resume.save_model(model, os.path.join(output, "model.keras"))
        logits = student.predict(test_images, verbose=0)
    _write_labels(os.path.join(output, "labels.txt"), splits.class_names)
    labels = np.concatenate([y for _, y in splits.test.batch(1024).as_numpy_iterator()])
    summary = {
        # What the model was trained and scored on: less the files that failed when read.
        "dataset": splits.name, "num_train": splits.count_read("train"),
        "num_validation": splits.count_read("validation"), "num_test": splits.count_read("test"),
        "split": splits.split,
        # Where each number comes from: the test split, read once by the final model.
        "evaluated": {"split": "test", "model": "model.keras",
                      "numbers": ["accuracy", "per_class", "macro_avg", "confusion_matrix"]},
        "best_checkpoint": _best_checkpoint(log_path),
        "model": run.variant.name, "weights": run.weights, "image_size": image_size,
        "recipe": dataclasses.asdict(recipe), "strategy": placement.name,
        "replicas": placement.num_replicas, "precision": run.precision,
        "jit_compile": bool(model.jit_compile),
        "epochs": epochs, "steps_per_epoch": per_epoch, "optimizer_updates": total_updates,
        "gradient_accumulation_steps": accumulation,
        "optimizer_iterations": int(keras.ops.convert_to_numpy(model.optimizer.iterations)),
        "parameters": student.count_params(),
        # What the optimizer updates and all the model holds (LoRA factors included).
        "parameter_counts": parameter_counts(student), "lora": run.lora,
        "teacher": teacher,
        # What the run cost: the median seconds of a training batch this process ran, and the
        # process's peak resident memory (TensorFlow's allocations included).
        "step_seconds": step_timer.record(), "peak_memory": peak_memory(),
    }
    result = report.write_report(output, labels, np.argmax(logits, axis=-1), splits.class_names,
                                 summary, skipped_files=splits.skipped_files,
                                 unsupported_files=splits.unsupported_files)
    # Last: only a run whose every output was written counts as finished.
    _write_json(os.path.join(output, RUN_FILE), {"config": config, "split": splits.split,
                                                 **extra, "finished": True})
    return result


def _best_checkpoint(log_path):
    """Which epoch best.keras holds, and its validation score: the first best of log.csv,
    as BestCheckpoint keeps it."""
    scores = [(int(row["epoch"]), float(row[resume.MONITOR]))
              for row in report.read_log(log_path) if row.get(resume.MONITOR)]
    epoch, score = max(scores, key=lambda item: (item[1], -item[0]), default=(None, None))
    return {"file": "best.keras", "chosen_on": "validation", "monitor": resume.MONITOR,
            "epoch": None if epoch is None else epoch + 1, "value": score}


class _StepTimer(keras.callbacks.Callback):
    """Times each training batch (a forward and backward pass; an update every
    `gradient_accumulation_steps` of them), the first aside: it traces and compiles."""

    def __init__(self):
        super().__init__()
        self.seconds = []

    def on_train_batch_begin(self, batch, logs=None):
        self._start = time.perf_counter()

    def on_train_batch_end(self, batch, logs=None):
        self.seconds.append(time.perf_counter() - self._start)

    def record(self):
        """{"median", "batches_timed", "first"}: seconds of a batch, none when none ran."""
        timed = self.seconds[1:] or self.seconds
        return {"median": float(np.median(timed)) if timed else None,
                "batches_timed": len(timed),
                "first": float(self.seconds[0]) if self.seconds else None}


class _EpochExtras(keras.callbacks.Callback):
    """Adds `learning_rate` and `seconds` to each epoch's logs."""

    def on_epoch_begin(self, epoch, logs=None):
        self._start = time.perf_counter()

    def on_epoch_end(self, epoch, logs=None):
        if logs is not None:
            optimizer = self.model.optimizer
            logs["learning_rate"] = float(keras.ops.convert_to_numpy(optimizer.learning_rate))
            logs["seconds"] = time.perf_counter() - self._start
