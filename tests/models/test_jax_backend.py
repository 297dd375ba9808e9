"""On Keras' JAX backend: preprocess_input inside tf.data, and a SavedModel export whose
outputs match the model's (in the shared JAX process, tests/conftest.py `jax_backend_run`,
since the backend is fixed when Keras is imported)."""


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
