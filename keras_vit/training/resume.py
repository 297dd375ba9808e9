"""Resuming a run: the backup it resumes from, and the repair of what a kill left.

Every output of a run is written atomically (`keras_vit.atomic`), except
log.csv, which Keras' CSVLogger appends to, one row per epoch. So a kill at any
moment leaves, at worst: temporary files, a torn last row of log.csv, rows of
epochs whose backup was not written yet, and a `best.keras` that is older than
the newest backup. Before `fit`, `resume` repairs all of these, and reports
(never keeps) an output that is torn or unreadable anyway (a file damaged by
something else, or written by an older keras_vit), then rebuilds it:

- `model.keras`, `report.json`, `curves.png`, `confusion.png`: removed; the
  run writes them again when it ends.
- `best.keras`: rebuilt from the best state that can still be recovered: the
  newest backup, which is the best epoch's exact state when that epoch was the
  last one backed up; otherwise the message says which epoch's weights are lost.

The backup is `backup/epoch-<N>.weights.h5`: the model's and optimizer's
variables after epoch N, the epoch in the name so that weights and epoch are
written in one atomic step. The newest two are kept. Why not Keras'
`BackupAndRestore` (Keras 3.15): it writes the weights and the epoch as two
files, in place, so a kill between them resumes epoch N's weights as epoch N-1
(an epoch trained twice), and a torn epoch file raises a `ValueError` its
fallback to the previous backup does not catch. Restoring here, before `fit`
with `initial_epoch`, uses public APIs only.
"""

import csv
import io
import os
import re
import zipfile

import keras
import numpy as np

from keras_vit._support.files import MAX_IMAGE_BYTES, read_file, read_text
from keras_vit._support.json_files import read_json
from keras_vit.atomic import atomic_open, atomic_path, remove_temporaries
from keras_vit.errors import RunConflictError
from keras_vit.lora import merge_lora
from keras_vit.training.distillation import student_of

__all__ = ["resume", "Backup", "BestCheckpoint", "check_outputs"]

MONITOR = "val_accuracy"
BACKUPS_KEPT = 2
_BACKUP_NAME = re.compile(r"epoch-(\d+)\.weights\.h5$")
_PNG_END = b"\x00\x00\x00\x00IEND\xaeB`\x82"


def resume(model, output, say=print):
    """Prepares `output` for `fit`: returns (initial epoch, best-checkpoint threshold).

    Restores `model` (built, compiled) from the newest loadable backup, repairs
    log.csv to one row per epoch before it, removes torn outputs and rebuilds
    best.keras; `say` gets one line per repair that is not routine.
    """
    backup_dir = os.path.join(output, "backup")
    for folder in (output, backup_dir):
        left = remove_temporaries(folder)
        if left:
            say(f"keras_vit: removed {len(left)} partial file(s) a killed write left in {folder}: "
                f"{', '.join(left)}")
    for name, reason in check_outputs(output).items():
        say(f"keras_vit: {os.path.join(output, name)} is torn or unreadable ({reason}); "
            "rebuilding it.")
        os.remove(os.path.join(output, name))
    epoch = restore(model, backup_dir, say)
    rows = repair_log(os.path.join(output, "log.csv"), epoch, say)
    return epoch, _rebuild_best(model, output, epoch, rows, say)


def check_outputs(output):
    """{name: why} for the outputs in `output` that are not whole."""
    checks = {"best.keras": _check_keras, "model.keras": _check_keras,
              "report.json": _check_json, "curves.png": _check_png,
              "confusion.png": _check_png}
    torn = {}
    for name, check in checks.items():
        path = os.path.join(output, name)
        if os.path.exists(path):
            reason = check(path)
            if reason:
                torn[name] = reason
    return torn


def _check_keras(path):
    # A .keras file is a zip: a torn one has no central directory, or fails its CRCs.
    try:
        with zipfile.ZipFile(path) as archive:
            names = set(archive.namelist())
            bad = archive.testzip()
    except (OSError, zipfile.BadZipFile, EOFError) as error:
        return f"not a whole .keras zip: {error}"
    if bad is not None:
        return f"{bad} fails its checksum"
    missing = {"config.json", "model.weights.h5"} - names
    if missing:
        return f"lacks {', '.join(sorted(missing))}"
    return None


def _check_json(path):
    try:
        read_json(path, "a JSON file", RunConflictError)
    except (OSError, RunConflictError) as error:
        return f"not valid JSON: {error}"
    return None


def _check_png(path):
    data = read_file(path, "a PNG figure", RunConflictError, MAX_IMAGE_BYTES)
    if data[:8] != b"\x89PNG\r\n\x1a\n" or data[-len(_PNG_END):] != _PNG_END:
        return "not a whole PNG"
    return None


def backups(backup_dir):
    """[(epoch, path)] of the backups in `backup_dir`, oldest first."""
    if not os.path.isdir(backup_dir):
        return []
    found = [(int(m.group(1)), os.path.join(backup_dir, name))
             for name in os.listdir(backup_dir) if (m := _BACKUP_NAME.match(name))]
    return sorted(found)


