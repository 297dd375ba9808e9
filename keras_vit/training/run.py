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
left before resuming (keras_vit/training/resume.py). The call's choices are one
`TrainSettings` (keras_vit/training/settings.py, which resolves them into the run and
its configuration); run.json and the folder's checks are keras_vit/training/run_folder.py's.
"""

import dataclasses
import math
import os
import time

import keras
import numpy as np
import tensorflow as tf

from keras_vit import reports as report
from keras_vit.data import load_dataset, make_pipeline
from keras_vit.data.augreg import Augmentation
from keras_vit.errors import (
    ArgumentTypeError,
    DatasetError,
    RunConflictError,
    TrainingDivergedError,
)
from keras_vit.layer_names import EMBEDDING, GRID, PATCHES
from keras_vit.layers import TransformerBlock
from keras_vit.memory import peak_memory
from keras_vit.models import ViT
from keras_vit.models.image_size import naflex_layout, stored_size
from keras_vit.normalization import OFFICIAL_NORMALIZATION, input_normalization
from keras_vit.runtime.execution import choose_jit_compile
from keras_vit.runtime.naflex_inputs import one_size_inputs
from keras_vit.training import resume
from keras_vit.training.distillation import check_teacher, load_teacher, make_distiller, student_of
from keras_vit.training.distribute import multi_worker_fit
from keras_vit.training.lora import enable_lora, parameter_counts
from keras_vit.training.placement import get_placement
from keras_vit.training.prebuild import build_training_state
from keras_vit.training.recipes import accumulation_steps, make_optimizer
from keras_vit.training.run_folder import (
    RUN_FILE,
    RUN_OUTPUTS,
    check_output,
    check_previous_run,
    check_split,
    delete_run,
    output_folder,
    write_json,
    write_labels,
)
from keras_vit.training.settings import TrainSettings, resolve
from keras_vit.training.transfer import backbone_weights
from keras_vit.variants import Variant

__all__ = ["train", "build_model", "TrainSettings", "RunConflictError", "RUN_OUTPUTS"]

MAX_EPOCHS_FOR_STEPS = 10  # a --steps run is cut into at most this many logged epochs
# Decoded examples up to this many bytes are cached in memory after the first epoch.
CACHE_BYTES = 2**28


def build_model(variant, weights, image_size, classes, dropout=0.0, drop_path_rate=0.0):
    """A ViT (or a BiT) for `classes`; with weights, the pre-trained head is replaced by a
    zero one. `weights` may also name a `.keras` file or an earlier run's folder: its
    backbone is kept and the head is always a new zero one (training/transfer.py)."""
    with backbone_weights(weights) as weights:
        if not isinstance(variant, Variant):  # a BiTVariant: BiT trains without dropout
            from keras_vit.models import BiT

            return BiT(variant, weights=weights, image_size=image_size, classes=classes)
        if variant.patch_input == "naflex" and weights is not None:
            # its position grid stays the weights'; train packs its images at any grid
            image_size = None
        model = ViT(variant, weights=weights, image_size=image_size, classes=classes,
                    dropout=dropout, drop_path_rate=drop_path_rate)
    # Trained through the pipeline (data/pipeline.py: its held-out batches stretched,
    # bilinear), the model is evaluated as it was trained, not as its weights' source crops.
    model.get_layer(EMBEDDING).input_preprocessing = None
    return model


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


def train(dataset=None, *, settings=None, **options):
    """Trains (or fine-tunes) a ViT and writes every output into `output`.

    Takes the options below as keyword arguments, or `settings`, a `TrainSettings` holding
    them (keyword arguments given beside it replace its fields).

    Defaults come from the dataset's preset (`keras_vit.data.PRESETS`): digits
    trains the tiny "demo" ViT from scratch; other datasets fine-tune ViT-B/16
    from ImageNet-21k.

    Args:
        dataset: "digits" (built in, offline), a folder of class sub-folders,
            or a TFDS name ("tf_flowers", "cifar10", ...).
        settings: a `TrainSettings`, or None for the keyword arguments alone.

    Keyword Args:
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
        precision: "float32", "bfloat16" or "float16" (keras_vit.runtime.precision's
            names; Keras' "mixed_bfloat16" and "mixed_float16" are taken too): the
            policy the run computes under.
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
            timed once and remembered: `keras_vit.runtime.execution`), "graph" or "xla".
            How, not what: it is not part of the run's configuration.
        remat: gradient checkpointing: each encoder block keeps only its input for the
            backward pass, which recomputes the rest (the same gradients, dropout and drop
            path masks included; less memory, about a third more compute): for a model or
            batch that does not fit. How, not what: not part of the run's configuration.
        drop_path: stochastic depth rate of the last block (ViT's blocks rise
            linearly from 0 to it; `keras_vit.ViT(drop_path_rate=)`); BiT has none.
        augment: an AugReg setting by its paper name ("none", "light1",
            "light2", "medium1", "medium2", "strong1", "strong2":
            `keras_vit.data.augreg.AUGREG`): RandAugment and MixUp, in the
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
    if settings is None:
        settings = TrainSettings(**options)
    elif not isinstance(settings, TrainSettings):
        raise ArgumentTypeError(f"settings must be a TrainSettings, got {type(settings).__name__}.")
    elif options:
        settings = dataclasses.replace(settings, **options)
    if dataset is not None:
        settings = dataclasses.replace(settings, dataset=dataset)
    run, config = resolve(settings)
    finished = None if settings.overwrite else check_previous_run(run.output, config)
    if finished is not None:
        return finished

    keras.utils.set_random_seed(run.seed)
    previous_policy = keras.mixed_precision.global_policy()
    keras.mixed_precision.set_global_policy(run.precision)
    try:
        return _fit_and_report(run, config, settings.overwrite)
    finally:
        keras.mixed_precision.set_global_policy(previous_policy)


