"""Distillation: a student learns from a frozen teacher's logits beside the labels, through
Keras' own `keras.distillation.Distiller` (Hinton et al. 2015; DeiT, Touvron et al. 2021).

The loss is Keras' `(1 - alpha) * labels_loss + alpha * distillation_loss`
(`Distiller(student_loss_weight=1 - alpha)`), with the distillation loss either

- "soft": Keras' `LogitsDistillation`, the KL divergence between the teacher's and the
  student's softmax at temperature T. Keras multiplies it by T**2 (Hinton et al.), so its
  gradients keep their size whatever T is: at T = 3 the KL term counts 9 times its value.
- "hard": DeiT's hard-label distillation, the cross-entropy of the student's logits on the
  teacher's argmax (`HardDistillation`: Keras ships soft and feature distillation only).

Defaults are DeiT's: soft at T = 3.0; alpha 0.5 (DeiT's hard loss weighs the label and the
teacher cross-entropies equally). A distilled DeiT student (a distillation token and its
"head_dist") defaults to hard distillation as DeiT trains it: the class head learns from
the labels, the distillation head from the teacher (`TokenDistiller`); the saved model
averages the two heads, as DeiT does at inference.

The teacher is fed what the student is fed (the student's images, normalised as the
student's weights expect) and turned into its own input by Keras layers in front of it
(`teacher_input_adapter`): back to [0, 255] pixels, resized (bilinear) to its own size, and
normalised as its weights expect. It is frozen (`Distiller` sets `trainable = False`).
"""

import os

import keras
import numpy as np

from keras_vit._support.checks import real_in
from keras_vit.checkpoints.errors import CheckpointError
from keras_vit.errors import ArgumentError, PathNotFoundError
from keras_vit.layer_names import HEAD, HEAD_DIST, HEADS, PREPROCESSING
from keras_vit.normalization import input_normalization, rescaling_arguments

__all__ = ["KINDS", "DEFAULT_TEMPERATURE", "DEFAULT_ALPHA", "HardDistillation", "TokenDistiller",
           "check_distillation", "check_teacher", "load_teacher", "teacher_input_adapter",
           "make_distiller", "student_of", "has_distillation_token", "teacher_spec"]

KINDS = ("soft", "hard")
DEFAULT_TEMPERATURE = 3.0  # DeiT's soft distillation (paper, section 5.1)
# Soft targets are softmax(logits / T), and the loss is scaled by T squared. Below 0.01 the
# targets are the argmax (hard distillation says so); above 100 they are uniform while the
# scale reaches 1e4 and beyond, until float32 overflows to NaN.
TEMPERATURE_RANGE = (0.01, 100.0)
DEFAULT_ALPHA = 0.5  # DeiT's hard distillation: labels and teacher weighed equally


class HardDistillation(keras.distillation.DistillationLoss):
    """DeiT's hard-label distillation: cross-entropy of the student's logits on the teacher's
    argmax (the teacher's decision, not its probabilities; no temperature)."""

    def compute_loss(self, teacher_outputs, student_outputs, **kwargs):
        decisions = keras.ops.argmax(teacher_outputs, axis=-1)
        return keras.ops.mean(keras.losses.sparse_categorical_crossentropy(
            decisions, student_outputs, from_logits=True))


class TokenDistiller(keras.distillation.Distiller):
    """Distillation into DeiT's distillation token. `Distiller` puts the labels' loss and the
    distillation loss on the student's one output; a distilled DeiT has two heads whose
    average is that output, and DeiT teaches "head" with the labels and "head_dist" with the
    teacher. So the student trains as the two-output model of its heads' logits: the labels'
    loss reads the class head, the distillation loss the distillation head (only
    `compute_loss` differs from Distiller's), and the metrics the heads' average, which the
    student (`self.student`, the model saved) returns at inference."""

    def __init__(self, teacher, student, distillation_losses, **kwargs):
        super().__init__(teacher, student, distillation_losses, **kwargs)
        self.heads = keras.Model(student.inputs, [student.get_layer(HEAD).output,
                                                  student.get_layer(HEAD_DIST).output],
                                 name=f"{student.name}_heads")

    def call(self, inputs, training=None):
        return self.heads(inputs, training=training)

    def compute_loss(self, x=None, y=None, y_pred=None, sample_weight=None, training=True):
        if y_pred is None:
            y_pred = self(x, training=training)
        class_logits, distillation_logits = y_pred
        labels_loss = keras.ops.mean(self._student_loss(y, class_logits))
        teacher_logits = self.teacher(x, training=False)
        distillation_loss = 0.0
        for loss, weight in zip(self.distillation_losses, self.distillation_loss_weights):
            distillation_loss = distillation_loss + weight * loss.compute_loss(
                teacher_logits, distillation_logits)
        total = (self.student_loss_weight * labels_loss
                 + (1.0 - self.student_loss_weight) * distillation_loss)
        self.student_loss_tracker.update_state(labels_loss)
        self.distillation_loss_tracker.update_state(distillation_loss)
        self.total_loss_tracker.update_state(total)
        return total

    def compute_metrics(self, x, y, y_pred, sample_weight=None):
        return super().compute_metrics(x, y, keras.ops.mean(keras.ops.stack(y_pred), axis=0),
                                       sample_weight)


