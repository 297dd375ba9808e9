"""Train, validation, test: the validation split is carved from the training examples
(stratified, seeded, disjoint from the test split, fingerprinted in run.json), best.keras
is chosen on it, and a resumed run must find the same split."""

import collections
import dataclasses
import hashlib
import json
import os
import shutil

import keras
import numpy as np
import pytest
from PIL import Image

from keras_vit import data
from keras_vit.errors import DatasetError, RunConflictError
from keras_vit.training import run


def examples(dataset):
    """A split's examples as a multiset of (image bytes, label)."""
    return collections.Counter((np.asarray(x).tobytes(), int(y))
                               for x, y in dataset.as_numpy_iterator())


def test_digits_validation_split_is_stratified_seeded_and_disjoint_from_test():
    plain = data.load_digits()
    carved = data.load_digits(validation_fraction=0.1, validation_seed=0)
    again = data.load_digits(validation_fraction=0.1, validation_seed=0)
    other = data.load_digits(validation_fraction=0.1, validation_seed=1)
    train, validation, test = (examples(carved.train), examples(carved.validation),
                               examples(carved.test))
    # Carved from the training examples: together they are the uncarved training split, and
    # the test split is the same one, untouched by the fraction and the seed.
    assert train + validation == examples(plain.train)
    assert test == examples(plain.test) == examples(other.test)
    assert not (set(validation) & set(test)) and not (set(train) & set(validation))
    assert (carved.num_train, carved.num_validation, carved.num_test) == (1293, 144, 360)
    assert sum(train.values()) == 1293 and sum(validation.values()) == 144
    # Stratified: each class's share of the validation split is its share of the training
    # examples (to one image: 144 / 10 classes rounds either way).
    train_counts = np.bincount([y for _, y in plain.train.as_numpy_iterator()], minlength=10)
    val_counts = np.bincount([y for _, y in carved.validation.as_numpy_iterator()], minlength=10)
    np.testing.assert_allclose(val_counts, train_counts * 144 / 1437, atol=1)
    # Seeded: the same seed draws the same examples, another seed others.
    assert examples(again.validation) == validation
    assert examples(other.validation) != validation
    record, other_record = carved.split, other.split
    assert record["validation_fraction"] == 0.1 and record["validation_seed"] == 0
    assert record["sizes"] == {"train": 1293, "validation": 144, "test": 360}
    assert record == again.split
    assert other_record["fingerprints"]["test"] == record["fingerprints"]["test"] \
        == plain.split["fingerprints"]["test"]
    assert other_record["fingerprints"]["validation"] != record["fingerprints"]["validation"]
    assert "validation" not in plain.split["fingerprints"]


def write_unique_folder(root, per_class=(20, 20, 20)):
    """PNGs whose pixels differ in every file, so an example's bytes name its path."""
    rng = np.random.default_rng(0)
    by_bytes = {}
    for c, count in enumerate(per_class):
        os.makedirs(os.path.join(root, f"class{c}"))
        for i in range(count):
            pixels = rng.integers(0, 256, (8, 8, 3), dtype=np.uint8)
            path = os.path.join(root, f"class{c}", f"{i:02d}.png")
            Image.fromarray(pixels).save(path)
            with open(path, "rb") as f:
                by_bytes[f.read()] = f"class{c}/{i:02d}.png"
    return by_bytes


def test_folder_split_fingerprints_are_the_sorted_paths_of_each_split(tmp_path):
    """The fingerprint, recomputed here with hashlib from the paths each split yields."""
    by_bytes = write_unique_folder(str(tmp_path / "data"))
    splits = data.load_image_folder(str(tmp_path / "data"), validation_fraction=0.25,
                                    validation_seed=3)
    root = str(tmp_path / "data")  # a folder split yields each file's path
    paths = {name: sorted(os.path.relpath(x.decode(), root).replace(os.sep, "/")
                          for x, _ in getattr(splits, name).as_numpy_iterator())
             for name in ("train", "validation", "test")}
    assert [len(p) for p in paths.values()] == [36, 12, 12]  # 60 images: 20% test, 25% of 48
    assert set(paths["train"]) | set(paths["validation"]) | set(paths["test"]) == set(
        by_bytes.values())
    assert not set(paths["validation"]) & (set(paths["test"]) | set(paths["train"]))
    for name, kept in paths.items():
        # Stratified: 12 validation images, 4 of each class; test likewise.
        if name != "train":
            assert collections.Counter(p.split("/")[0] for p in kept) == {
                "class0": 4, "class1": 4, "class2": 4}
        expected = hashlib.sha256("\n".join(kept).encode()).hexdigest()[:16]
        assert splits.split["fingerprints"][name] == expected, name
    # A moved copy of the folder splits and fingerprints alike.
    shutil.copytree(tmp_path / "data", tmp_path / "moved")
    moved = data.load_image_folder(str(tmp_path / "moved"), validation_fraction=0.25,
                                   validation_seed=3)
    assert moved.split == splits.split


