"""A run's folder: what `train` writes there (RUN_OUTPUTS), and the run.json it compares a
re-run with before anything is written (keras_vit/training/run.py has the layout).

run.json holds {"config": the configuration that decides the result (training/settings.py's
`run_config`), "split": the split record, "teacher": the loaded teacher, "finished"}; the
same configuration resumes or, when finished, returns the report; another is refused
(`RunConflictError`) unless the run is started again with overwrite.
"""

import contextlib
import csv
import io
import json
import os
import shutil
import tempfile

from keras_vit import reports as report
from keras_vit._support.files import read_text
from keras_vit._support.json_files import parse_json, read_json
from keras_vit.atomic import atomic_open
from keras_vit.errors import DatasetError, PathError, RunConflictError
from keras_vit.models.factory import RUN_FILE  # the run record a run folder is known by
from keras_vit.training import resume
from keras_vit.training.resume import check_outputs

__all__ = ["RUN_OUTPUTS", "RUN_FILE", "read_run_file", "check_previous_run", "check_split",
           "never_started", "delete_run", "write_json", "write_labels", "check_output",
           "output_folder"]

# What a run writes into its folder; --overwrite deletes these and nothing else, and in a
# folder without a keras_vit run's log.csv or run.json they belong to something else.
RUN_OUTPUTS = ("backup", "best.keras", "log.csv", "report.json", "curves.png", "confusion.png",
               "model.keras", "labels.txt", "run.json")


def _flatten(config, prefix=""):
    flat = {}
    for key, value in config.items():
        if isinstance(value, dict):
            flat.update(_flatten(value, f"{prefix}{key}."))
        else:
            flat[f"{prefix}{key}"] = value
    return flat


def read_run_file(output):
    path = os.path.join(output, RUN_FILE)
    if not os.path.exists(path):
        return None
    try:
        state = read_json(path, "a run record", RunConflictError)
        return state if isinstance(state.get("config"), dict) else None
    except (OSError, RunConflictError, AttributeError):
        return None


def check_previous_run(output, config):
    """None to go on (fresh or resumed); a finished run's report to stop. Writes nothing."""
    previous = read_run_file(output)
    if previous is not None and never_started(output, previous):
        return None  # a command refused or stopped before its first epoch: not a run
    if previous is None:
        check_output(output)  # files of something else than a keras_vit run: say which
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


def check_split(output, split):
    """Refuses to resume a run on other examples than it started on (a dataset folder whose
    files changed since): run.json's fingerprints against the data just loaded."""
    previous = read_run_file(output)
    if previous is None or never_started(output, previous):
        return
    recorded = previous.get("split", {}).get("fingerprints", {})
    changed = [f"{name} split {recorded.get(name)} -> {value}"
               for name, value in split["fingerprints"].items() if recorded.get(name) != value]
    if changed:
        raise RunConflictError(
            f"{output} holds a run on other examples ({'; '.join(changed)}: the dataset changed "
            "since); start a new run with --overwrite (deletes it) or another --output.")


def never_started(output, previous):
    """Whether `output`'s run.json is all its run left: no epoch logged, backed up or kept."""
    return (not previous.get("finished") and not resume.backups(os.path.join(output, "backup"))
            and not report.read_log(os.path.join(output, "log.csv"))
            and not any(os.path.exists(os.path.join(output, name))
                        for name in ("best.keras", "model.keras", "report.json")))


def delete_run(output):
    """Removes what a run writes (RUN_OUTPUTS), nothing else the folder holds."""
    for name in RUN_OUTPUTS:
        path = os.path.join(output, name)
        if os.path.isdir(path) and not os.path.islink(path):
            shutil.rmtree(path)
        elif os.path.lexists(path):
            os.unlink(path)


def write_json(path, value):
    with atomic_open(path) as f:  # a kill leaves the old file or the new one
        json.dump(value, f, indent=2)


def write_labels(path, class_names):
    names = [str(name) for name in class_names]
    bad = [name for name in names if "\n" in name or "\r" in name or not name]
    if bad:
        raise DatasetError(f"Class names must be non-empty single lines, got {bad[:3]!r}.")
    with atomic_open(path, encoding="utf-8") as f:
        f.write("".join(f"{name}\n" for name in names))


def check_output(output):
    """Refuses an output that is a file, or a folder holding outputs of something else."""
    if os.path.exists(output) and not os.path.isdir(output):
        raise RunConflictError(f"output {output!r} is a file; a run writes a folder of outputs there.")
    if not os.path.isdir(output):
        return
    if read_run_file(output) is not None:  # a keras_vit run's folder, checked by train()
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
def output_folder(output):
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
