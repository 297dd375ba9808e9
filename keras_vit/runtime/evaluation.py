"""Evaluation: a model on a dataset's held-out split (`evaluate`), by its head or by the
paper's few-shot linear probe on its frozen features.

The split streams through `keras_vit.runtime.inference`'s runners (the same decode, batching and
execution as `predict_images`); the result is a report.json of `keras_vit.reports`' schema,
which `compare` reads beside a training run's.
"""

import os

import numpy as np

from keras_vit.errors import ArgumentError, DatasetError
from keras_vit.preprocessing import MAX_PIXELS
from keras_vit.reports import classification_summary, plot_confusion, write_json
from keras_vit.runtime.execution import check_execution
from keras_vit.runtime.precision import check_precision
from keras_vit.runtime.runners import DEFAULT_BATCH_SIZE, KerasRunner, check_positive, model_runner

__all__ = ["evaluate"]


def evaluate(model, dataset, output=None, batch_size=DEFAULT_BATCH_SIZE, top=5, data_dir=None,
             few_shot=None, few_shot_seed=0, execution=None, precision=None, resize=None,
             max_tokens=None):
    """Accuracy and per-class precision, recall and F1 of `model` on `dataset`'s held-out split.

    `model` as for `predict_images`; `dataset`: "digits", a folder of class sub-folders or a
    TFDS name (`keras_vit.load_dataset`), or the `DatasetSplits` it returns, whose held-out
    split (the one `train` reports on) is streamed through the model `batch_size` images at a
    time. Returns the report (the schema of a training run's report.json: accuracy,
    per_class, macro_avg, confusion_matrix, class_names; plus top5_accuracy for more than 5
    classes and image_count). With `output` (a folder): writes report.json, predictions.csv
    (one row per image: id, label, predicted, the `top` classes and probabilities) and
    confusion.png there.

    `few_shot=K` scores the paper's few-shot linear probe instead of the model's head: a
    closed-form ridge regression (`keras_vit.analysis.fit_linear_probe`) from the frozen
    model's pooled features to the classes, fitted on K training examples of each class
    (drawn with `few_shot_seed`), then applied to the held-out split; predictions.csv then
    holds the probe's scores, not probabilities. A Keras ViT only (a SavedModel keeps no
    features). `execution` as for `predict_images`.

    `precision`: "float32" (the default), "bfloat16" or "auto", as for `predict_images`; the
    report's "precision" records it, and under bfloat16 every evaluated image also runs in
    float32: "precision.agreement" holds their top-1 agreement and largest logit difference.
    `resize` as for `predict_images`; the report's "preprocessing" records the resize used.
    `max_tokens`: a NaFlex model's sequence budget, as for `predict_images`.
    """
    from keras_vit.data import DatasetSplits, load_dataset

    check_positive(batch_size=batch_size, top=top)
    check_execution(execution)
    check_precision(precision)
    splits = dataset if isinstance(dataset, DatasetSplits) else load_dataset(dataset,
                                                                             data_dir=data_dir)
    name = splits.name or str(dataset)
    runner = model_runner(model, batch_size, MAX_PIXELS, execution=execution,
                          images=splits.num_test, precision=precision, resize=resize,
                          max_tokens=max_tokens)
    probe = None
    if few_shot is not None:
        check_positive(few_shot=few_shot)
        runner, probe = _few_shot_probe(runner, splits, few_shot, few_shot_seed, batch_size)
    elif runner.classes != splits.num_classes:
        raise DatasetError(f"The model has {runner.classes} classes but dataset {name!r} has "
                           f"{splits.num_classes}; evaluate it on the dataset it was trained for.")
    names = splits.class_names
    ids, labels, results = _run_split(runner, splits.test)
    rows, skipped = [], list(splits.skipped_files)
    for item_id, label, (outputs, error) in zip(ids, labels, results):
        if error is not None:
            skipped.append(item_id)
        else:
            rows.append((item_id, label, outputs))
    if not rows:
        raise DatasetError(f"No image of dataset {name!r}'s held-out split could be read.")
    if probe is not None:
        scores = probe.pop("fitted").predict(np.stack([o for _, _, o in rows]))
        rows = [(item_id, label, row) for (item_id, label, _), row in zip(rows, scores)]
    report = _report(rows, names, name, skipped, _test_split_record(splits))
    model_name = getattr(getattr(runner, "model", None), "name", None)
    report["model"] = model_name.removesuffix("_features") if model_name else None
    if probe is not None:
        report["few_shot_probe"] = probe
    if getattr(runner, "precision_record", None) is not None:
        report["precision"] = runner.precision_record
    if getattr(runner, "preprocessing", None) is not None:
        report["preprocessing"] = runner.preprocessing.to_config()
    if output is not None:
        _write_evaluation(output, report, rows, names, top,
                          score="probability" if probe is None else "score")
    return report


