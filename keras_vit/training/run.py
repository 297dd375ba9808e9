"""`train`: fit a ViT on a dataset and write every output of the run into one folder.

`train(dataset, ...)` builds the model inside a tf.distribute strategy, fits it
with a backup-and-restore state (so re-running after a crash resumes), keeps
the best checkpoint, logs one CSV row per epoch, and writes the evaluation
report and plots. Every output lives in one `output` folder:

    backup/        the state BackupAndRestore resumes from
    best.keras     the checkpoint with the best held-out accuracy
    log.csv        one row per epoch (loss, accuracy, val_*, learning_rate, seconds)
    report.json    accuracy, per-class precision/recall/F1, confusion matrix, skipped files
    curves.png, confusion.png
    model.keras    the final model
"""

import contextlib
import csv
import dataclasses
import math
import numbers
import os
import shutil
import tempfile
import time

import keras
import numpy as np
import tensorflow as tf

from keras_vit.data import DEMO_VARIANT, get_preset, load_dataset, make_pipeline
from keras_vit.models import ViT
from keras_vit.training import report
from keras_vit.training.distribute import get_strategy, multi_worker_fit, worker_output
from keras_vit.training.recipes import PRECISIONS, Recipe, accumulation_steps, get_recipe, make_optimizer
from keras_vit.variants import Variant, get_variant

__all__ = ["train", "build_model"]

MAX_EPOCHS_FOR_STEPS = 10  # a --steps run is cut into at most this many logged epochs
# Decoded examples up to this many bytes are cached in memory after the first epoch.
CACHE_BYTES = 2**28
# What a run writes; in a folder without a keras_vit log.csv they belong to something else.
RUN_OUTPUTS = ("best.keras", "log.csv", "report.json", "curves.png", "confusion.png",
               "model.keras")


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


def build_model(variant, weights, image_size, classes, dropout=0.0):
    """A ViT for `classes`; with weights, the pre-trained head is replaced by a zero one."""
    return ViT(variant, weights=weights, image_size=image_size, classes=classes,
               dropout=dropout)


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
          output="runs/keras_vit", data_dir=None, seed=0, verbose="auto"):
    """Trains (or fine-tunes) a ViT and writes every output into `output`.

    Defaults come from the dataset's preset (`keras_vit.data.PRESETS`): digits
    trains the tiny "demo" ViT from scratch; other datasets fine-tune ViT-B/16
    from ImageNet-21k.

    Args:
        dataset: "digits" (built in, offline), a folder of class sub-folders,
            or a TFDS name ("tf_flowers", "cifar10", ...).
        model: a variant name ("B/16"), a `Variant`, or "demo" (the tiny ViT).
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
        strategy: "auto", "mirrored", "multiworker", "tpu" or "none".
        precision: "float32", "mixed_bfloat16" or "mixed_float16".
        output: the run's folder. Re-running with the same folder resumes.
        data_dir: TFDS data_dir holding prepared datasets.
        seed: random seed.
        verbose: `model.fit`'s verbosity.

    Returns:
        The report dict that is also written to `output/report.json`.
    """
    if precision not in PRECISIONS:
        raise ValueError(f"precision must be one of {PRECISIONS}, got {precision!r}.")
    preset = get_preset(dataset)
    variant = _resolve_variant(model or preset.model)
    if recipe is None:
        recipe = "finetune" if weights else preset.recipe
    if isinstance(recipe, str):
        recipe = get_recipe(recipe, **preset.overrides(recipe))
    if weights is None and recipe.name == "finetune":
        weights = preset.finetune_weights
    overrides = {"image_size": image_size, "batch_size": batch_size, "learning_rate": lr}
    overrides = {k: v for k, v in overrides.items() if v is not None}
    if steps is not None:
        overrides.update(steps=steps, epochs=None)
    elif epochs is not None:
        overrides.update(epochs=epochs, steps=None)
    recipe = dataclasses.replace(recipe, **overrides)
    if recipe.steps is None and recipe.epochs is None:
        raise ValueError("Give steps or epochs.")
    _check_recipe_values(recipe)

    keras.utils.set_random_seed(seed)
    previous_policy = keras.mixed_precision.global_policy()
    keras.mixed_precision.set_global_policy(precision)
    try:
        return _fit_and_report(_Run(dataset, variant, weights, recipe, strategy, precision,
                                    output, data_dir, seed, verbose))
    finally:
        keras.mixed_precision.set_global_policy(previous_policy)


