"""Class names as a user's folders spell them: two spellings of one name are refused naming
both, and a class with too few examples for the few-shot probe is named, not numbered."""

import unicodedata

import numpy as np
import pytest
from PIL import Image

import keras_vit
from keras_vit.analysis import few_shot_indices
from keras_vit.errors import ArgumentError, DatasetError

NFC = unicodedata.normalize("NFC", "café")  # é as one character, U+00E9
NFD = unicodedata.normalize("NFD", "café")  # e and a combining accent, U+0301


def _folder(root, counts):
    """root/<class>/<i>.png, `counts[class]` tiny PNGs each."""
    rng = np.random.default_rng(0)
    for name, count in counts.items():
        (root / name).mkdir(parents=True)
        for i in range(count):
            Image.fromarray(rng.integers(0, 256, (8, 8, 3), dtype=np.uint8)).save(
                root / name / f"{i}.png")
    return root


def test_the_two_spellings_are_two_folders_here():
    """The case below can fail: the file system keeps both names (it does not normalise)."""
    assert NFC != NFD and len(NFC) == 4 and len(NFD) == 5


def test_class_folders_equal_once_nfc_normalised_are_refused_naming_both(tmp_path):
    root = _folder(tmp_path / "data", {NFC: 3, NFD: 3, "dog": 3})
    with pytest.raises(DatasetError) as error:
        keras_vit.load_dataset(str(root))
    message = str(error.value)
    assert "\n" not in message and "NFC" in message
    # Named both ways, escaped so that the reader sees how they differ.
    assert ascii(NFC) in message and ascii(NFD) in message, message


def test_distinct_names_that_look_alike_otherwise_are_kept(tmp_path):
    """Only NFC equality is refused: "Cafe" and "café" are two classes."""
    root = _folder(tmp_path / "data", {NFC: 5, "Cafe": 5})
    assert keras_vit.load_dataset(str(root)).class_names == sorted([NFC, "Cafe"])


def test_a_class_short_of_few_shot_examples_is_named():
    labels = np.array([0] * 4 + [1] * 9)  # NumPy ints, as a split's labels are
    with pytest.raises(ArgumentError, match=r"^Class 'cat' has 4 examples, fewer than 5 shots\.$"):
        few_shot_indices(labels, 5, class_names=["cat", "dog"])
    with pytest.raises(ArgumentError, match=r"^Class 0 has 4 examples"):  # no names: the label
        few_shot_indices(labels, 5)


def test_evaluate_names_the_class_short_of_few_shot_examples(tmp_path):
    """Through evaluate: the folder's name, from the split's class names. Refused before the
    model runs (the probe's examples are chosen first), so random weights do."""
    from tests.export.test_export import tiny_classifier

    root = _folder(tmp_path / "data", {"cat": 5, "dog": 10})  # 'cat': 4 to train on, 1 held out
    with pytest.raises(ArgumentError, match=r"^Class 'cat' has \d examples, fewer than 6 shots"):
        keras_vit.evaluate(tiny_classifier(), str(root), few_shot=6)
