"""Layers: every public layer through tests/layer_checks.py (config and `.keras` round
trips, shapes, bfloat16, the training flag), numerics against NumPy, mixed precision in a
model, and the hybrids' ResNet pieces (StdConv2D, GroupNorm, the ResNetV2 trunk)."""

import dataclasses
import zipfile

import keras
import numpy as np
import pytest

import keras_vit
from keras_vit.layers.naflex import NaFlexPatchEmbedding, NaFlexPositionEmbedding, PatchValidity
from keras_vit.layers.resnet import StdConv2D
from keras_vit.layers.rotary import RotaryPositionEmbedding
from keras_vit.variants import get_variant
from tests.layer_checks import check_layer

TINY = dataclasses.replace(get_variant("Ti/16"), depth=2, name="tiny-ti")
# A cheap hybrid with the real trunk layout: 2 stages of 1 unit, a 1-block width-64 transformer.
TINY_HYBRID = keras_vit.Variant("R-tiny", 64, 1, 128, 2, 1, "token", (1, 1))

# Every layer, tiny: (class, constructor arguments, input shape, output shape, dropout rates).
LAYER_CASES = [
    (keras_vit.PatchEncoder, {"hidden_size": 8, "patch_size": 4}, (2, 8, 12, 3), (2, 6, 8), ()),
    # Any image size: the grid kept, 9 rows padded to 12 (timm's dynamic_img_pad).
    (keras_vit.PatchEncoder, {"hidden_size": 8, "patch_size": 4, "flatten": False, "pad": True},
     (2, 9, 12, 3), (2, 3, 3, 8), ()),
    (keras_vit.ClassToken, {}, (2, 5, 8), (2, 6, 8), ()),
    (keras_vit.AddPositionEmbedding, {"grid_size": (2, 3), "num_prefix_tokens": 1}, (2, 7, 8),
     (2, 7, 8), ()),
    (keras_vit.AddPositionEmbedding, {"grid_size": 2, "num_prefix_tokens": 0}, (2, 4, 8),
     (2, 4, 8), ()),
    (keras_vit.MultiHeadSelfAttention, {"num_heads": 2}, (2, 5, 8), (2, 5, 8), ("dropout",)),
    (keras_vit.MlpBlock, {"mlp_dim": 16, "approximate_gelu": False}, (2, 5, 8), (2, 5, 8),
     ("dropout",)),
    (keras_vit.TransformerBlock, {"num_heads": 2, "mlp_dim": 16, "layer_norm_epsilon": 1e-12},
     (2, 5, 8), (2, 5, 8), ("dropout", "attention_dropout", "drop_path")),
    (keras_vit.DropPath, {"seed": 3}, (4, 5, 8), (4, 5, 8), ("rate",)),
    (keras_vit.TokenPooling, {"mode": "gap", "num_prefix_tokens": 1}, (2, 5, 8), (2, 8), ()),
    (keras_vit.TokenPooling, {"mode": "max", "num_prefix_tokens": 0}, (2, 5, 8), (2, 8), ()),
    (keras_vit.StdConv2D, {"filters": 4, "kernel_size": (3, 3), "strides": (2, 2)},
     (2, 9, 9, 3), (2, 5, 5, 4), ()),
    # GroupNorm's 32 groups: 32 bottleneck features are the fewest a unit can have.
    (keras_vit.BottleneckUnit, {"features": 32, "strides": 2}, (1, 6, 6, 16), (1, 3, 3, 128), ()),
    (keras_vit.ResNetTrunk, {"stages": (1,), "width": 1}, (1, 16, 16, 3), (1, 4, 4, 256), ()),
    # transformers' ViTHybrid numerics: saved in the config, honoured after a reload.
    (keras_vit.StdConv2D, {"filters": 4, "kernel_size": 1, "epsilon": 1e-8,
                           "epsilon_on": "variance"}, (2, 5, 5, 3), (2, 5, 5, 4), ()),
    (keras_vit.ResNetTrunk, {"stages": (1,), "group_norm_epsilon": 1e-5, "std_conv_epsilon": 1e-8,
                             "std_conv_epsilon_on": "variance"},
     (1, 16, 16, 3), (1, 4, 4, 256), ()),
    (keras_vit.StdConv2D, {"filters": 4, "kernel_size": 3, "strides": 2, "epsilon": 1e-8,
                           "epsilon_on": "variance", "padding": "valid"},
     (2, 9, 9, 3), (2, 4, 4, 4), ()),
    # BiT's pre-activation unit, with its projection (channels and resolution change).
    (keras_vit.PreActBottleneckUnit, {"features": 32, "strides": 2}, (1, 7, 7, 64),
     (1, 4, 4, 128), ()),
    # The families' layers (numerics in tests/layers/test_family_layers.py).
    (keras_vit.PrefixTokens, {"num_tokens": 4}, (2, 5, 8), (2, 9, 8), ()),
    (keras_vit.LayerScale, {"init_value": 1e-5}, (2, 5, 8), (2, 5, 8), ()),
    (keras_vit.MlpBlock, {"mlp_dim": 16, "activation": "quick_gelu"}, (2, 5, 8), (2, 5, 8),
     ("dropout",)),
    (keras_vit.MlpBlock, {"mlp_dim": 16, "activation": "swiglu"}, (2, 5, 8), (2, 5, 8),
     ("dropout",)),
    (keras_vit.TransformerBlock, {"num_heads": 2, "mlp_dim": 16, "layer_scale": 1e-5,
                                  "activation": "quick_gelu"},
     (2, 5, 8), (2, 5, 8), ("dropout", "attention_dropout")),
    (keras_vit.MAPHead, {"num_heads": 2, "mlp_dim": 16}, (2, 5, 8), (2, 8), ()),
    # NaFlex's input layers; with a grid per image in tests/layers/test_naflex.py.
    (NaFlexPatchEmbedding, {"width": 8, "patch_size": 2}, (2, 5, 12), (2, 5, 8), ()),
    (NaFlexPositionEmbedding, {"grid_size": (2, 3)}, (2, 6, 8), (2, 6, 8), ()),
    (PatchValidity, {}, (2, 6, 8), (2, 6), ()),
    (keras_vit.TokenPooling, {"mode": "distillation", "num_prefix_tokens": 2}, (2, 5, 8), (2, 8), ()),
    (keras_vit.PatchEncoder, {"hidden_size": 8, "patch_size": 4, "use_bias": False},
     (2, 8, 12, 3), (2, 6, 8), ()),
    # The 2025 families' (numerics against timm in tests/layers/test_rope.py and
    # tests/checkpoints/formats/test_timm_eva_families.py): RoPE on a class token and a 2 x 2
    # grid of 2 heads of 8, a split SwiGLU with EVA-02's norm inside, and a block with both,
    # DINOv3's bias-free query/key/value and EVA's query and value biases.
    (RotaryPositionEmbedding, {"style": "dinov3", "num_prefix_tokens": 1}, (2, 5, 2, 8),
     (2, 5, 2, 8), ()),
    (RotaryPositionEmbedding, {"style": "eva", "reference_grid": 16}, (2, 4, 2, 8), (2, 4, 2, 8), ()),
    (RotaryPositionEmbedding, {"style": "eva", "num_prefix_tokens": 1, "reference_grid": 24,
                               "grid_offset": 1.0, "grid_indexing": "xy"},
     (2, 5, 2, 8), (2, 5, 2, 8), ()),
    (keras_vit.MlpBlock, {"mlp_dim": 16, "activation": "swiglu", "split_gate": True,
                          "inner_norm": True}, (2, 5, 8), (2, 5, 8), ("dropout",)),
    (keras_vit.TransformerBlock, {"num_heads": 2, "mlp_dim": 16, "qkv_bias": "none",
                                  "rope": {"style": "dinov3", "num_prefix_tokens": 1},
                                  "activation": "swiglu", "split_gate": True},
     (2, 5, 16), (2, 5, 16), ("dropout", "attention_dropout")),
    (keras_vit.MultiHeadSelfAttention, {"num_heads": 2, "qkv_bias": "qv",
                                        "rope": {"style": "eva", "num_prefix_tokens": 1}},
     (2, 5, 16), (2, 5, 16), ("dropout",)),
    # AIMv2's block: RMSNorms, and no bias but none at all (numerics against timm in
    # tests/layers/test_norms.py and tests/checkpoints/formats/test_timm_aimv2.py)
    (keras_vit.TransformerBlock, {"num_heads": 2, "mlp_dim": 16, "qkv_bias": "none",
                                  "norm": "rms", "proj_bias": False, "activation": "swiglu",
                                  "split_gate": True},
     (2, 5, 8), (2, 5, 8), ("dropout", "attention_dropout")),
]