def _run_split(runner, examples):
    """(ids, labels, results) of a split: a folder's files by path, in-memory examples (digits,
    TFDS) by their index in the split."""
    if examples.element_spec[0].dtype.name == "string":  # a folder's files
        items = [(os.fsdecode(p), int(y)) for p, y in examples.as_numpy_iterator()]
        paths = [path for path, _ in items]
        return paths, [y for _, y in items], runner.run_files(paths)
    labels = [int(y) for _, y in examples.as_numpy_iterator()]
    return [str(i) for i in range(len(labels))], labels, runner.run_examples(examples)


def _few_shot_probe(runner, splits, shots, seed, batch_size):
    """(a runner giving the model's pooled features, the probe's record with the fitted
    ridge regression under "fitted"): fitted on `shots` training examples of each class."""
    import tensorflow as tf

    from keras_vit.analysis.few_shot import few_shot_indices, fit_linear_probe
    from keras_vit.analysis.probe import feature_model

    if not isinstance(runner, KerasRunner):
        raise ArgumentError("few_shot needs a Keras model: the probe reads the model's pooled "
                            "features, which a SavedModel does not keep.")
    features = KerasRunner(feature_model(runner.model), batch_size, runner.max_pixels,
                            outputs="raw", execution=runner.execution, images=splits.num_test,
                            precision=runner.precision, resize=runner.resize)
    labels = np.asarray([int(y) for _, y in splits.train.as_numpy_iterator()])
    chosen = few_shot_indices(labels, shots, seed, splits.class_names)
    keep = np.zeros(len(labels), bool)
    keep[chosen] = True
    keep = tf.constant(keep)
    train = splits.train.enumerate().filter(lambda i, example: keep[i]) \
        .map(lambda i, example: example)
    _, train_labels, results = _run_split(features, train)
    pairs = [(outputs, label) for (outputs, error), label in zip(results, train_labels)
             if error is None]
    if len(pairs) < len(chosen):
        raise DatasetError(f"{len(chosen) - len(pairs)} of the {len(chosen)} few-shot training "
                           "images could not be read; fix or remove them.")
    fitted = fit_linear_probe(np.stack([o for o, _ in pairs]), [y for _, y in pairs],
                              num_classes=splits.num_classes)
    return features, {"shots": shots, "seed": seed, "train_images": len(pairs),
                      "l2_regularization": 1.0, "features": features.model.layers[-1].name,
                      "fitted": fitted}


def _test_split_record(splits):
    """The split record of the examples evaluated: the test split alone, whose fingerprint
    `compare` checks against a training run's (keras_vit.analysis.compare)."""
    record = splits.split or {}
    fingerprints = record.get("fingerprints", {})
    return {"evaluated": "test", "test": record.get("test"),
            "sizes": {"test": record.get("sizes", {}).get("test")},
            "fingerprints": {"test": fingerprints["test"]} if "test" in fingerprints else {}}


def _top(scores, k):
    """The indices of the `k` highest `scores`, highest first (ties: the lower index first),
    without sorting every class: 10,000 classes need no full sort per image."""
    if k >= len(scores):
        return np.argsort(-scores, kind="stable")
    kept = np.argpartition(-scores, k - 1)[:k]
    # argpartition keeps k, but not which of several equal k-th scores: keep the lowest indices.
    threshold = scores[kept].min()
    kept = np.concatenate([np.flatnonzero(scores > threshold),
                           np.flatnonzero(scores == threshold)])[:k]
    return kept[np.lexsort((kept, -scores[kept]))]


def _report(rows, names, dataset, skipped, split):
    # Row by row: a (images, classes) stack of 50,000 images of 10,000 classes is 2 GB.
    labels = np.asarray([label for _, label, _ in rows])
    report = {"dataset": dataset, "split": split, "image_count": len(rows),
              **classification_summary(labels, [int(np.argmax(p)) for _, _, p in rows], names)}
    if len(names) > 5:
        report["top5_accuracy"] = float(np.mean([label in _top(p, 5) for _, label, p in rows]))
    report["skipped_files"] = {"count": len(skipped), "files": skipped}
    return report


def _write_evaluation(output, report, rows, names, top, score="probability"):
    from keras_vit._support.outputs import csv_file

    os.makedirs(output, exist_ok=True)
    write_json(output, report)
    k = min(top, len(names))
    header = ["id", "label", "predicted", *[f"top{i}_{what}" for i in range(1, k + 1)
                                            for what in ("class", score)]]
    with csv_file(os.path.join(output, "predictions.csv"), header) as write_row:
        for item_id, label, probabilities in rows:
            best = _top(probabilities, k)
            write_row([item_id, names[label], names[best[0]],
                       *[value for i in best for value in (names[i], float(probabilities[i]))]])
    plot_confusion(report["confusion_matrix"], names, os.path.join(output, "confusion.png"))
