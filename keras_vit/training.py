"""Training recipes: the paper's fine-tuning recipe and a from-scratch one, on tf.data.

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

import csv
import dataclasses
import json
import math
import os
import time

import keras
import numpy as np
import tensorflow as tf

from keras_vit import datasets, optimizers
from keras_vit.multiworker_fixes import multi_worker_fit
from keras_vit.report import _read_log
from keras_vit.models import ViT
from keras_vit.variants import Variant, get_variant

__all__ = ["Recipe", "RECIPES", "DEMO_VARIANT", "get_recipe", "learning_rate_schedule",
           "make_optimizer", "accumulation_steps", "get_strategy", "strategy_name",
           "build_model", "train", "STRATEGIES", "PRECISIONS"]

STRATEGIES = ("auto", "mirrored", "multiworker", "tpu", "none")
PRECISIONS = ("float32", "mixed_bfloat16", "mixed_float16")
MAX_EPOCHS_FOR_STEPS = 10  # a --steps run is cut into at most this many logged epochs


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

# A ViT small enough to train from scratch on scikit-learn's digits on a laptop CPU in minutes:
# 16 px images (8x8 digits upsampled), 4 px patches -> 16 tokens + the class token.
DEMO_VARIANT = Variant("ViT-demo_4", width=64, depth=4, mlp_dim=128, heads=4, patch_size=4)

# The defaults of `train(dataset="digits")`: reaches >= 0.97 held-out accuracy.
DIGITS_RECIPE = dataclasses.replace(
    RECIPES["scratch"], name="scratch", learning_rate=3e-3, warmup_steps=44, epochs=80,
    batch_size=64, image_size=16, weight_decay=0.05, crop_area=(0.8, 1.0), flip=False)


def get_recipe(name, **overrides):
    """A copy of `RECIPES[name]` with `overrides` (fields of `Recipe`) applied."""
    if name not in RECIPES:
        raise ValueError(f"Unknown recipe {name!r}; choose one of {sorted(RECIPES)}.")
    unknown = set(overrides) - {f.name for f in dataclasses.fields(Recipe)}
    if unknown:
        raise ValueError(f"Unknown recipe fields: {sorted(unknown)}.")
    return dataclasses.replace(RECIPES[name], **overrides)


def accumulation_steps(global_batch_size, batch_size):
    """How many forward passes of `batch_size` make one update of `global_batch_size`."""
    if not global_batch_size or global_batch_size <= batch_size:
        return 1
    if global_batch_size % batch_size:
        raise ValueError(f"The global batch {global_batch_size} is not a multiple of the batch "
                         f"size {batch_size}; pick a batch size that divides it (e.g. 32, 64).")
    return global_batch_size // batch_size


def learning_rate_schedule(peak, total_steps, warmup_steps):
    """Linear warmup from 0 to `peak` over `warmup_steps`, then cosine decay to 0 at `total_steps`.

    Steps are the optimizer's iterations (forward passes when accumulating).
    """
    if total_steps <= warmup_steps:
        raise ValueError(f"total_steps ({total_steps}) must exceed warmup_steps ({warmup_steps}).")
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
    warmup = min(recipe.warmup_steps, total_updates // 5)
    schedule = learning_rate_schedule(recipe.learning_rate, total_updates * accumulation,
                                      warmup * accumulation)
    common = {"learning_rate": schedule, "global_clipnorm": recipe.clipnorm,
              "gradient_accumulation_steps": accumulation if accumulation > 1 else None}
    if recipe.optimizer == "sgd":
        if recipe.weight_decay:
            common["weight_decay"] = recipe.weight_decay
        return optimizers.SGD(momentum=recipe.momentum, **common)
    if recipe.optimizer == "adamw":
        return optimizers.AdamW(weight_decay=recipe.weight_decay, beta_1=recipe.beta_1,
                                      beta_2=recipe.beta_2, **common)
    raise ValueError(f'Recipe optimizer must be "sgd" or "adamw", got {recipe.optimizer!r}.')


def _tf_config():
    return json.loads(os.environ.get("TF_CONFIG") or "{}")


def _multiworker_configured():
    cluster = _tf_config().get("cluster", {})
    return sum(len(cluster.get(job, [])) for job in ("chief", "worker")) > 1


def _tpu_configured():
    return bool(os.environ.get("TPU_NAME") or os.environ.get("COLAB_TPU_ADDR")
                or os.path.exists("/dev/accel0"))


def strategy_name(name="auto"):
    """What "auto" resolves to here; other names are checked and returned."""
    if name not in STRATEGIES:
        raise ValueError(f"strategy must be one of {STRATEGIES}, got {name!r}.")
    if name != "auto":
        return name
    if _tpu_configured():
        return "tpu"
    if _multiworker_configured():
        return "multiworker"
    if len(tf.config.list_logical_devices("GPU")) > 1:
        return "mirrored"
    return "none"


def get_strategy(name="auto"):
    """A tf.distribute strategy: "auto", "mirrored", "multiworker", "tpu" or "none".

    "auto" picks a TPU when one is configured (TPU_NAME, COLAB_TPU_ADDR or a
    TPU VM's /dev/accel0), MultiWorkerMirroredStrategy when TF_CONFIG lists
    several workers, MirroredStrategy with several GPUs, else the default.
    """
    name = strategy_name(name)
    if name == "none":
        return tf.distribute.get_strategy()
    if name == "mirrored":
        return tf.distribute.MirroredStrategy()
    if name == "multiworker":
        if not _multiworker_configured():
            raise ValueError('strategy "multiworker" needs TF_CONFIG describing the cluster, '
                             'e.g. {"cluster": {"worker": ["host1:12345", "host2:12345"]}, '
                             '"task": {"type": "worker", "index": 0}}.')
        return tf.distribute.MultiWorkerMirroredStrategy()
    try:
        resolver = tf.distribute.cluster_resolver.TPUClusterResolver(
            tpu=os.environ.get("TPU_NAME", ""))
        tf.config.experimental_connect_to_cluster(resolver)
        tf.tpu.experimental.initialize_tpu_system(resolver)
    except (ValueError, RuntimeError, tf.errors.OpError) as error:
        raise RuntimeError("No TPU could be resolved. TensorFlow has no TPU build for this "
                           "release; on TPUs run keras_vit on Keras' JAX backend "
                           "(see docs/fine-tuning.md).") from error
    return tf.distribute.TPUStrategy(resolver)


def _is_chief(strategy):
    if not isinstance(strategy, tf.distribute.MultiWorkerMirroredStrategy):
        return True
    task = _tf_config().get("task", {})
    has_chief = "chief" in _tf_config().get("cluster", {})
    return task.get("type") == "chief" or (not has_chief and task.get("index", 0) == 0)


def _worker_output(output, strategy):
    """Non-chief workers write to DIR/worker-<index> so that files never collide."""
    if _is_chief(strategy):
        return output
    task = _tf_config().get("task", {})
    return os.path.join(output, f"{task.get('type', 'worker')}-{task.get('index', 0)}")


def build_model(variant, weights, image_size, classes, dropout=0.0):
    """A ViT for `classes`; with weights, the pre-trained head is replaced by a zero one."""
    return ViT(variant, weights=weights, image_size=image_size, classes=classes,
               dropout=dropout)


def _resolve_variant(model):
    if isinstance(model, Variant):
        return model
    if model in ("demo", DEMO_VARIANT.name):
        return DEMO_VARIANT
    return get_variant(model)


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

    Args:
        dataset: "digits" (built in, offline), a folder of class sub-folders,
            or a TFDS name ("tf_flowers", "cifar10", ...).
        model: a variant name ("B/16"), a `Variant`, or "demo" (the tiny ViT).
            Defaults to "demo" for digits, else "B/16".
        weights: a catalogue tag or `.npz` path; defaults to "imagenet21k" for
            the fine-tuning recipe, None for training from scratch.
        recipe: "finetune" (default with weights) or "scratch" (default
            without), or a `Recipe`.
        image_size: overrides the recipe's resolution.
        batch_size: overrides the recipe's per-step (global) batch size.
        steps: overrides the recipe's length in weight updates; when given it
            wins over `epochs`.
        epochs: overrides the recipe's length in epochs.
        lr: overrides the recipe's peak learning rate.
        strategy: "auto", "mirrored", "multiworker", "tpu" or "none".
        precision: "float32", "mixed_bfloat16" or "mixed_float16".
        output: the run's folder. Re-running with the same folder resumes.

    Returns:
        The report dict that is also written to `output/report.json`.
    """
    if precision not in PRECISIONS:
        raise ValueError(f"precision must be one of {PRECISIONS}, got {precision!r}.")
    digits = dataset == "digits"
    model = model or ("demo" if digits else "B/16")
    variant = _resolve_variant(model)
    if recipe is None:
        recipe = ("finetune" if weights else "scratch") if digits else "finetune"
    if isinstance(recipe, str):
        recipe = DIGITS_RECIPE if digits and recipe == "scratch" else get_recipe(recipe)
    if weights is None and recipe.name == "finetune" and not digits:
        weights = "imagenet21k"
    overrides = {"image_size": image_size, "batch_size": batch_size, "learning_rate": lr}
    overrides = {k: v for k, v in overrides.items() if v is not None}
    if steps is not None:
        overrides.update(steps=steps, epochs=None)
    elif epochs is not None:
        overrides.update(epochs=epochs, steps=None)
    recipe = dataclasses.replace(recipe, **overrides)
    if recipe.steps is None and not recipe.epochs:
        raise ValueError("Give steps or epochs.")

    keras.utils.set_random_seed(seed)
    previous_policy = keras.mixed_precision.global_policy()
    keras.mixed_precision.set_global_policy(precision)
    try:
        return _run(dataset, variant, weights, recipe, strategy, precision, output, data_dir,
                    seed, verbose)
    finally:
        keras.mixed_precision.set_global_policy(previous_policy)


def _run(dataset, variant, weights, recipe, strategy, precision, output, data_dir, seed,
         verbose):
    strategy = get_strategy(strategy)
    output = _worker_output(output, strategy)
    os.makedirs(output, exist_ok=True)
    splits = datasets.load_dataset(dataset, data_dir=data_dir)
    accumulation = accumulation_steps(recipe.global_batch_size, recipe.batch_size)
    epochs, per_epoch, total_updates = _plan(recipe, splits.num_train, recipe.steps,
                                             recipe.epochs, accumulation)

    def one_hot(images, labels):
        return images, tf.one_hot(labels, splits.num_classes)

    image_size = recipe.image_size
    with strategy.scope():
        model = build_model(variant, weights, image_size, splits.num_classes, recipe.dropout)
        image_size = model.input_shape[1]
        optimizer = make_optimizer(recipe, total_updates, accumulation)
        model.compile(optimizer=optimizer,
                      loss=keras.losses.CategoricalCrossentropy(
                          from_logits=True, label_smoothing=recipe.label_smoothing),
                      metrics=["accuracy"])
    small = splits.num_train * image_size * image_size * 3 < 2**28  # fits in memory: cache
    train_data = datasets.make_pipeline(splits.train, image_size, recipe.batch_size, True,
                                        crop_area=recipe.crop_area, flip=recipe.flip,
                                        cache=small, seed=seed).map(one_hot)
    eval_data = datasets.make_pipeline(splits.test, image_size, recipe.batch_size, False,
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
                  validation_data=eval_data, callbacks=callbacks, verbose=verbose,
                  shuffle=False)  # the pipeline shuffles
    model.save(os.path.join(output, "model.keras"))

    from keras_vit import report  # noqa: PLC0415  (matplotlib only when reporting)

    logits = model.predict(eval_data.map(lambda x, y: x), verbose=0)
    labels = np.concatenate([y for _, y in splits.test.batch(1024).as_numpy_iterator()])
    summary = {
        "dataset": splits.name, "num_train": splits.num_train, "num_test": splits.num_test,
        "model": variant.name, "weights": weights, "image_size": image_size,
        "recipe": dataclasses.asdict(recipe), "strategy": type(strategy).__name__,
        "replicas": strategy.num_replicas_in_sync, "precision": precision,
        "epochs": epochs, "steps_per_epoch": per_epoch, "optimizer_updates": total_updates,
        "gradient_accumulation_steps": accumulation,
        "optimizer_iterations": int(keras.ops.convert_to_numpy(model.optimizer.iterations)),
        "parameters": model.count_params(),
    }
    return report.write_report(output, labels, np.argmax(logits, axis=-1), splits.class_names,
                               summary, skipped_files=splits.skipped_files)


def _best_logged(path, key):
    values = [float(row[key]) for row in _read_log(path) if row.get(key)]
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
            rows = _read_log(self.log_path)
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
            import shutil  # noqa: PLC0415

            shutil.rmtree(self.backup_dir, ignore_errors=True)
