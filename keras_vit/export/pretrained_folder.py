"""save_pretrained: a keras_vit ViT as the folder timm shares models in (config.json,
model.safetensors, README.md), which `timm.create_model('local-dir:' + folder,
pretrained=True)`, a Hub repository and `keras_vit.from_pretrained(folder)` all load; or, for
the families transformers has a class of, as transformers' folder (export/transformers_folder.py).

    keras_vit.save_pretrained("runs/digits", "digits-vit")     # a run: its labels, report
    keras_vit.save_pretrained(model, "my-vit", labels=names)
"""

import json
import os

from keras_vit._support.json_files import read_json
from keras_vit.atomic import publish_folder, temporary_folder
from keras_vit.checkpoints.formats.npz_metadata import model_metadata
from keras_vit.checkpoints.formats.safetensors import write_safetensors
from keras_vit.checkpoints.formats.timm import save_safetensors
from keras_vit.errors import ArgumentError, PathExistsError, PathNotFoundError
from keras_vit.export.model_card import model_card, weights_licence
from keras_vit.export.timm_config import has_head, model_variant, timm_config
from keras_vit.export.transformers_folder import transformers_layout
from keras_vit.labels import read_labels

__all__ = ["save_pretrained", "run_folder_of"]


def run_folder_of(path):
    """The `keras-vit train` run folder a model path names (the folder, or its model.keras /
    best.keras), or None."""
    path = os.fspath(path)
    folder = path if os.path.isdir(path) else os.path.dirname(os.path.abspath(path))
    return folder if os.path.isfile(os.path.join(folder, "run.json")) else None


def save_pretrained(model, folder, labels=None, run=None, layout="timm", overwrite=False):
    """Writes `model` (a built ViT, or a run folder / .keras file) as a timm Hub folder, or
    transformers' folder.

    Args:
        model: a keras_vit ViT, or the path of a `.keras` file or a `keras-vit train` run's
            folder (whose labels.txt names the classes and whose report.json and run.json
            the model card quotes).
        folder: the folder to write; it appears whole or not at all.
        labels: class names (a list, or a file of one name a line); default: a run's labels.
        run: the run folder whose report.json and run.json the card quotes; default: the run
            a model path names.
        layout: "timm" (any plain ViT or family model) or "transformers" (ViT, DINOv2, SigLIP
            and CLIP towers, which transformers' AutoModel loads).
        overwrite: replace an existing folder (else it is refused).

    Returns the folder's path.
    """
    folder = os.fspath(folder)
    if os.path.lexists(folder) and not overwrite:
        raise PathExistsError(f"{folder} exists; give overwrite=True to replace it.")
    if layout not in ("timm", "transformers"):
        raise ArgumentError(f"layout must be 'timm' or 'transformers', got {layout!r}.")
    if isinstance(model, (str, os.PathLike)):
        from keras_vit.models.factory import load

        run = run if run is not None else run_folder_of(model)
        model = load(os.fspath(model))
    if run is not None and run_folder_of(run) is None:
        raise PathNotFoundError(f"{run} is no keras-vit train run folder (it has no run.json).")
    if isinstance(labels, (str, os.PathLike)):
        labels = read_labels(labels)
    elif labels is None and run is not None and os.path.isfile(os.path.join(run, "labels.txt")):
        labels = read_labels(os.path.join(run, "labels.txt"))
    if labels is not None and not all(isinstance(name, str) for name in labels):
        raise ArgumentError("labels must be class names (strings), one per class.")
    report, weights = _run_record(run)
    licence = weights_licence(weights)
    if layout == "timm":
        config = timm_config(model, labels, extra={"license": licence} if licence else None)
        files = {"config.json": config}
        cfg = config["pretrained_cfg"]
        title = f"{config['architecture']} ({config['num_classes']} classes)"
        built_with = ", ".join(f"{k}={v!r}" for k, v in config["model_args"].items())
        size, mean, std = cfg["input_size"][-1], cfg["mean"], cfg["std"]
        weights_file = lambda path: save_safetensors(model, path)  # noqa: E731
    else:
        config, processor, state = transformers_layout(
            model, model_variant(model), model_metadata(model), _classes(model, labels), labels)
        files = {"config.json": config, "preprocessor_config.json": processor}
        title, built_with = f"{config['architectures'][0]} ({config['model_type']})", None
        size, (mean, std) = config["image_size"], processor_mean_std(processor)
        weights_file = lambda path: write_safetensors(state, path, metadata={"format": "pt"})  # noqa: E731
    card = model_card(title, layout, size, mean, std, built_with, report, weights, licence)
    with temporary_folder(folder) as tmp:
        os.makedirs(tmp)
        weights_file(os.path.join(tmp, "model.safetensors"))
        for name, content in files.items():
            with open(os.path.join(tmp, name), "w", encoding="utf-8") as file:
                json.dump(content, file, indent=2)
        with open(os.path.join(tmp, "README.md"), "w", encoding="utf-8") as file:
            file.write(card)
        publish_folder(tmp, folder, replace=overwrite)
    return folder


def processor_mean_std(processor):
    return processor["image_mean"], processor["image_std"]


def _classes(model, labels):
    """The model's head's classes (0 without a head), checked against its label names."""
    classes = model.output_shape[-1] if has_head(model) else 0
    if labels is not None and len(labels) != classes:
        raise ArgumentError(f"{len(labels)} label names for a head of {classes} classes.")
    return classes


def _run_record(run):
    """(report.json, the weights the run started from) of a run folder; (None, None) without."""
    if run is None:
        return None, None
    report_path = os.path.join(run, "report.json")
    report = read_json(report_path, "a run's report", ArgumentError) \
        if os.path.isfile(report_path) else None
    record = read_json(os.path.join(run, "run.json"), "a run's run.json", ArgumentError)
    config = record.get("config") if isinstance(record, dict) else None
    weights = config.get("weights") if isinstance(config, dict) else None
    return report, weights if isinstance(weights, str) else None