def test_a_small_folder_validates_on_every_class_or_is_refused(tmp_path):
    """10% of 12 training images is 2, fewer than the 3 classes: one image of each is held
    back instead. A class left with one training image cannot be on both sides: refused."""
    write_unique_folder(str(tmp_path / "small"), per_class=(5, 5, 5))  # 12 training images
    splits = data.load_image_folder(str(tmp_path / "small"), validation_fraction=0.1)
    assert sorted(y for _, y in splits.validation.as_numpy_iterator()) == [0, 1, 2]
    assert splits.num_train == 9
    # 22 images: the stratified 20% test split takes one of class0's two.
    write_unique_folder(str(tmp_path / "rare"), per_class=(2, 10, 10))
    with pytest.raises(DatasetError, match=r"\(the rarest 1\): a stratified validation split "
                                           "needs one image of each class on each side"):
        data.load_image_folder(str(tmp_path / "rare"), validation_fraction=0.1)


def test_run_json_and_report_record_the_split(digits_run):
    """The shared digits run (tests/conftest.py): run.json and report.json name the split,
    and best.keras' epoch is log.csv's best val_accuracy (first best, as Keras keeps it)."""
    output = digits_run[0]
    with open(os.path.join(output, "run.json")) as f:
        state = json.load(f)
    with open(os.path.join(output, "report.json")) as f:
        report = json.load(f)
    expected = data.load_digits(validation_fraction=0.1, validation_seed=0).split
    assert state["config"]["split"] == {"validation_fraction": 0.1, "validation_seed": 0}
    assert state["split"] == report["split"] == expected
    assert (report["num_train"], report["num_validation"], report["num_test"]) == (1293, 144, 360)
    assert report["evaluated"]["split"] == "test"
    assert sum(map(sum, report["confusion_matrix"])) == 360  # the test split's images
    log = run.report.read_log(os.path.join(output, "log.csv"))
    scores = [float(row["val_accuracy"]) for row in log]
    assert report["best_checkpoint"]["chosen_on"] == "validation"
    assert report["best_checkpoint"]["epoch"] == int(np.argmax(scores)) + 1
    # val_accuracy is measured on 144 images: a multiple of 1/144.
    assert all(abs(s * 144 - round(s * 144)) < 1e-3 for s in scores)


def accuracy(model, dataset):
    images = data.make_pipeline(dataset, 16, 256, training=False)
    predictions = np.argmax(model.predict(images.map(lambda x, y: x), verbose=0), axis=-1)
    labels = np.concatenate([y for _, y in dataset.batch(4096).as_numpy_iterator()])
    return float(np.mean(predictions == labels))


@pytest.mark.slow  # a 4-epoch run; tests/training/test_run.py's short run checks best.keras by default
def test_best_keras_is_chosen_on_validation_data_not_on_test(tmp_path, monkeypatch):
    """A planted run where validation and test disagree: the validation split holds the test
    images (and its own) labelled with the next digit, so the better the model gets on test,
    the worse it does on validation, and a best.keras chosen on test would be another epoch's.
    What is asserted holds for any run, whatever it learnt (no bound on its quality): best.keras
    is the epoch log.csv gives the highest validation accuracy, and it scores exactly that on the
    validation split; the report's accuracy is the final model's on test."""
    def planted(source, data_dir=None, validation_fraction=0.0, validation_seed=0):
        splits = data.load_digits(validation_fraction, validation_seed)
        splits.validation = splits.validation.concatenate(splits.test).map(
            lambda x, y: (x, (y + 1) % 10))
        splits.num_validation += splits.num_test
        return splits

    monkeypatch.setattr(run, "load_dataset", planted)
    # No warmup, so that the first epoch already learns (the preset warms up over 44 steps):
    # then the epochs differ on validation, and differ the other way on test.
    digits = data.PRESETS["digits"]
    no_warmup = {"scratch": {**digits.overrides("scratch"), "warmup_steps": 0}}
    monkeypatch.setitem(data.PRESETS, "digits",
                        dataclasses.replace(digits, recipe_overrides=no_warmup))
    output = str(tmp_path / "run")
    report = run.train("digits", epochs=4, output=output, verbose=0)
    val_scores = [float(r["val_accuracy"]) for r in run.report.read_log(
        os.path.join(output, "log.csv"))]
    assert len(val_scores) == 4
    # The first of equal scores, as Keras' ModelCheckpoint keeps the first (it saves on "> best").
    assert report["best_checkpoint"]["epoch"] == int(np.argmax(val_scores)) + 1, val_scores
    splits = planted("digits", validation_fraction=0.1)
    best = keras.saving.load_model(os.path.join(output, "best.keras"))
    final = keras.saving.load_model(os.path.join(output, "model.keras"))
    # best.keras scores what log.csv says the validation-best epoch scored on validation, and
    # model.keras what the last epoch scored: the logged scores are of these very models.
    assert accuracy(best, splits.validation) == pytest.approx(max(val_scores), abs=1e-6)
    assert accuracy(final, splits.validation) == pytest.approx(val_scores[-1], abs=1e-6)
    assert report["accuracy"] == pytest.approx(accuracy(final, splits.test), abs=1e-9)


