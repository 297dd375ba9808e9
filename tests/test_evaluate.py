"""keras-vit evaluate and keras_vit.evaluate: the held-out split streamed through the model,
scored as train scores it."""

import csv
import json
import os

import numpy as np
import pytest
from PIL import Image

import keras_vit
from tests.test_export import tiny_classifier


def test_evaluate_digits_matches_train_and_scikit_learn(digits_run, cli, tmp_path):
    """The shared digits run's model.keras, evaluated on digits: the accuracy train reported
    for the same model and split; per-class scores equal scikit-learn's on predictions.csv."""
    from sklearn.metrics import classification_report

    run, _ = digits_run
    out = tmp_path / "eval"
    result = cli(["evaluate", "--model", os.path.join(run, "model.keras"), "--dataset", "digits",
                  "--output", str(out), "--batch-size", "64"])
    assert result.returncode == 0, result.stderr
    report = json.loads((out / "report.json").read_text())
    trained = json.loads(open(os.path.join(run, "report.json")).read())
    assert report["image_count"] == trained["num_test"] == 360
    assert report["accuracy"] == trained["accuracy"]
    assert report["class_names"] == trained["class_names"]
    assert set(report["per_class"]["0"]) == set(trained["per_class"]["0"])  # the same schema
    with open(out / "predictions.csv", newline="") as f:
        rows = list(csv.DictReader(f))
    assert len(rows) == 360 and [r["id"] for r in rows[:3]] == ["0", "1", "2"]
    names = report["class_names"]
    expected = classification_report([r["label"] for r in rows], [r["predicted"] for r in rows],
                                      labels=names, output_dict=True, zero_division=0)
    for name in names:
        for metric in ("precision", "recall", "f1"):
            assert report["per_class"][name][metric] == pytest.approx(
                expected[name][f"{metric}-score" if metric == "f1" else metric], abs=1e-12)
        assert report["per_class"][name]["support"] == expected[name]["support"]
    assert report["macro_avg"]["f1"] == pytest.approx(expected["macro avg"]["f1-score"], abs=1e-12)
    # Top-5: among the five classes predictions.csv lists, independently counted.
    top5 = np.mean([r["label"] in [r[f"top{i}_class"] for i in range(1, 6)] for r in rows])
    assert report["top5_accuracy"] == pytest.approx(top5) and report["top5_accuracy"] >= report["accuracy"]
    assert (out / "confusion.png").stat().st_size > 0
    assert result.stdout.startswith(f"accuracy {report['accuracy']:.4f}, top-5 ")


def test_evaluate_a_folder_through_a_saved_model(tmp_path):
    """A folder's held-out split, scored through the SavedModel's serve_bytes signature, agrees
    with the same model in Keras; ids are the files' paths."""
    from keras_vit.export import export_saved_model

    rng = np.random.default_rng(0)
    names = [f"c{i}" for i in range(10)]
    for i in range(50):
        folder = tmp_path / "data" / names[i % 10]
        folder.mkdir(parents=True, exist_ok=True)
        Image.fromarray(rng.integers(0, 256, (32, 32, 3), dtype=np.uint8)).save(folder / f"{i}.png")
    model = tiny_classifier(seed=1)
    served = export_saved_model(model, str(tmp_path / "served"))
    in_keras = keras_vit.evaluate(model, str(tmp_path / "data"), batch_size=3)
    in_serving = keras_vit.evaluate(served, str(tmp_path / "data"), output=str(tmp_path / "out"),
                                    batch_size=3)
    assert in_keras["image_count"] == in_serving["image_count"] == 10
    assert in_keras["confusion_matrix"] == in_serving["confusion_matrix"]
    with open(tmp_path / "out" / "predictions.csv", newline="") as f:
        ids = [r["id"] for r in csv.DictReader(f)]
    assert all(os.path.isfile(i) for i in ids) and len(ids) == 10
    with pytest.raises(keras_vit.DatasetError, match="The model has 3 classes but dataset"):
        keras_vit.evaluate(keras_vit.ViT("demo", image_size=32, classes=3), "digits")