@pytest.mark.parametrize("cls, init_kwargs, input_shape, output_shape, dropout", LAYER_CASES,
                         ids=[f"{case[0].__name__}-{i}" for i, case in enumerate(LAYER_CASES)])
def test_public_layer(cls, init_kwargs, input_shape, output_shape, dropout, tmp_path):
    check_layer(cls, init_kwargs, input_shape, output_shape, tmp_path, dropout=dropout)


def test_every_layer_is_checked_public_or_not():
    # Every layer keras_vit registers for .keras files (importing keras_vit.models loads them
    # all), so that a block's new part is checked before it is made public.
    import keras_vit.models

    registered = {cls for name, cls in keras.saving.get_custom_objects().items()
                  if name.startswith("keras_vit>") and isinstance(cls, type)
                  and issubclass(cls, keras.layers.Layer)}
    public = {getattr(keras_vit.layers, name) for name in keras_vit.layers.__all__}
    public = {cls for cls in public if isinstance(cls, type) and issubclass(cls, keras.layers.Layer)}
    assert public <= registered
    assert registered == {case[0] for case in LAYER_CASES}


def test_transformer_block_matches_a_numpy_reference():
    """Pre-norm block with tanh GELU, written out in NumPy."""
    rng = np.random.default_rng(0)
    block = keras_vit.TransformerBlock(num_heads=2, mlp_dim=12)
    x = rng.standard_normal((2, 5, 8)).astype("float32")
    block(x)
    for w in block.weights:
        w.assign(rng.standard_normal(w.shape) * 0.3)
    ln = lambda v, g, b: (v - v.mean(-1, keepdims=True)) / np.sqrt(v.var(-1, keepdims=True) + 1e-6) * g + b  # noqa: E731
    att = block.attention
    qkv = (ln(x, block.norm_0.gamma.numpy(), block.norm_0.beta.numpy()) @ att.qkv_kernel.numpy()
           + att.qkv_bias.numpy())
    q, k, v = [t.reshape(2, 5, 2, 4).transpose(0, 2, 1, 3) for t in np.split(qkv, 3, axis=-1)]
    s = q @ k.transpose(0, 1, 3, 2) / np.sqrt(4)
    a = np.exp(s - s.max(-1, keepdims=True))
    a /= a.sum(-1, keepdims=True)
    o = (a @ v).transpose(0, 2, 1, 3).reshape(2, 5, 8) @ att.out_kernel.numpy() + att.out_bias.numpy()
    y = x + o
    h = (ln(y, block.norm_2.gamma.numpy(), block.norm_2.beta.numpy()) @ block.mlp.dense_0.kernel.numpy()
         + block.mlp.dense_0.bias.numpy())
    gelu = 0.5 * h * (1 + np.tanh(np.sqrt(2 / np.pi) * (h + 0.044715 * h ** 3)))
    expected = y + gelu @ block.mlp.dense_1.kernel.numpy() + block.mlp.dense_1.bias.numpy()
    out, weights = block(x, return_attention_scores=True)
    np.testing.assert_allclose(out, expected, atol=1e-4)
    np.testing.assert_allclose(weights, a, atol=1e-5)