def has_distillation_token(model):
    """Whether `model` is a distilled DeiT with its two heads ("head" and "head_dist")."""
    names = {layer.name for layer in model.layers}
    return set(HEADS) <= names


def check_distillation(kind, temperature, alpha, distilled_student):
    """(kind, temperature or None, alpha) with DeiT's defaults filled in; one-line errors."""
    import numbers

    kind = kind or ("hard" if distilled_student else "soft")
    if kind not in KINDS:
        raise ArgumentError(f"distillation must be one of {KINDS}, got {kind!r}.")
    if kind == "hard":
        if temperature is not None:
            raise ArgumentError("hard distillation learns the teacher's argmax and has no "
                                "temperature; use --distillation soft with a temperature.")
    else:
        temperature = real_in(DEFAULT_TEMPERATURE if temperature is None else temperature,
                              "distillation temperature", *TEMPERATURE_RANGE)
    alpha = DEFAULT_ALPHA if alpha is None else alpha
    if isinstance(alpha, bool) or not isinstance(alpha, numbers.Real) or not 0 <= alpha <= 1:
        raise ArgumentError(f"distillation alpha must be a number in [0, 1], got {alpha!r}.")
    return kind, temperature, float(alpha)


def teacher_spec(teacher):
    """`teacher` as run.json records it: a path made absolute, an architecture as given."""
    path = os.fspath(teacher)
    return os.path.abspath(path) if os.path.exists(path) or path.endswith(".keras") else path


def load_teacher(teacher, weights=None):
    """The teacher model, through `keras_vit.models.factory.load`: a `.keras` file, an earlier
    run's folder (its model.keras), or an architecture name with `weights` (what `--weights`
    accepts, with its trained head). Refused first, naming the teacher: weights for a saved
    model, a SavedModel folder (its signatures take pixels at a size they do not record), an
    architecture without weights."""
    from keras_vit.models.factory import is_saved_model, load
    from keras_vit.training.transfer import run_model_file

    if isinstance(teacher, keras.Model):
        return teacher
    if run_model_file(teacher) is not None:
        if weights is not None:
            raise ArgumentError(f"teacher {teacher} is a saved model; teacher weights cannot "
                                "change it.")
        import keras_vit.training.optimizers  # noqa: F401  (a run's model.keras names them)
    elif is_saved_model(teacher):
        raise CheckpointError(f"teacher {teacher} is a folder but neither a run folder nor a "
                              "model: give a .keras file or a run folder (a SavedModel's "
                              "signatures take pixels at a size they do not record).")
    else:
        from keras_vit.variants import get_architecture

        try:
            get_architecture(teacher)
        except ValueError:
            raise PathNotFoundError(f"No teacher at {teacher}: give a .keras file, a run folder, "
                                    "or an architecture name with teacher weights.") from None
        if weights is None:
            raise ArgumentError(f"teacher {teacher!r} names an architecture without weights: "
                                "give --teacher-weights (a teacher must be trained).")
    return load(teacher, compile=False, weights=weights)