def restore(model, backup_dir, say=print):
    """Loads the newest backup that loads into `model`; returns its epoch (0: none)."""
    found = backups(backup_dir)
    if not found:
        return 0
    if model.optimizer is not None and not model.optimizer.built:
        model.optimizer.build(model.trainable_variables)  # its variables are in the backup
    variables = list(model.variables) + list(getattr(model.optimizer, "variables", []))
    initial = [keras.ops.convert_to_numpy(v) for v in variables]
    for epoch, path in reversed(found):
        try:
            model.load_weights(path)
            return epoch
        except (OSError, ValueError) as error:
            say(f"keras_vit: the backup {path} does not load ({error}); trying an older one.")
    # A failed load may have assigned some variables: put every one back.
    for variable, value in zip(variables, initial):
        variable.assign(value)
    say(f"keras_vit: no backup in {backup_dir} loads; starting again from the first epoch.")
    return 0


def repair_log(path, epoch, say=print):
    """Keeps log.csv's rows of epochs before `epoch`, one each; returns them as dicts.

    A kill while CSVLogger appended leaves a torn last line (reported and
    dropped); rows from `epoch` on belong to epochs the backup did not keep
    (dropped silently: those epochs run again).
    """
    if not os.path.exists(path):
        return []
    text = read_text(path, "a run's log", RunConflictError)
    complete = text[:text.rfind("\n") + 1]
    if complete != text:
        say(f"keras_vit: the last line of {path} was torn by a kill while it was written; "
            "dropped it.")
    records = list(csv.reader(io.StringIO(complete, newline="")))
    if not records:
        kept, header = [], None
    else:
        header, seen, kept = records[0], set(), []
        for record in records[1:]:
            if len(record) != len(header) or not record[0].isdigit():
                say(f"keras_vit: dropped a malformed row of {path}: {','.join(record)}")
                continue
            row = dict(zip(header, record))
            number = int(row["epoch"])
            if number < epoch and number not in seen:
                seen.add(number)
                kept.append(row)
        missing = sorted(set(range(epoch)) - seen)
        if missing:
            say(f"keras_vit: {path} has no row for epoch(s) {', '.join(str(e + 1) for e in missing)}"
                " (the file was damaged); the backup kept their training.")
    if header is None or len(kept) != len(records) - 1 or complete != text:
        with atomic_open(path, "w", newline="") as f:
            if kept:  # an empty log stays empty, so CSVLogger writes the header
                writer = csv.DictWriter(f, fieldnames=header)
                writer.writeheader()
                writer.writerows(kept)
    return kept


def _rebuild_best(model, output, epoch, rows, say):
    """best.keras as of `epoch`; returns the value a later epoch must beat to replace it."""
    path = os.path.join(output, "best.keras")
    scores = [(int(r["epoch"]), float(r[MONITOR])) for r in rows if r.get(MONITOR)]
    if epoch == 0 or not scores or scores[-1][0] != epoch - 1:
        if os.path.exists(path) and epoch == 0:
            # From an attempt none of whose epochs was kept: it matches no logged epoch.
            os.remove(path)
        return max((s for _, s in scores), default=None)
    best_epoch, best = scores[int(np.argmax([s for _, s in scores]))]  # the first best, as fit
    last_epoch, last = scores[-1]
    if best_epoch == last_epoch:
        # The restored state is that epoch's: (re)writing it covers a kill between the
        # backup and best.keras, and a best.keras that was torn.
        save_model(model, path)
        return best
    if os.path.exists(path):
        return best
    say(f"keras_vit: the weights of the best epoch ({best_epoch + 1}, {MONITOR} {best:.4f}) are "
        f"lost with best.keras; it now holds epoch {last_epoch + 1} ({MONITOR} {last:.4f}), the "
        "best state left, until a later epoch does better.")
    save_model(model, path)
    return last


def save_model(model, path):
    """`model.save(path)`, atomically; a LoRA-trained model merged, so the file loads where
    nothing knows LoRA (keras_vit/lora.py); a distiller's student."""
    with atomic_path(path) as tmp:
        # A distilled run saves its student alone (the teacher stays where it was).
        merge_lora(student_of(model)).save(tmp)


class Backup(keras.callbacks.Callback):
    """Writes the model's and optimizer's variables after each epoch; keeps the newest two."""

    def __init__(self, backup_dir):
        super().__init__()
        self.backup_dir = backup_dir

    def on_epoch_end(self, epoch, logs=None):
        with atomic_path(os.path.join(self.backup_dir, f"epoch-{epoch + 1:05d}.weights.h5")) as tmp:
            self.model.save_weights(tmp)
        for _, old in backups(self.backup_dir)[:-BACKUPS_KEPT]:
            os.remove(old)


class BestCheckpoint(keras.callbacks.Callback):
    """Saves the model to `path` when `val_accuracy` beats `threshold` (atomically)."""

    def __init__(self, path, threshold=None):
        super().__init__()
        self.path = path
        self.threshold = threshold

    def on_epoch_end(self, epoch, logs=None):
        value = (logs or {}).get(MONITOR)
        if value is None:
            return
        value = float(value)
        if self.threshold is None or value > self.threshold:
            self.threshold = value
            save_model(self.model, self.path)