def test_a_resumed_run_on_other_examples_or_another_split_seed_is_refused(digits_run, tmp_path):
    """Checked before anything is written: another --validation-seed differs in run.json's
    configuration; a dataset whose examples changed differs in the fingerprints."""
    output = str(tmp_path / "run")
    shutil.copytree(digits_run[0], output)
    with pytest.raises(RunConflictError, match=r"split.validation_seed 0 -> 1"):
        run.train("digits", epochs=2, output=output, verbose=0, validation_seed=1)
    path = os.path.join(output, "run.json")
    with open(path) as f:
        state = json.load(f)
    state["split"]["fingerprints"]["validation"] = "0123456789abcdef"
    state["finished"] = False  # a killed run, resumed on a dataset that changed since
    with open(path, "w") as f:
        json.dump(state, f)
    before = {name: os.path.getmtime(os.path.join(output, name)) for name in os.listdir(output)}
    with pytest.raises(RunConflictError, match="validation split 0123456789abcdef -> "):
        run.train("digits", epochs=2, output=output, verbose=0)
    assert {name: os.path.getmtime(os.path.join(output, name))
            for name in os.listdir(output)} == before


def test_tfds_validation_split_is_carved_from_train_by_index(tmp_path):
    """A TFDS dataset prepared here (no download): 60 examples of 3 classes in "train" only,
    so the test split is train[80%:]. Each example's id is "train/<index as TFDS reads it>"."""
    import tensorflow_datasets as tfds

    class TinySplitsDataset(tfds.core.GeneratorBasedBuilder):
        VERSION = tfds.core.Version("1.0.0")

        def _info(self):
            return self.dataset_info_from_configs(
                features=tfds.features.FeaturesDict({
                    "image": tfds.features.Image(shape=(8, 8, 3)),
                    "label": tfds.features.ClassLabel(names=["a", "b", "c"])}),
                supervised_keys=("image", "label"))

        def _split_generators(self, dl_manager):
            return {"train": self._generate_examples()}

        def _generate_examples(self):
            rng = np.random.default_rng(0)
            for i in range(60):
                yield i, {"image": rng.integers(0, 256, (8, 8, 3), dtype=np.uint8),
                          "label": i % 3}

    TinySplitsDataset(data_dir=str(tmp_path)).download_and_prepare()
    builder = tfds.builder("tiny_splits_dataset", data_dir=str(tmp_path))
    order = {np.asarray(x).tobytes(): i for i, (x, _) in enumerate(
        builder.as_dataset(split="train", as_supervised=True, shuffle_files=False))}
    splits = data.load_tfds("tiny_splits_dataset", data_dir=str(tmp_path),
                            validation_fraction=0.25, validation_seed=0)
    indices = {name: sorted(order[np.asarray(x).tobytes()] for x, _ in
                            getattr(splits, name).as_numpy_iterator())
               for name in ("train", "validation", "test")}
    assert indices["test"] == list(range(48, 60))  # train[80%:], untouched
    assert sorted(indices["train"] + indices["validation"]) == list(range(48))
    assert (splits.num_train, splits.num_validation, splits.num_test) == (36, 12, 12)
    labels = [y for _, y in splits.validation.as_numpy_iterator()]
    assert np.bincount(labels).tolist() == [4, 4, 4]  # stratified
    for name, kept in indices.items():
        expected = hashlib.sha256("\n".join(sorted(f"train/{i}" for i in kept)).encode())
        assert splits.split["fingerprints"][name] == expected.hexdigest()[:16], name
    other = data.load_tfds("tiny_splits_dataset", data_dir=str(tmp_path),
                           validation_fraction=0.25, validation_seed=1)
    assert other.split["fingerprints"]["test"] == splits.split["fingerprints"]["test"]
    assert other.split["fingerprints"]["validation"] != splits.split["fingerprints"]["validation"]
