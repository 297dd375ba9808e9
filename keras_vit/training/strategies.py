"""The names `--strategy` and `get_strategy` accept; no TensorFlow import, so the help lists them fast."""

__all__ = ["TF_STRATEGIES", "JAX_STRATEGIES", "STRATEGIES"]

TF_STRATEGIES = ("mirrored", "multiworker", "tpu")  # tf.distribute: the TensorFlow backend
# keras.distribution: the JAX backend (jax_distribution.DISTRIBUTIONS)
JAX_STRATEGIES = ("data-parallel", "model-parallel")
STRATEGIES = ("auto", *TF_STRATEGIES, *JAX_STRATEGIES, "none")
