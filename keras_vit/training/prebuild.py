"""Creating the optimizer's and the metrics' variables before `fit` traces its step.

On TensorFlow without a tf.distribute strategy, Keras 3 defers them to the trace
of the first training step. TensorFlow traces a function that created variables
a second time (the variables must exist outside it), so every `fit` traced its
step twice: on the demo model half of a one-epoch run's start-up. Under a
strategy, and on JAX, Keras builds them before tracing itself.
"""

import keras
import numpy as np

from keras_vit.layer_names import EMBEDDING, GRID, PATCHES
from keras_vit.models.image_size import naflex_layout
from keras_vit.training.distillation import student_of

__all__ = ["build_training_state"]


def build_training_state(model):
    """Builds a compiled model's optimizer, loss and metric state outside any trace.

    The loss and metrics are built by computing them once on a batch of zeros; their
    running state is then reset (`fit` resets it at each epoch too). A no-op where
    Keras builds them itself.
    """
    if keras.backend.backend() != "tensorflow":
        return
    import tensorflow as tf

    if tf.distribute.has_strategy():
        return
    if not model.optimizer.built:
        model.optimizer.build(model.trainable_variables)
    student = student_of(model)  # a distiller takes its student's images and labels
    layout = naflex_layout(student)
    if layout is None:
        images = np.zeros((1, *student.input_shape[1:]), student.input.dtype)
    else:  # a NaFlex model's inputs: one image of 1 x 2 patches
        values = student.get_layer(EMBEDDING).channels * layout[0] ** 2
        images = {PATCHES: np.zeros((1, 2, values), "float32"),
                  GRID: np.asarray([[1, 2]], "int32")}
    predicted = model(images, training=False)
    labels = np.zeros((1, student.output_shape[-1]), "float32")  # the one-hot labels train() fits on
    model.compute_loss(images, labels, predicted)
    model.compute_metrics(images, labels, predicted, None)
    model.reset_metrics()