def check_teacher(teacher, name, classes, dataset):
    """`teacher`, refused in one line unless it returns logits of the dataset's classes."""
    from keras_vit.models.factory import quantized_layers
    from keras_vit.models.vit import has_softmax_head

    if quantized_layers(teacher):
        # Keras cannot write a run's backup of a distiller holding int8 layers (the teacher's
        # weights are the distiller's), so the run would fail at its first backup.
        raise ArgumentError(f"teacher {name} is quantised (int8); a teacher must be a float "
                            "model: give the float32 model it was quantised from.")
    scored = teacher.output_shape[-1]
    if scored != classes:
        raise ArgumentError(f"teacher {name} scores {scored} classes, the dataset {dataset!r} "
                            f"has {classes}: a teacher must be trained on the student's classes.")
    if has_softmax_head(teacher):
        raise ArgumentError(f"teacher {name} returns probabilities (a softmax head); "
                            "distillation reads its logits: give a model without the softmax.")
    return teacher


def _has_preprocessing(model):
    return any(layer.name == PREPROCESSING for layer in model.layers)


def teacher_input_adapter(teacher, student):
    """`teacher` behind the layers that turn `student`'s input into the teacher's own: the
    teacher itself when the two take the same input; else a model of the student's input."""
    if teacher.input_shape[-1] != student.input_shape[-1]:
        raise ArgumentError(f"teacher {teacher.name} takes {teacher.input_shape[-1]} channels, "
                            f"the student {student.input_shape[-1]}.")
    size, teacher_size = student.input_shape[1:3], teacher.input_shape[1:3]
    if None in teacher_size:  # takes any size (dynamic_image_size)
        teacher_size = size
    student_norm = input_normalization(student)
    teacher_norm = None if _has_preprocessing(teacher) else input_normalization(teacher)
    same_pixels = (_has_preprocessing(student) and teacher_norm is None) or (
        not _has_preprocessing(student) and teacher_norm is not None
        and np.allclose(student_norm, teacher_norm))
    if tuple(teacher_size) == tuple(size) and same_pixels:
        return teacher
    inputs = keras.Input(student.input_shape[1:], name="student_images")
    x = inputs
    if not _has_preprocessing(student):  # back to pixels in [0, 255]: x = p * scale + offset
        scale, offset = (np.asarray(v, np.float64) for v in rescaling_arguments(student_norm))
        x = keras.layers.Rescaling(_floats(1.0 / scale), _floats(-offset / scale),
                                   name="to_pixels")(x)
    if tuple(teacher_size) != tuple(size):
        x = keras.layers.Resizing(*teacher_size, interpolation="bilinear",
                                  name="to_teacher_size")(x)
    if teacher_norm is not None:
        x = keras.layers.Rescaling(*rescaling_arguments(teacher_norm), name="to_teacher_input")(x)
    return keras.Model(inputs, teacher(x), name=f"{teacher.name}_on_student_input")


def _floats(values):
    values = [float(v) for v in np.broadcast_to(values, (3,))]
    return values[0] if len(set(values)) == 1 else values


def make_distiller(teacher, student, kind, temperature, alpha):
    """The model `fit` trains: Keras' `Distiller` of `teacher` (frozen, fed the student's
    input) into `student`; a `TokenDistiller` for a distilled DeiT student."""
    teacher.trainable = False
    # The KL as a KLDivergence instance: LogitsDistillation's default, the string
    # "kl_divergence", resolves to Keras' plain function, which its softmax-and-T**2 branch
    # does not recognise (Keras 3.15: an isinstance check on the class), so the KL would be
    # taken of the scaled logits themselves. tests/training/test_distillation.py checks the
    # loss against the KL worked out by hand.
    loss = (HardDistillation() if kind == "hard" else keras.distillation.LogitsDistillation(
        temperature=temperature, loss=keras.losses.KLDivergence()))
    distiller = TokenDistiller if has_distillation_token(student) else keras.distillation.Distiller
    distiller = distiller(teacher=teacher_input_adapter(teacher, student), student=student,
                          distillation_losses=loss, student_loss_weight=1.0 - alpha)
    # Built now, by a call on one image: a re-run restores its backup before fit, and Keras
    # loads weights only into a built model (Distiller, subclassed, is built by its first call).
    distiller(np.zeros((1, *student.input_shape[1:]), student.input.dtype), training=False)
    return distiller


def student_of(model):
    """The model a run saves and evaluates: a distiller's student, else `model` itself."""
    return model.student if isinstance(model, keras.distillation.Distiller) else model