def _check_recipe_values(recipe):
    """Every length, size and rate positive: a zero batch divides by zero, a negative
    learning rate trains uphill, and neither should get as far as building a model."""
    for name, value in (("steps", recipe.steps), ("epochs", recipe.epochs),
                        ("batch_size", recipe.batch_size), ("image_size", recipe.image_size)):
        if value is not None and (isinstance(value, bool) or not isinstance(value, numbers.Integral)
                                  or value <= 0):
            raise ValueError(f"{name} must be a positive integer, got {value!r}.")
    rate = recipe.learning_rate
    if isinstance(rate, bool) or not isinstance(rate, numbers.Real) or not math.isfinite(rate) \
            or rate <= 0:
        raise ValueError(f"lr must be a positive number, got {rate!r}.")


def _resolve_variant(model):
    if isinstance(model, Variant):
        return model
    if model in ("demo", DEMO_VARIANT.name):
        return DEMO_VARIANT
    return get_variant(model)


def _fit_and_report(run):
    strategy = get_strategy(run.strategy)
    output = worker_output(run.output, strategy)
    _check_output(output)
    splits = load_dataset(run.dataset, data_dir=run.data_dir)
    if splits.num_classes < 2:
        raise ValueError(f"Dataset {run.dataset!r} has one class ({splits.class_names[0]!r}); "
                         "a classifier needs at least two.")
    with _output_folder(output):
        return _fit_in(output, run, strategy, splits)


