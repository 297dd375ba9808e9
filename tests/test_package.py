"""The package's surface: what `import keras_vit` loads, its public names, and moved modules."""

import importlib
import warnings

import pytest

import keras_vit
import keras_vit.layers
from keras_vit._lazy import RENAMED

# Modules `import keras_vit` must not load: training code (and through it tf.distribute
# work-arounds that patch private Keras modules), datasets, export, plotting, the CLI.
NOT_ON_IMPORT = ("keras_vit.training", "keras_vit.data", "keras_vit.export", "keras_vit.analysis",
                 "keras_vit.cli", "keras.src.backend.tensorflow.trainer", "matplotlib", "sklearn",
                 "tensorflow_datasets")
# ... but for the optimizers a train-made .keras file names (Keras alone), with the lazy
# package around them, their layer-decay mixin and their private-Keras guard.
OPTIMIZERS = ("keras_vit.training", "keras_vit.training.optimizers",
              "keras_vit.training.regularization", "keras_vit._support.private_keras")

def test_import_loads_the_core_only(fresh_import):
    """(The fresh process: tests/conftest.py's FRESH_IMPORT.)"""
    code, stderr, result = fresh_import
    assert code == 0 and result is not None, stderr[-2000:]
    new = result["new_modules"]
    assert "keras_vit.models.vit" in new and "keras_vit.checkpoints.loader" in new
    assert "keras_vit.training.optimizers" in new
    loaded = [m for m in new if m.startswith(NOT_ON_IMPORT) and m not in OPTIMIZERS
              and m not in RENAMED]  # forwarding modules, which import nothing until read
    assert loaded == [], f"import keras_vit loaded {loaded}"


def test_import_on_another_backend_touches_no_tensorflow_internals(torch_backend_run):
    """On a backend other than TensorFlow, Keras never imports its TensorFlow trainer; nor may
    keras_vit. (The torch process records its modules after `import keras_vit` first:
    tests/scripts/torch_smoke.py, through tests/conftest.py's `torch_backend_run`.)"""
    _, (code, stderr, result) = torch_backend_run
    assert code == 0 and result is not None, stderr
    assert [m for m in result["imported_on_import"] if m not in OPTIMIZERS] == []


def test_lazy_names_resolve_to_their_modules():
    from keras_vit import data, export, training

    assert keras_vit.train is training.train
    assert keras_vit.Recipe is training.Recipe and keras_vit.RECIPES is training.RECIPES
    assert keras_vit.get_recipe is training.get_recipe
    assert keras_vit.load_dataset is data.load_dataset
    assert keras_vit.make_pipeline is data.make_pipeline
    assert keras_vit.export_saved_model is export.export_saved_model
    assert keras_vit.export_tflite is export.export_tflite
    assert set(keras_vit.__all__) <= set(dir(keras_vit))
    with pytest.raises(AttributeError, match="no attribute 'nonsense'"):
        keras_vit.nonsense  # noqa: B018  (the attribute access is the test)


def test_dir_shows_the_api_and_the_subpackages_only():
    """No `os`, `sys` or `importlib`, nor the package's private helpers."""
    import pkgutil

    subpackages = {m.name for m in pkgutil.iter_modules(keras_vit.__path__)
                   if not m.name.startswith("_")}
    assert set(dir(keras_vit)) == set(keras_vit.__all__) | subpackages
    assert {"os", "sys", "importlib"}.isdisjoint(dir(keras_vit))
    assert set(keras_vit.errors.__all__) <= set(keras_vit.__all__)


# The public surface of 0.1.0; later releases may add to it, never take away.
PUBLIC_0_1 = {
    "ViT", "ViT_Ti16", "ViT_S16", "ViT_S32", "ViT_B8", "ViT_B16", "ViT_B32", "ViT_L16",
    "ViT_L32", "ViT_H14", "ViT_R_Ti16", "ViT_R26_S32", "ViT_R26_B32", "ViT_R50_B16",
    "ViT_R50_L32", "ResNetV2", "PatchEncoder", "ClassToken", "AddPositionEmbedding",
    "resize_position_embedding", "MultiHeadSelfAttention", "MlpBlock", "TransformerBlock",
    "TokenPooling", "StdConv2D", "BottleneckUnit", "ResNetStem", "VARIANTS", "Variant",
    "get_variant", "variant_names", "Checkpoint", "catalogue", "pin_checksum", "load_weights",
    "load_resnet_weights", "CheckpointError", "WeightsUnavailableError", "preprocess_input",
    "decode_predictions", "imagenet_labels", "export_saved_model", "export_tflite", "train",
    "Recipe", "RECIPES", "get_recipe", "load_dataset", "make_pipeline",
}
LAYERS_0_1 = {"PatchEncoder", "ClassToken", "AddPositionEmbedding", "resize_position_embedding",
              "MultiHeadSelfAttention", "MlpBlock", "TransformerBlock", "StdConv2D",
              "BottleneckUnit", "ResNetStem"}