def test_exact_gelu_option_changes_the_activation():
    mlp_tanh, mlp_erf = keras_vit.MlpBlock(8), keras_vit.MlpBlock(8, approximate_gelu=False)
    x = np.random.default_rng(0).standard_normal((1, 3, 4)).astype("float32") * 3
    mlp_tanh(x), mlp_erf(x)
    mlp_erf.set_weights(mlp_tanh.get_weights())
    diff = np.abs(np.asarray(mlp_tanh(x)) - np.asarray(mlp_erf(x))).max()
    assert 1e-6 < diff < 1e-2


def test_keras_file_round_trip(tmp_path):
    model = keras_vit.ViT(TINY, image_size=(32, 48), classes=7, dropout=0.1)
    for w in model.weights:  # random head too, so the outputs carry every weight
        w.assign(np.random.default_rng(1).standard_normal(w.shape).astype("float32") * 0.05)
    x = np.random.default_rng(2).uniform(-1, 1, (2, 32, 48, 3)).astype("float32")
    path = tmp_path / "tiny.keras"
    model.save(path)
    loaded = keras.saving.load_model(path)  # safe_mode stays on: no Lambda layers
    np.testing.assert_array_equal(np.asarray(loaded(x, training=False)),
                                  np.asarray(model(x, training=False)))
    assert [layer.name for layer in loaded.layers] == [layer.name for layer in model.layers]
    # The class-token fast path is a call argument of the last block; it must survive saving.
    assert loaded.get_layer("encoderblock_1").output.shape == (None, 1, TINY.width)


