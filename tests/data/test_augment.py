"""AugReg augmentation in the training pipeline: the settings by name, RandAugment, MixUp and
CutMix applied, and the same batches under the same seed however tf.data runs its maps."""

import numpy as np
import pytest

from keras_vit import data
from keras_vit.data.augreg import AUGREG, Augmentation, get_augmentation, parse_randaugment
from keras_vit.errors import ArgumentError


@pytest.fixture(scope="module")
def digits():
    return data.load_digits()


def first_batch(splits, seed, augmentation, size=16):
    pipeline = data.make_pipeline(splits.train, size, 16, True, seed=seed,
                                  augmentation=augmentation, num_classes=splits.num_classes)
    return next(pipeline.as_numpy_iterator())


@pytest.fixture(scope="module")
def batches(digits):
    """First batches, each pipeline made once (a RandAugment pipeline traces 22 Keras ops)."""
    medium2 = get_augmentation("medium2")
    return {"medium2": first_batch(digits, 7, medium2), "medium2 again": first_batch(digits, 7, medium2),
            "medium2 seed 8": first_batch(digits, 8, medium2),
            "plain": first_batch(digits, 7, Augmentation()),
            "cutmix": first_batch(digits, 7, get_augmentation(cutmix=1.0))}


def test_medium2_first_batch_is_fixed_by_the_seed(batches):
    (a_images, a_labels), (b_images, b_labels) = batches["medium2"], batches["medium2 again"]
    np.testing.assert_array_equal(a_images, b_images)
    np.testing.assert_array_equal(a_labels, b_labels)
    other_images, other_labels = batches["medium2 seed 8"]
    assert not np.array_equal(a_images, other_images)
    assert not np.array_equal(a_labels, other_labels)


def test_medium2_randaugments_and_mixes(batches):
    """Against the same seed without augmentation: the same examples (shuffle, crop and flip
    share their seeds), other pixels; labels still sum to 1, some now two classes."""
    plain_images, plain_labels = batches["plain"]
    images, labels = batches["medium2"]
    assert not np.allclose(images, plain_images)
    np.testing.assert_array_equal(plain_labels.sum(-1), 1.0)
    assert set(np.unique(plain_labels)) == {0.0, 1.0}
    np.testing.assert_allclose(labels.sum(-1), 1.0, rtol=1e-6)  # float32 sums of two terms
    assert ((labels > 0).sum(-1) == 2).any()
    assert images.min() >= -1.0 and images.max() <= 1.0


def test_cutmix_pastes_a_box_of_another_image(batches):
    plain_images, _ = batches["plain"]
    cut_images, cut_labels = batches["cutmix"]
    changed = ~np.isclose(cut_images, plain_images).all(-1)  # (batch, H, W): pixels pasted over
    assert changed.any() and not changed.all()
    np.testing.assert_allclose(cut_labels.sum(-1), 1.0, rtol=1e-6)


@pytest.mark.slow
def test_randaugment_alone_keeps_labels(digits):
    plain_images, plain_labels = first_batch(digits, 3, Augmentation())
    images, labels = first_batch(digits, 3, get_augmentation(randaugment="2,10"))
    np.testing.assert_array_equal(labels, plain_labels)
    assert not np.allclose(images, plain_images)


def test_the_table_is_augregs():
    """big_vision's configs/vit_i1k.py RANDAUG_DEF and MIXUP_DEF, typed out again here."""
    randaug = {"none": "", "light1": "randaug(2,0)", "light2": "randaug(2,10)",
               "medium1": "randaug(2,15)", "medium2": "randaug(2,15)",
               "strong1": "randaug(2,20)", "strong2": "randaug(2,20)"}
    mixup = {"none": 0.0, "light1": 0.0, "light2": 0.2, "medium1": 0.2, "medium2": 0.5,
             "strong1": 0.5, "strong2": 0.8}
    for name in randaug:
        setting = get_augmentation(name)
        spelled = f"randaug({setting.randaugment[0]},{setting.randaugment[1]})" \
            if setting.randaugment else ""
        assert (spelled, setting.mixup, setting.cutmix) == (randaug[name], mixup[name], 0.0)
    assert list(AUGREG) == list(randaug)


def test_overrides_win_over_the_setting():
    assert get_augmentation("strong2", mixup=0, randaugment="none") == Augmentation(None, 0.0, 0.0)
    assert get_augmentation("light2", cutmix=1.0, randaugment=(3, 5)) == Augmentation((3, 5), 0.2, 1.0)


@pytest.mark.parametrize("kwargs, message", [
    ({"augment": "medium3"}, "Unknown augment setting 'medium3'. Did you mean"),
    ({"randaugment": "2"}, "randaugment must be N,M"),
    ({"randaugment": "0,5"}, "N >= 1 layers"),
    ({"randaugment": "2,31"}, "magnitude M in 0 to 30"),
    ({"mixup": -0.1}, "mixup must be an alpha >= 0"),
    ({"cutmix": float("nan")}, "cutmix must be an alpha >= 0"),
])
def test_bad_settings_are_refused_in_one_line(kwargs, message):
    with pytest.raises(ArgumentError, match=message) as raised:
        get_augmentation(**kwargs)
    assert "\n" not in str(raised.value)


def test_parse_randaugment():
    assert parse_randaugment(" 2, 15 ") == (2, 15) and parse_randaugment(None) is None
