"""Few-shot linear evaluation: the paper's closed-form regularised least-squares probe."""

import numpy as np
from sklearn.linear_model import Ridge

from keras_vit._support.checks import positive_int
from keras_vit.errors import ArgumentError

__all__ = ["few_shot_linear_eval", "few_shot_indices", "fit_linear_probe"]


def few_shot_indices(labels, shots, seed=0, class_names=None):
    """Indices of `shots` random examples of every class, sorted.

    Raises if a class has fewer than `shots` examples, naming it by `class_names[label]`
    when given (a dataset's folder names), else by its label.
    """
    labels = np.asarray(labels)
    positive_int(shots, "shots")
    rng = np.random.default_rng(seed)
    chosen = []
    for label in np.unique(labels):
        members = np.flatnonzero(labels == label)
        if len(members) < shots:
            name = label.item() if class_names is None else class_names[label.item()]
            raise ArgumentError(f"Class {name!r} has {len(members)} examples, fewer than "
                                f"{shots} shots.")
        chosen.append(rng.choice(members, size=shots, replace=False))
    return np.sort(np.concatenate(chosen))


def few_shot_linear_eval(train_features, train_labels, test_features, test_labels, shots=None,
                         l2_regularization=1.0, seed=0, num_classes=None):
    """Accuracy of a closed-form ridge regression from features to {-1, 1}^K targets.

    The model is frozen; its features `(n, D)` (e.g. from `pooled_features`)
    are regressed onto targets that are +1 for the true class and -1 for the
    others, solving `min ||X W + b - Y||^2 + l2 ||W||^2` in closed form (bias
    not regularised); the prediction is the argmax over the K outputs.

    Args:
        train_features: `(n, D)` array.
        train_labels: `(n,)` integer class ids in [0, K).
        test_features: `(m, D)` array.
        test_labels: `(m,)` integer class ids in [0, K).
        shots: use only this many training examples per class (a k-shot
            subset drawn with `seed`), or None for all.
        l2_regularization: ridge strength.
        seed: the subset's random seed.
        num_classes: K; defaults to 1 + the largest label seen.

    Returns:
        Test accuracy, a float in [0, 1].
    """
    train_features, test_features = (np.asarray(a, dtype=np.float64)
                                      for a in (train_features, test_features))
    train_labels, test_labels = (np.asarray(a) for a in (train_labels, test_labels))
    for name, features, labels in (("train", train_features, train_labels),
                                   ("test", test_features, test_labels)):
        if features.ndim != 2 or labels.shape != (len(features),):
            raise ArgumentError(f"{name} features must be (n, D) with (n,) labels, got "
                                f"{features.shape} and {labels.shape}.")
        if not np.issubdtype(labels.dtype, np.integer) or labels.min() < 0:
            raise ArgumentError(f"{name} labels must be non-negative integer class ids.")
    if train_features.shape[1] != test_features.shape[1]:
        raise ArgumentError(f"Train and test features differ in width: {train_features.shape[1]} "
                            f"vs {test_features.shape[1]}.")
    if l2_regularization < 0:
        raise ArgumentError(f"l2_regularization must be >= 0, got {l2_regularization}.")
    if num_classes is None:
        num_classes = int(max(train_labels.max(), test_labels.max())) + 1
    if shots is not None:
        subset = few_shot_indices(train_labels, shots, seed)
        train_features, train_labels = train_features[subset], train_labels[subset]
    probe = fit_linear_probe(train_features, train_labels, l2_regularization, num_classes)
    predictions = probe.predict(test_features).argmax(axis=-1)
    return float(np.mean(predictions == test_labels))


def fit_linear_probe(features, labels, l2_regularization=1.0, num_classes=None):
    """The paper's probe, fitted: a scikit-learn `Ridge` from `(n, D)` features to targets
    that are +1 for the true class and -1 for the others, in closed form (bias not
    regularised). `probe.predict(features)` gives `(m, K)` scores; their argmax is the class.
    """
    features, labels = np.asarray(features, dtype=np.float64), np.asarray(labels)
    if num_classes is None:
        num_classes = int(labels.max()) + 1
    targets = 2.0 * np.eye(num_classes)[labels] - 1.0
    # Ridge's "cholesky" solver is the closed-form normal-equation solution.
    probe = Ridge(alpha=l2_regularization, solver="cholesky", fit_intercept=True)
    return probe.fit(features, targets)