def _fit_and_report(run, config, overwrite):
    """Checks every argument (the data, the placement, the model and its weights) before
    writing anything to the output: a refused call leaves the folder as it was."""
    placement = get_placement(run.strategy, run.variant)
    output = placement.worker_output(run.output)
    if not overwrite:
        check_output(output)
    splits = load_dataset(run.dataset, data_dir=run.data_dir,
                          validation_fraction=run.validation_fraction,
                          validation_seed=run.validation_seed)
    if splits.num_classes < 2:
        raise DatasetError(f"Dataset {run.dataset!r} has one class ({splits.class_names[0]!r}); "
                           "a classifier needs at least two.")
    if not overwrite:
        check_split(output, splits.split)
    model, plan = _compiled_model(run, placement, splits)
    if overwrite:
        delete_run(output)
    with output_folder(output):
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
        for block in (layer for layer in model._flatten_layers() if isinstance(layer, TransformerBlock)):
            block.remat = run.remat
        jit_compile = choose_jit_compile(model, _batch_shape(model, recipe), run.execution,
                                         training=True)
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


def _pixel_size(model, recipe):
    """(height, width) of the images train's pipeline gives `model`: its input's; for a NaFlex
    model, which takes patches at any grid, the recipe's size, else its stored grid's."""
    if naflex_layout(model) is None:
        return tuple(model.input_shape[1:3])
    return (recipe.image_size,) * 2 if recipe.image_size else stored_size(model)


