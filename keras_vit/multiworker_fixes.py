"""Work-arounds that let Keras 3 `fit` run under MultiWorkerMirroredStrategy.

Two Keras bugs stop `fit` with several workers (keras-team/keras#20585):
1. before the first step, `fit` builds metrics and the optimizer by reducing
   the first distributed batch, which fails;
2. after every step, it reduces the scalar logs with `axis=0`, which fails on a
   scalar ("Invalid reduction dimension 0 for input with 0 dimensions").
Both are fixed here for the duration of one `fit` call, and only when the
strategy is a MultiWorkerMirroredStrategy; nothing changes otherwise.
"""

import contextlib

import tensorflow as tf
from keras.src.backend.tensorflow import trainer as tf_trainer

__all__ = ["multi_worker_fit"]


@contextlib.contextmanager
def multi_worker_fit(model, strategy, element_spec):
    """Within this context, `model.fit` works under `strategy` (multi-worker)."""
    if not isinstance(strategy, tf.distribute.MultiWorkerMirroredStrategy):
        yield
        return
    with strategy.scope():  # 1: build from the dataset's spec, no batch needed
        model._symbolic_build(data_batch=element_spec)
    original_build = model._maybe_symbolic_build
    model._maybe_symbolic_build = lambda iterator=None, data_batch=None: None
    original_reduce = tf_trainer.reduce_per_replica

    def reduce_per_replica(values, strategy, reduction="auto"):  # 2: scalars reduce whole
        if reduction in ("auto", "mean") and tf_trainer._collective_all_reduce_multi_worker(strategy):
            return tf.nest.map_structure(
                lambda v: strategy.reduce("MEAN", v, axis=None)
                if isinstance(v, tf.distribute.DistributedValues) or tf.is_tensor(v) else v, values)
        return original_reduce(values, strategy, reduction)

    tf_trainer.reduce_per_replica = reduce_per_replica
    try:
        yield
    finally:
        tf_trainer.reduce_per_replica = original_reduce
        model._maybe_symbolic_build = original_build