def test_mixed_bfloat16_forward_is_finite_with_a_float32_head():
    keras.mixed_precision.set_global_policy("mixed_bfloat16")
    try:
        model = keras_vit.ViT(TINY, image_size=32, classes=10)
        x = np.random.default_rng(0).uniform(-1, 1, (2, 32, 32, 3)).astype("float32")
        y = model(x)
        assert model.get_layer("encoderblock_0").compute_dtype == "bfloat16"
        assert model.get_layer("head").compute_dtype == "float32"
        assert keras.backend.standardize_dtype(y.dtype) == "float32"
        assert np.all(np.isfinite(np.asarray(y)))
        # Training step too: gradients flow through bf16 blocks without dtype errors.
        model.compile(optimizer="sgd", loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))
        history = model.fit(x, np.array([1, 2]), epochs=1, verbose=0)
        assert np.isfinite(history.history["loss"][0])
    finally:
        keras.mixed_precision.set_global_policy("float32")


# --- the hybrids' ResNet pieces ----------------------------------------------------------------

@pytest.mark.parametrize("epsilon_on", ["std", "variance"])
def test_std_conv_matches_the_official_formula(epsilon_on):
    """(w - mean) / (std + 1e-5), population std over H, W, Cin, as the official code; or
    (w - mean) / sqrt(var + 1e-8), as timm and transformers; checked in NumPy."""
    rng = np.random.default_rng(0)
    epsilon = 1e-5 if epsilon_on == "std" else 1e-8
    layer = StdConv2D(4, 3, strides=2, epsilon=epsilon, epsilon_on=epsilon_on)
    x = rng.standard_normal((1, 7, 6, 5)).astype(np.float32)
    layer.build(x.shape)
    # A small-scale kernel, where the epsilon's placement matters.
    kernel = (0.001 * rng.standard_normal((3, 3, 5, 4)) + 0.002).astype(np.float32)
    layer.kernel.assign(kernel)
    centred = kernel - kernel.mean(axis=(0, 1, 2))
    if epsilon_on == "std":
        standard = centred / (centred.std(axis=(0, 1, 2)) + 1e-5)
    else:
        standard = centred / np.sqrt(centred.var(axis=(0, 1, 2)) + 1e-8)
    # TF SAME for 7 rows / stride 2: 4 outputs, 2 padding rows split 1 / 1;
    # 6 columns: 3 outputs, 1 padding column after.
    padded = np.pad(x, ((0, 0), (1, 1), (0, 1), (0, 0)))
    expected = np.zeros((1, 4, 3, 4), np.float32)
    for i in range(4):
        for j in range(3):
            patch = padded[0, 2 * i:2 * i + 3, 2 * j:2 * j + 3]
            expected[0, i, j] = np.tensordot(patch, standard, axes=3)
    np.testing.assert_allclose(layer(x).numpy(), expected, rtol=1e-4, atol=1e-4)
    assert layer.bias is None


def test_group_norm_is_32_groups_epsilon_1e6():
    """Checked on a low-variance input, where epsilon matters (the parity tests'
    activations are too large to tell 1e-6 from 1e-3)."""
    norm = keras_vit.ResNetV2("R26+S/32").get_layer("resnet").gn_root
    assert norm.groups == 32
    x = (1e-3 * np.random.default_rng(0).standard_normal((1, 3, 3, 64))).astype(np.float32)
    groups = x.reshape(1, 3, 3, 32, 2)
    mean = groups.mean(axis=(1, 2, 4), keepdims=True)
    var = groups.var(axis=(1, 2, 4), keepdims=True)
    expected = ((groups - mean) / np.sqrt(var + 1e-6)).reshape(x.shape)
    np.testing.assert_allclose(norm(x).numpy(), expected, rtol=1e-3, atol=1e-3)