def _batch_shape(model, recipe):
    """The shape of a training batch `model` takes (a NaFlex model's: its patches and grid)."""
    layout = naflex_layout(model)
    if layout is None:
        return (recipe.batch_size, *model.input_shape[1:])
    patch, (height, width) = layout[0], _pixel_size(model, recipe)
    values = model.get_layer(EMBEDDING).channels * patch * patch
    return {PATCHES: (recipe.batch_size, (height // patch) * (width // patch), values),
            GRID: (recipe.batch_size, 2)}


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


def _fit_in(output, run, placement, splits, config, model, plan):
    # Recorded before the first epoch, so a killed run is recognised when its command comes again.
    # The teacher as loaded (its architecture and classes) beside the config's record of it.
    teacher = _teacher_report(model, run.teacher)
    extra = {} if teacher is None else {"teacher": teacher}
    write_json(os.path.join(output, RUN_FILE), {"config": config, "split": splits.split,
                                                 **extra, "finished": False})
    recipe = run.recipe
    epochs, per_epoch, total_updates, accumulation = plan
    student = student_of(model)  # what a distilled run saves and scores; else the model
    height, width = _pixel_size(student, recipe)
    image_size = height if height == width else [height, width]
    inputs = one_size_inputs(student)

    def one_hot(images, labels):
        return inputs(images), tf.one_hot(labels, splits.num_classes)
    # Decided by what the cache would hold, the decoded images at their own size (a folder
    # of photos is cached before its resize): unknown sizes are not cached.
    sizes = (splits.train_bytes, splits.validation_bytes, splits.test_bytes)
    small = None not in sizes and sum(sizes) < CACHE_BYTES
    # The pixels the model's weights expect ([-1, 1], or their source's mean/std).
    normalization = input_normalization(student)
    normalization = None if normalization == OFFICIAL_NORMALIZATION else normalization
    augmentation = Augmentation(recipe.randaugment, recipe.mixup, recipe.cutmix)
    train_data = make_pipeline(splits.train, (height, width), recipe.batch_size, True,
                               crop_area=recipe.crop_area, flip=recipe.flip, cache=small,
                               seed=run.seed, normalization=normalization,
                               augmentation=augmentation, num_classes=splits.num_classes)
    train_data = train_data.map(lambda images, labels: (inputs(images), labels))
    # Validation data chooses best.keras (the val_* of log.csv); the test split is only read
    # for the final report, after fit, so no choice of the run has seen it.
    validation_data = make_pipeline(splits.validation, (height, width), recipe.batch_size,
                                    False, cache=small, normalization=normalization).map(one_hot)
    test_images = make_pipeline(splits.test, (height, width), recipe.batch_size, False,
                                normalization=normalization).map(lambda x, y: inputs(x))

    log_path = os.path.join(output, "log.csv")
    with placement.scope():  # the optimizer's variables are built where fit builds them
        initial_epoch, best_so_far = resume.resume(model, output)
        build_training_state(model)
    step_timer = _StepTimer()
    callbacks = [
        # First: a batch whose loss is not finite ends fit before any callback saves its
        # weights, so the backup and best.keras keep the last finite epoch.
        _StopOnNonFiniteLoss(),
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
    write_labels(os.path.join(output, "labels.txt"), splits.class_names)
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
    write_json(os.path.join(output, RUN_FILE), {"config": config, "split": splits.split,
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


class _StopOnNonFiniteLoss(keras.callbacks.Callback):
    """Raises TrainingDivergedError at the first training batch whose loss is NaN or
    infinite (Keras' TerminateOnNaN only stops fit, after which the run would report)."""

    def on_epoch_begin(self, epoch, logs=None):
        self._epoch = epoch

    def on_train_batch_end(self, batch, logs=None):
        loss = (logs or {}).get("loss")
        if loss is not None and not math.isfinite(float(loss)):
            raise TrainingDivergedError(
                f"the training loss became {float(loss)} at epoch {self._epoch + 1}, batch "
                f"{batch + 1}; training stopped there and the run is not finished (its backup "
                "holds the last finite epoch): lower the learning rate, or check the data and "
                "the augmentation.")


class _EpochExtras(keras.callbacks.Callback):
    """Adds `learning_rate` and `seconds` to each epoch's logs."""

    def on_epoch_begin(self, epoch, logs=None):
        self._start = time.perf_counter()

    def on_epoch_end(self, epoch, logs=None):
        if logs is not None:
            optimizer = self.model.optimizer
            logs["learning_rate"] = float(keras.ops.convert_to_numpy(optimizer.learning_rate))
            logs["seconds"] = time.perf_counter() - self._start
