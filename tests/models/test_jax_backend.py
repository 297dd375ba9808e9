"""On Keras' JAX backend: preprocess_input inside tf.data, a SavedModel export whose outputs
match the model's, and keras_vit's predict loop calling the bare compiled model (in the shared
JAX process, tests/conftest.py `jax_backend_run`, since the backend is fixed when Keras is
imported)."""


def test_preprocess_in_tf_data_and_saved_model_export_on_jax(jax_backend_run):
    code, stderr, result = jax_backend_run
    assert code == 0 and result is not None, stderr
    out = result["export"]
    assert out["dataset_dtype"] == "float32"
    assert out["dataset_error"] < 1e-6
    assert out["signatures"] == ["serve_bytes", "serve_uint8", "serving_default"]
    assert out["expected_spread"] > 0.1  # a head that tells the classes apart
    assert out["logits_error"] < 1e-4
    assert out["class_ids"] == out["expected_top5"]


def test_keras_vits_own_loop_calls_the_compiled_model_not_kerass_predict_step(jax_backend_run):
    """predict_images (and evaluate, through the same runner) on JAX: a bare jax.jit of
    stateless_call, the same program Keras' predict step wraps (docs/performance.md: the step
    cost 5-8% of a ViT-B/16 call on an H200), with Keras' predict's results."""
    code, stderr, result = jax_backend_run
    assert code == 0 and result is not None, stderr
    out = result["runner"]
    assert out["images"] == 10
    assert out["predict_on_batch_calls"] == 0  # three batches of 4, 4 and 2 ran without it
    assert out["bare_vs_predict_on_batch"] == 0.0  # one program: the same arithmetic
    # Against Keras' predict at its own batch (32: other XLA programs), probabilities differ
    # by float32 rounding over the tiny model's longest reduction chain (per block: the width
    # 32 twice, the 17 tokens twice, the MLP's 64; then the head's 32): n = 2 * (2 * 32 +
    # 2 * 17 + 64) + 32 = 356, relative to the largest logit; softmax does not enlarge it.
    n, u = 356, 2.0 ** -24
    assert out["probabilities_vs_predict"] <= n * u / (1 - n * u) * max(out["largest_logit"], 1.0)
