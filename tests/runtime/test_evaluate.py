"""keras-vit evaluate and keras_vit.evaluate: the held-out split streamed through the model,
scored as train scores it."""

import csv
import json
import os

import numpy as np
import pytest
from PIL import Image

import keras_vit
from tests.export.test_export import tiny_classifier


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


def test_evaluate_a_folder_through_a_saved_model(tiny_saved_model, tmp_path):
    """A folder's held-out split, scored through the SavedModel's serve_bytes signature, agrees
    with the same model in Keras; ids are the files' paths. The SavedModel is the suite's one
    export of `tiny_classifier()` (tests/conftest.py); the Keras model is that model rebuilt."""
    rng = np.random.default_rng(0)
    names = [f"c{i}" for i in range(10)]
    for i in range(50):
        folder = tmp_path / "data" / names[i % 10]
        folder.mkdir(parents=True, exist_ok=True)
        Image.fromarray(rng.integers(0, 256, (32, 32, 3), dtype=np.uint8)).save(folder / f"{i}.png")
    model, served = tiny_classifier(), tiny_saved_model
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


def test_a_few_shot_probe_is_the_papers_probe_on_the_models_features(digits_run, cli, tmp_path):
    """`--few-shot 10` on the digits run's ViT: scores match scikit-learn's on its own
    predictions.csv, and its accuracy is the one `few_shot_linear_eval` gets from features
    that `pooled_features` computes here from the same images (another code path: Keras'
    predict on arrays this test prepares). Features computed two ways differ by float32
    rounding (about 1e-6 relative), which can flip only a prediction whose top two ridge
    scores are that close: at most one of 360 is allowed to differ. No threshold on the accuracy
    itself: the shared two-epoch run's quality varies (0.489 once against a guessed 0.5)."""
    import keras
    from sklearn.metrics import accuracy_score

    from keras_vit.analysis import few_shot_linear_eval, pooled_features
    from keras_vit.data import load_dataset
    from keras_vit.normalization import model_input
    from keras_vit.preprocessing import resize_image

    run, _ = digits_run
    out = tmp_path / "probe"
    result = cli(["evaluate", "--model", os.path.join(run, "model.keras"), "--dataset", "digits",
                  "--few-shot", "10", "--output", str(out)])
    assert result.returncode == 0, result.stderr
    report = json.loads((out / "report.json").read_text())
    assert report["few_shot_probe"]["shots"] == 10
    assert report["few_shot_probe"]["train_images"] == 100  # 10 of each of the 10 classes
    assert report["model"] == "ViT-demo_4"
    with open(out / "predictions.csv", newline="") as f:
        rows = list(csv.DictReader(f))
    assert "top1_score" in rows[0] and "top1_probability" not in rows[0]
    assert report["accuracy"] == pytest.approx(
        accuracy_score([r["label"] for r in rows], [r["predicted"] for r in rows]), abs=1e-12)

    model = keras.saving.load_model(os.path.join(run, "model.keras"))
    to_input, size = model_input(model), model.input_shape[1:3]
    splits = load_dataset("digits")

    def arrays(dataset):
        images, labels = zip(*dataset.as_numpy_iterator())
        grey = np.stack(images).astype("float32")  # (n, 8, 8, 1); the model reads RGB
        pixels = np.clip(resize_image(np.repeat(grey, 3, axis=-1), size), 0, 255)
        return pooled_features(model, to_input(np.asarray(pixels))), np.asarray(labels)

    train_features, train_labels = arrays(splits.train)
    test_features, test_labels = arrays(splits.test)
    expected = few_shot_linear_eval(train_features, train_labels, test_features, test_labels,
                                    shots=10, seed=0, num_classes=10)
    assert abs(report["accuracy"] - expected) <= 1 / 360 + 1e-12, (report["accuracy"], expected)
    # Example by example, not only in total: scored against the command's predictions as if they
    # were the labels, the probe here gets the fraction of the 360 on which the two paths agree.
    # Whatever the run's quality (it varies from run to run), the two paths must agree.
    assert [int(r["label"]) for r in rows] == list(test_labels)  # the same examples, in order
    agreement = few_shot_linear_eval(train_features, train_labels, test_features,
                                     np.asarray([int(r["predicted"]) for r in rows]),
                                     shots=10, seed=0, num_classes=10)
    assert agreement >= 1 - 1 / 360 - 1e-12, agreement


def test_a_few_shot_probe_of_a_saved_model_is_refused_in_one_line(cli, tmp_path):
    (tmp_path / "served").mkdir()
    result = cli(["evaluate", "--saved-model", str(tmp_path / "served"), "--dataset", "digits",
                  "--few-shot", "5", "--output", str(tmp_path / "out")])
    assert result.returncode == 2, result.stderr
    assert len(result.stderr.strip().splitlines()) == 1


def test_evaluation_has_its_own_module_and_inference_streams_only():
    """`keras_vit.evaluate` (and the few-shot probe) live in keras_vit.runtime.evaluation; inference.py
    keeps streaming prediction only."""
    from keras_vit.runtime import evaluation, inference

    assert keras_vit.evaluate is evaluation.evaluate
    assert not hasattr(inference, "evaluate") and not hasattr(inference, "_few_shot_probe")
    assert "evaluate" not in inference.__all__