def _check_output(output):
    """Refuses an output that is a file, or a folder holding outputs of something else."""
    if os.path.exists(output) and not os.path.isdir(output):
        raise ValueError(f"output {output!r} is a file; a run writes a folder of outputs there.")
    if not os.path.isdir(output):
        return
    log_path = os.path.join(output, "log.csv")
    if os.path.exists(log_path):
        try:
            with open(log_path, newline="") as f:
                header = next(csv.reader(f), None)
        except (OSError, UnicodeDecodeError, csv.Error) as error:
            raise ValueError(f"{log_path} cannot be read as a run's log ({error}).") from None
        if header is not None and "epoch" not in header:
            raise ValueError(f"{log_path} is not the log of a keras_vit run (no 'epoch' column); "
                             "choose another output folder, or move the file away.")
    if not report.read_log(log_path):  # no epoch yet: nothing here can be a previous run's
        foreign = [name for name in RUN_OUTPUTS if name != "log.csv"
                   and os.path.exists(os.path.join(output, name))]
        if foreign:
            raise ValueError(f"output {output!r} already holds {', '.join(foreign)} but no "
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
        raise OSError(f"Cannot write to the output folder {output!r}: "
                      f"{error.strerror or error}.") from None
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


def _fit_in(output, run, strategy, splits):
    recipe = run.recipe
    accumulation = accumulation_steps(recipe.global_batch_size, recipe.batch_size)
    epochs, per_epoch, total_updates = _plan(recipe, splits.num_train, recipe.steps,
                                             recipe.epochs, accumulation)

    def one_hot(images, labels):
        return images, tf.one_hot(labels, splits.num_classes)

    with strategy.scope():
        model = build_model(run.variant, run.weights, recipe.image_size, splits.num_classes,
                            recipe.dropout)
        image_size = model.input_shape[1]
        model.compile(optimizer=make_optimizer(recipe, total_updates, accumulation),
                      loss=keras.losses.CategoricalCrossentropy(
                          from_logits=True, label_smoothing=recipe.label_smoothing),
                      metrics=["accuracy"])
    # Decided by what the cache would hold, the decoded images at their own size (a folder
    # of photos is cached before its resize): unknown sizes are not cached.
    small = None not in (splits.train_bytes, splits.test_bytes) \
        and splits.train_bytes + splits.test_bytes < CACHE_BYTES
    train_data = make_pipeline(splits.train, image_size, recipe.batch_size, True,
                               crop_area=recipe.crop_area, flip=recipe.flip, cache=small,
                               seed=run.seed).map(one_hot)
    eval_data = make_pipeline(splits.test, image_size, recipe.batch_size, False,
                              cache=small).map(one_hot)

    log_path = os.path.join(output, "log.csv")
    best_so_far = _best_logged(log_path, "val_accuracy")
    callbacks = [
        _EpochExtras(log_path),
        keras.callbacks.CSVLogger(log_path, append=True),
        # After the CSV row: a crash between the two repeats the epoch, and _EpochExtras
        # then drops the stale row, so log.csv never misses or repeats an epoch.
        _BackupAndRestore(os.path.join(output, "backup")),
        keras.callbacks.ModelCheckpoint(os.path.join(output, "best.keras"),
                                        monitor="val_accuracy", mode="max",
                                        save_best_only=True,
                                        initial_value_threshold=best_so_far),
    ]
    with multi_worker_fit(model, strategy, train_data.element_spec):
        model.fit(train_data, epochs=epochs, steps_per_epoch=per_epoch,
                  validation_data=eval_data, callbacks=callbacks, verbose=run.verbose,
                  shuffle=False)  # the pipeline shuffles
    model.save(os.path.join(output, "model.keras"))

    logits = model.predict(eval_data.map(lambda x, y: x), verbose=0)
    labels = np.concatenate([y for _, y in splits.test.batch(1024).as_numpy_iterator()])
    summary = {
        "dataset": splits.name, "num_train": splits.num_train, "num_test": splits.num_test,
        "model": run.variant.name, "weights": run.weights, "image_size": image_size,
        "recipe": dataclasses.asdict(recipe), "strategy": type(strategy).__name__,
        "replicas": strategy.num_replicas_in_sync, "precision": run.precision,
        "epochs": epochs, "steps_per_epoch": per_epoch, "optimizer_updates": total_updates,
        "gradient_accumulation_steps": accumulation,
        "optimizer_iterations": int(keras.ops.convert_to_numpy(model.optimizer.iterations)),
        "parameters": model.count_params(),
    }
    return report.write_report(output, labels, np.argmax(logits, axis=-1), splits.class_names,
                               summary, skipped_files=splits.skipped_files,
                               unsupported_files=splits.unsupported_files)


def _best_logged(path, key):
    values = [float(row[key]) for row in report.read_log(path) if row.get(key)]
    return max(values) if values else None


class _EpochExtras(keras.callbacks.Callback):
    """Adds `learning_rate` and `seconds` to each epoch's logs; trims rows a resume repeats."""

    def __init__(self, log_path):
        super().__init__()
        self.log_path = log_path
        self._first = True

    def on_epoch_begin(self, epoch, logs=None):
        self._start = time.perf_counter()
        if self._first:  # rows from `epoch` on belong to work the backup did not keep
            self._first = False
            rows = report.read_log(self.log_path)
            kept = [r for r in rows if int(r["epoch"]) < epoch]
            if len(kept) < len(rows):
                with open(self.log_path, "w", newline="") as f:
                    writer = csv.DictWriter(f, fieldnames=list(rows[0]))
                    writer.writeheader()
                    writer.writerows(kept)

    def on_epoch_end(self, epoch, logs=None):
        if logs is not None:
            optimizer = self.model.optimizer
            logs["learning_rate"] = float(keras.ops.convert_to_numpy(optimizer.learning_rate))
            logs["seconds"] = time.perf_counter() - self._start


class _BackupAndRestore(keras.callbacks.BackupAndRestore):
    """BackupAndRestore that survives a kill in the middle of writing its backup.

    Keeps the previous epoch's backup too (Keras falls back to it when the newest
    is torn); a torn first backup, with nothing older, restarts the run from scratch.
    Kept after training, so re-running a finished command only re-evaluates.
    """

    def __init__(self, backup_dir):
        super().__init__(backup_dir, delete_checkpoint=False, double_checkpoint=True)

    def on_train_begin(self, logs=None):
        try:
            super().on_train_begin(logs)
        except (OSError, ValueError) as error:
            print(f"keras_vit: the backup in {self.backup_dir} is unreadable ({error}); "
                  "starting again from the first epoch.")
            shutil.rmtree(self.backup_dir, ignore_errors=True)