ANALYSIS_0_1 = {
    "AttentionProbe", "ProbeOutputs", "pooled_features", "rollout", "attention_rollout",
    "RolloutResult", "overlay", "mean_attention_distance", "patch_distances",
    "position_embedding_similarity", "patch_embedding_components", "PatchComponents",
    "few_shot_linear_eval", "few_shot_indices", "plot_attention_rollout",
    "plot_mean_attention_distance", "plot_position_embedding_similarity",
    "plot_patch_embedding_components",
}


def test_public_api_only_grows():
    """A renamed name leaves `__all__` but still resolves, with a warning, for one release."""
    import keras_vit.analysis
    from keras_vit._lazy import RENAMED_NAMES

    renamed = set(RENAMED_NAMES)
    assert PUBLIC_0_1 - renamed <= set(keras_vit.__all__)
    assert LAYERS_0_1 - renamed <= set(keras_vit.layers.__all__)
    assert ANALYSIS_0_1 <= set(keras_vit.analysis.__all__)
    for module, names in ((keras_vit, PUBLIC_0_1), (keras_vit.layers, LAYERS_0_1),
                          (keras_vit.analysis, ANALYSIS_0_1)):
        for name in names:
            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always")
                value = getattr(module, name)
            assert value is not None, name
            if name in renamed:
                assert value is getattr(module, RENAMED_NAMES[name])
                assert any(issubclass(w.category, DeprecationWarning) for w in caught), name


@pytest.mark.parametrize("old,new,name", [
    ("keras_vit.optimizers", "keras_vit.training.optimizers", "SGD"),
    ("keras_vit.multiworker_fixes", "keras_vit.training.distribute", "multi_worker_fit"),
    ("keras_vit.weight_mapping", "keras_vit.checkpoints", "load_weights"),
    ("keras_vit.datasets", "keras_vit.data", "make_pipeline"),
    ("keras_vit.resnet", "keras_vit.models.resnet", "ResNetV2"),
    ("keras_vit.report", "keras_vit.reports", "write_report"),
    ("keras_vit.training.report", "keras_vit.reports", "read_log"),
])
def test_moved_modules_still_import_with_a_deprecation_warning(old, new, name):
    """Each name read from the old module warns, at the reading line, and is the new one."""
    module = importlib.import_module(old)
    with pytest.warns(DeprecationWarning, match=f"{old} is now {new}") as record:
        value = getattr(module, name)
    assert record[0].filename == __file__
    assert value is getattr(importlib.import_module(new), name)
    with pytest.warns(DeprecationWarning, match=f"{old} is now {new}"):
        exec(f"from {old} import {name}", {})  # the statement is the test


def test_current_modules_import_without_warnings():
    with warnings.catch_warnings():
        warnings.simplefilter("error", DeprecationWarning)
        for name in ("keras_vit.training", "keras_vit.data", "keras_vit.checkpoints",
                     "keras_vit.models", "keras_vit.cli", "keras_vit.export"):
            importlib.import_module(name)


@pytest.mark.parametrize("module,name,new", [
    ("keras_vit.preprocessing", "decode_predictions", "keras_vit.labels"),
    ("keras_vit.preprocessing", "imagenet_labels", "keras_vit.labels"),
    ("keras_vit.models", "TokenPooling", "keras_vit.layers"),
])
def test_moved_names_still_resolve_with_a_deprecation_warning(module, name, new):
    with pytest.warns(DeprecationWarning, match=f"{module}.{name} is now {new}.{name}"):
        value = getattr(importlib.import_module(module), name)
    assert value is getattr(importlib.import_module(new), name)
    with pytest.raises(AttributeError, match="no attribute 'nonsense'"):
        _ = importlib.import_module(module).nonsense


LAZY_UNDER_THE_SCRIPT = """
import sys
import keras_vit

assert "keras" not in sys.modules and "tensorflow" not in sys.modules, "the core loaded eagerly"
names = {name: getattr(keras_vit, name) for name in keras_vit.__all__}
from keras_vit import models, preprocessing, training, variants

assert names["ViT"] is models.ViT and names["ViT_B16"] is models.ViT_B16
assert names["preprocess_input"] is preprocessing.preprocess_input
assert names["VARIANTS"] is variants.VARIANTS and names["train"] is training.train
assert set(keras_vit.__all__) <= set(dir(keras_vit))
print("lazy core OK")
"""


def test_under_the_keras_vit_script_every_public_name_loads_on_first_use(tmp_path, python):
    """Run as the `keras-vit` script, the import defers the core; every name still resolves."""
    script = tmp_path / "keras-vit"  # the name pip gives the entry point's script
    script.write_text(LAZY_UNDER_THE_SCRIPT)
    result = python([str(script)], timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    assert result.stdout.strip().splitlines()[-1] == "lazy core OK"
