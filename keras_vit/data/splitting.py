"""How examples are split: the held-out (test) split, the validation split carved from the
training examples, and the fingerprint that shows two runs used the same examples.

NumPy and scikit-learn only (no TensorFlow), so `keras-vit train --help` quotes the defaults
without starting TensorFlow; `keras_vit.data.datasets` applies these to each source.
"""

import hashlib
import math

import numpy as np

from keras_vit.errors import DatasetError

__all__ = ["HELD_OUT_FRACTION", "SPLIT_SEED", "VALIDATION_FRACTION", "HELD_OUT", "split_fingerprint",
           "held_out_split", "validation_split", "split_record", "check_fraction"]

HELD_OUT_FRACTION = 0.2  # for sources without a test split (digits, folders, tf_flowers)
SPLIT_SEED = 0  # fixed, so every run holds out the same examples
# The share of the training examples `train` holds back to choose best.keras on: the test
# split then stays untouched until the final report.
VALIDATION_FRACTION = 0.1

def check_fraction(fraction):
    if isinstance(fraction, bool) or not isinstance(fraction, (int, float)) \
            or not 0 <= fraction < 1:
        raise DatasetError(f"validation_fraction must be a number in [0, 1), got {fraction!r}.")


def split_fingerprint(ids):
    """A short sha256 of a split's example ids (sorted, one a line): equal for the same examples,
    in any order, and different as soon as one example differs."""
    text = "\n".join(sorted(str(i) for i in ids))
    return hashlib.sha256(text.encode("utf-8")).hexdigest()[:16]


def validation_split(train, labels, fraction, seed, name):
    """(train indices, validation indices): `fraction` of `train` (at least one example per
    class), stratified by its labels, drawn with `seed`. No validation indices when
    `fraction` is 0."""
    if not fraction:
        return train, train[:0]
    from sklearn.model_selection import train_test_split

    classes, counts = np.unique(labels[train], return_counts=True)
    # As scikit-learn rounds a fractional test_size; a small dataset still validates on
    # every class.
    held = max(math.ceil(fraction * len(train)), len(classes))
    if counts.min() < 2 or len(train) - held < len(classes):
        raise DatasetError(f"{name!r} has {len(train)} training images for {len(classes)} classes "
                           f"(the rarest {counts.min()}): a stratified validation split needs "
                           "one image of each class on each side; add images.")
    kept, held_out = train_test_split(train, test_size=held, random_state=seed,
                                      stratify=labels[train])
    return np.sort(kept), np.sort(held_out)


def split_record(test, fraction, seed, ids):
    """DatasetSplits.split: `ids` maps each split's name to its example ids (no validation
    entries without a validation split)."""
    ids = {name: values for name, values in ids.items() if name != "validation" or fraction}
    return {"test": test, "validation_fraction": fraction, "validation_seed": seed,
            "sizes": {name: len(values) for name, values in ids.items()},
            "fingerprints": {name: split_fingerprint(values) for name, values in ids.items()}}


# How digits and folders hold out their test split, as split records say it.
HELD_OUT = f"a stratified {HELD_OUT_FRACTION:.0%} of the examples, seed {SPLIT_SEED}"


def held_out_split(labels, fraction=HELD_OUT_FRACTION, seed=SPLIT_SEED):
    """Stratified, seeded (train indices, test indices)."""
    from sklearn.model_selection import train_test_split

    indices = np.arange(len(labels))
    train, test = train_test_split(indices, test_size=fraction, random_state=seed,
                                   stratify=labels)
    return np.sort(train), np.sort(test)