def test_resnet_features_returns_every_stage_and_matches_the_hybrid_trunk():
    model = keras_vit.ViT(TINY_HYBRID, image_size=40)
    trunk = keras_vit.ResNetV2(TINY_HYBRID)
    for ours, theirs in zip(trunk.get_layer("resnet").weights, model.get_layer("resnet").weights):
        ours.assign(np.random.default_rng(0).standard_normal(ours.shape))
        theirs.assign(ours.numpy())
    x = np.random.default_rng(1).uniform(-1, 1, (2, 40, 40, 3)).astype(np.float32)
    features = trunk(x)
    shapes = {"stem": (2, 10, 10, 64), "block1": (2, 10, 10, 256), "block2": (2, 5, 5, 512)}
    assert {k: tuple(v.shape) for k, v in features.items()} == shapes
    # The shapes a model is built with (ResNetTrunk.compute_output_spec's) are the computed ones.
    sized = keras_vit.ResNetV2(TINY_HYBRID, image_size=40)
    assert {k: tuple(v.shape) for k, v in sized.output.items()} == \
        {k: (None, *shape[1:]) for k, shape in shapes.items()}
    np.testing.assert_allclose(features["block2"].numpy(),
                               model.get_layer("resnet")(x).numpy(), atol=1e-5)
    with pytest.raises(ValueError, match="has no ResNet"):
        keras_vit.ResNetV2("B/16")


def test_mixed_precision_hybrid_runs_with_float32_logits():
    keras.mixed_precision.set_global_policy("mixed_float16")
    try:
        model = keras_vit.ViT(TINY_HYBRID, image_size=32, classes=3)
        logits = model(np.zeros((1, 32, 32, 3), np.float32))
        assert model.get_layer("resnet").compute_dtype == "float16"
        assert model.get_layer("resnet").conv_root.kernel.dtype == "float32"
        assert logits.dtype == "float32"
    finally:
        keras.mixed_precision.set_global_policy("float32")


def test_the_0_1_name_resnet_stem_warns_and_its_keras_files_load_as_resnet_trunk(tmp_path):
    for module in (keras_vit, keras_vit.layers, keras_vit.layers.resnet):
        with pytest.warns(DeprecationWarning, match="ResNetStem is now .*ResNetTrunk"):
            assert module.ResNetStem is keras_vit.ResNetTrunk
    images = keras.Input((16, 16, 3))
    model = keras.Model(images, keras_vit.ResNetTrunk((1,), name="resnet")(images))
    x = np.random.default_rng(0).uniform(-1, 1, (1, 16, 16, 3)).astype("float32")
    model.save(tmp_path / "new.keras")
    # A file of 0.1: the same file, with the class under its old name.
    with zipfile.ZipFile(tmp_path / "new.keras") as new, \
            zipfile.ZipFile(tmp_path / "old.keras", "w") as old:
        for item in new.infolist():
            data = new.read(item)
            if item.filename == "config.json":
                config = data.decode()
                assert config.count('"ResNetTrunk"') == 1 and "keras_vit>ResNetTrunk" in config
                data = config.replace('"ResNetTrunk"', '"ResNetStem"').replace(
                    "keras_vit>ResNetTrunk", "keras_vit>ResNetStem").encode()
            old.writestr(item, data)
    loaded = keras.saving.load_model(tmp_path / "old.keras")  # safe_mode stays on
    assert type(loaded.get_layer("resnet")) is keras_vit.ResNetTrunk
    np.testing.assert_array_equal(np.asarray(loaded(x, training=False)),
                                  np.asarray(model(x, training=False)))


def test_importing_keras_vit_uses_no_deprecated_name(fresh_import):
    """The import ran with every DeprecationWarning an error (tests/conftest.py's FRESH_IMPORT)."""
    code, stderr, _ = fresh_import
    assert code == 0, stderr[-3000:]
