"""Every command on the families used as feature extractors: a DINOv2 with registers, a SigLIP,
and the 2025 families (DINOv3, EVA-02, AIMv2, PE-core), each tiny (2 blocks, width 32) with
random weights that timm writes, loaded into keras_vit and saved as a .keras file the commands
read.

Each expected value comes from timm or from NumPy by hand: timm's features and attention
weights on the same pixels, normalised here by the mean/std timm records for the
architecture (its `pretrained_cfg`), not by keras_vit's table. Outputs of two float32
implementations of the same blocks differ by rounding, ~1e-7 relative per operation over
sums of a few hundred terms (tests/checkpoints/formats/test_timm_families.py measured 3e-7 to
8e-7 on larger models), so a relative 1e-4 holds with margin while a wrong normalisation
(ImageNet's against [-1, 1]) or a register token read as a patch moves them by 1e-2 or more.
"""

import csv
import json
import types

import numpy as np
import pytest
from PIL import Image

import keras_vit
from keras_vit.cli.main import main
from tests.checkpoints.formats.test_formats import _randomise
from tests.checkpoints.formats.test_timm_eva_families import _variant
from tests.oracle import import_timm, run_timm

RELATIVE_TOLERANCE = 1e-4
WIDTH, DEPTH, HEADS = 32, 2, 2
# timm architecture, keras_vit's row, image size (a 2 x 2 grid of its patches).
FAMILIES = {"dinov2_reg4": ("vit_small_patch14_reg4_dinov2", "DINOv2-S/14-reg4", 28),
            "siglip": ("vit_base_patch16_siglip_224", "SigLIP-B/16", 32),
            # RoPE alone, 4 registers, LayerScale
            "dinov3": ("vit_small_patch16_dinov3", "DINOv3-S/16", 32),
            # RoPE beside a position embedding, packed SwiGLU, mean pooling
            "eva02": ("eva02_tiny_patch14_224", "EVA02-Ti/14", 28),
            # RMSNorm, bias-free SwiGLU, mean pooling
            "aimv2": ("aimv2_large_patch14_224", "AIMv2-L/14", 28),
            # RoPE, a class token, attention pooling and its projection as the head
            "pe_core": ("vit_pe_core_tiny_patch16_384", "PE-Core-Ti/16", 32)}
# The layer each family's features come from (keras_vit.analysis.probe.feature_model), as
# timm pools it: DINOv3 by the mean of its patches (timm's default), EVA-02 by that mean and
# its norm (timm's fc_norm).
FEATURES = {"dinov2_reg4": "token_pool", "siglip": "map_pool", "dinov3": "gap_pool",
            "eva02": "pooled_norm", "aimv2": "gap_pool", "pe_core": "map_pool"}
CLASSES, PER_CLASS = 3, 5


def _write_family(root, name):
    """timm's tiny model with random weights, its safetensors file, the keras_vit variant,
    the headless keras_vit model loaded from the file and saved as .keras, and a folder of
    PNGs at the model's size (3 classes of 5)."""
    timm = import_timm()
    import torch
    from safetensors.torch import save_file

    architecture, row, size = FAMILIES[name]
    theirs = _randomise(timm.create_model(architecture, pretrained=False, depth=DEPTH,
                                          img_size=size, embed_dim=WIDTH, num_heads=HEADS),
                        torch)
    weights = root / f"{name}.safetensors"
    save_file({k: v.contiguous() for k, v in theirs.state_dict().items()}, str(weights))
    # the row at timm's widths (SwiGLU's at timm's ratio)
    variant = _variant(architecture, {"embed_dim": WIDTH, "num_heads": HEADS})
    assert variant.name == row and variant.depth == DEPTH
    model = keras_vit.ViT(variant, weights=str(weights), image_size=size, include_top=False)
    model.save(root / f"{name}.keras")
    rng = np.random.default_rng(len(name))
    for c in range(CLASSES):
        folder = root / f"{name}_data" / f"class{c}"
        folder.mkdir(parents=True)
        for i in range(PER_CLASS):  # each class its own brightness, so features differ
            pixels = np.clip(rng.normal(60 + 60 * c, 40, (size, size, 3)), 0, 255)
            Image.fromarray(pixels.astype(np.uint8)).save(folder / f"{i}.png")
    mean, std = (np.asarray(theirs.pretrained_cfg[k], np.float32) for k in ("mean", "std"))
    return types.SimpleNamespace(
        timm=theirs, weights=str(weights), variant=variant, size=size, mean=mean, std=std,
        keras=str(root / f"{name}.keras"), data=str(root / f"{name}_data"), root=root)


@pytest.fixture(scope="module")
def families(tmp_path_factory):
    root = tmp_path_factory.mktemp("families")
    return {name: _write_family(root, name) for name in FAMILIES}


def _pixels(paths):
    return np.stack([np.asarray(Image.open(p).convert("RGB"), np.float32) for p in paths])


def _timm_input(family, pixels):
    """[0, 255] pixels as timm's own transforms hand them to the model: (x / 255 - mean) / std
    with the mean/std timm records for the architecture."""
    return ((pixels / 255 - family.mean) / family.std).astype(np.float32)


def _assert_close(ours, theirs):
    assert ours.shape == theirs.shape
    assert np.abs(theirs).max() > 0.1  # loaded weights, not zeros
    relative = np.abs(ours - theirs).max() / np.abs(theirs).max()
    assert relative <= RELATIVE_TOLERANCE, f"relative max difference {relative:.2e}"


def test_each_family_carries_its_own_normalisation_into_training(families):
    """What `train` feeds the model is `input_normalization` of the model it builds (run.py):
    from timm's file, DINOv2's ImageNet mean/std and SigLIP's 0.5/0.5, as timm records them."""
    from keras_vit.normalization import input_normalization
    from keras_vit.training.run import build_model

    assert not np.allclose(families["dinov2_reg4"].mean, families["siglip"].mean)  # two answers
    for family in families.values():
        model = build_model(family.variant, family.weights, family.size, CLASSES)
        mean, std = input_normalization(model)
        np.testing.assert_allclose(mean, family.mean, rtol=1e-6)
        np.testing.assert_allclose(std, family.std, rtol=1e-6)


@pytest.mark.parametrize("name", list(FAMILIES))
def test_the_probes_features_are_timms_pre_logits(families, name):
    """The pooled features the few-shot probe reads (`feature_model`): DINOv2's class token
    after the final norm, SigLIP's and PE-core's attention pooling, DINOv3's, EVA-02's (then
    normed) and AIMv2's mean of the patches, equal timm's `pre_logits` on the same pixels,
    each normalised by its family's mean/std. Reading EVA-02's pooling before its norm was
    0.49 off."""
    import keras

    from keras_vit.analysis import pooled_features
    from keras_vit.analysis.probe import feature_model
    from keras_vit.normalization import model_input

    family = families[name]
    pixels = np.random.default_rng(5).uniform(0, 255, (2, family.size, family.size, 3))
    pixels = pixels.astype(np.float32)
    model = keras.saving.load_model(family.keras)
    assert feature_model(model).layers[-1].name == FEATURES[name]
    _assert_close(pooled_features(model, model_input(model)(pixels)),
                  run_timm(family.timm, _timm_input(family, pixels), features=True))


# Slow: the command costs ~10 CPU-s in tf.data tracing; the default
# test_the_probes_features_are_timms_pre_logits checks the features it reads, and
# tests/runtime/test_evaluate.py the command's probe on the paper's ViT.
@pytest.mark.slow
@pytest.mark.parametrize("name", list(FAMILIES))
def test_evaluate_few_shot_probes_the_familys_own_features(families, name, tmp_path):
    """`keras-vit evaluate --few-shot 2` on the .keras file: the ridge probe's scores equal the
    same probe fitted on timm's features (DINOv2: the class token after the final norm;
    SigLIP: the MAP head's output) of the same images, normalised as timm normalises them."""
    from keras_vit.analysis.few_shot import few_shot_indices, fit_linear_probe
    from keras_vit.data import load_dataset

    family = families[name]
    out = tmp_path / "probe"
    assert main(["evaluate", "--model", family.keras, "--dataset", family.data, "--few-shot",
                 "2", "--output", str(out), "--execution", "graph"]) == 0
    report = json.loads((out / "report.json").read_text())
    assert report["few_shot_probe"]["train_images"] == 2 * CLASSES
    assert report["few_shot_probe"]["features"] == FEATURES[name]
    with open(out / "predictions.csv", newline="") as f:
        rows = list(csv.DictReader(f))

    splits = load_dataset(family.data)
    train = [(p.decode(), int(y)) for p, y in splits.train.as_numpy_iterator()]
    chosen = few_shot_indices(np.asarray([y for _, y in train]), 2, 0, splits.class_names)
    features = [run_timm(family.timm, _timm_input(family, _pixels(paths)), features=True)
                for paths in ([train[i][0] for i in chosen], [r["id"] for r in rows])]
    probe = fit_linear_probe(features[0], [train[i][1] for i in chosen], num_classes=CLASSES)
    expected = probe.predict(features[1])
    assert [r["predicted"] for r in rows] == [splits.class_names[i] for i in expected.argmax(1)]
    # Features agree to ~1e-6 relative; the ridge solve on 6 examples with l2 1.0 is well
    # conditioned (its Gram matrix + I), so the scores agree to within a few times that.
    _assert_close(np.asarray([float(r["top1_score"]) for r in rows]), expected.max(1))


def _timm_attention(model, inputs):
    """Every block's softmax attention `(layers, batch, heads, T, T)` from timm itself, read
    where timm applies its attention dropout (the unfused path computes it explicitly)."""
    import torch

    captured, hooks = [], []
    for block in model.blocks:
        block.attn.fused_attn = False
        hooks.append(block.attn.attn_drop.register_forward_hook(
            lambda module, args, output: captured.append(args[0].numpy())))
    try:
        with torch.no_grad():
            model(torch.from_numpy(np.ascontiguousarray(inputs.transpose(0, 3, 1, 2))))
    finally:
        for hook, block in zip(hooks, model.blocks):
            hook.remove()
            block.attn.fused_attn = True
    return np.stack(captured).astype(np.float64)


def _rollout_by_hand(attention, class_token, prefix):
    """Rollout written out: the register tokens (every prefix token but the class token)
    struck from each layer as rows and columns, rows renormalised, heads averaged,
    (A + I) / 2, multiplied from the first layer up; the class token's row over the patches,
    or without one the mean of the patch rows."""
    kept = [0] * class_token + list(range(prefix, attention.shape[-1]))
    product = None
    for layer in attention:
        a = layer[..., kept, :][..., kept]
        a = a / a.sum(-1, keepdims=True)
        a = (a.mean(axis=1) + np.eye(len(kept))) / 2
        product = a if product is None else a @ product
    patches = product[:, int(class_token):, int(class_token):]
    return product[:, 0, 1:] if class_token else patches.mean(axis=1)


def _distance_by_hand(attention, prefix, rows, cols, stride):
    """Mean over queries of the patch-renormalised attention-weighted pixel distance."""
    centres = np.array([(r * stride, c * stride) for r in range(rows) for c in range(cols)])
    distance = np.linalg.norm(centres[:, None] - centres[None], axis=-1)
    patches = attention[..., prefix:, prefix:]
    patches = patches / patches.sum(-1, keepdims=True)
    return (patches * distance).sum(-1).mean(axis=(1, 3))  # (layers, heads)


# DINOv2 and DINOv3 (rotary attention) with registers by default; SigLIP's map without a class
# token is checked by hand in tests/analysis/test_math.py
# (test_a_model_without_a_class_token_reads_the_mean_of_its_patch_rows).
@pytest.mark.parametrize("name,class_token,prefix", [
    ("dinov2_reg4", True, 5), ("dinov3", True, 5),
    *(pytest.param(*case, marks=pytest.mark.slow) for case in [
        ("siglip", False, 0), ("eva02", True, 1), ("aimv2", False, 0), ("pe_core", True, 1)])])
def test_analyze_reads_timms_attention_without_the_registers(families, name, class_token,
                                                             prefix, tmp_path):
    """`keras-vit analyze` on the .keras file: the rollout maps and mean attention distances
    in analysis.json equal the ones computed here by hand from timm's own attention weights
    on the same pixels normalised as timm does (DINOv2: ImageNet's mean/std), with the four
    registers left out as the registers paper leaves them out; DINOv3's, EVA-02's and PE's
    attention after their rotary embedding. SigLIP and AIMv2 have no class token (SigLIP's MAP
    head's probe is no encoder token): their map is the mean of the patch rows."""
    family = families[name]
    out = tmp_path / "analysis"
    images = family.root / f"{name}_data" / "class0"
    assert main(["analyze", str(images), "--model", family.keras, "--output-dir", str(out),
                 "--max-images", "4", "--rollout-images", "2"]) == 0
    report = json.loads((out / "analysis.json").read_text())
    paths = sorted(str(p) for p in images.glob("*.png"))[:4]
    attention = _timm_attention(family.timm, _timm_input(family, _pixels(paths)))
    assert attention.shape[-1] == prefix + 4  # the registers are in timm's attention
    expected = _rollout_by_hand(attention[:, :2], class_token, prefix).reshape(2, 2, 2)
    # analysis.json rounds to 6 decimals; the maps are sums of products of float32 weights.
    np.testing.assert_allclose(report["attention_rollout_heatmaps"], expected, atol=2e-6)
    stride = family.variant.patch_size
    np.testing.assert_allclose(report["mean_attention_distance_pixels"],
                               _distance_by_hand(attention, prefix, 2, 2, stride), atol=1e-3)
    if prefix > class_token:  # the registers drew attention: keeping them would give another map
        kept_in = _rollout_by_hand(attention[:, :2], class_token, 1)
        assert np.abs(kept_in.reshape(2, -1)[:, -4:] - expected.reshape(2, -1)).max() > 1e-3


def test_save_npz_of_siglip_is_what_timms_big_vision_loader_reads(families, tmp_path):
    """SigLIP's own releases are big_vision .npz files: keras_vit's `save_npz` of the model
    read from timm's file loads through timm's big_vision loader (`load_pretrained`) into the
    same architecture and computes the same features. (DINOv2's releases are PyTorch files:
    `save_safetensors` writes them, tests/checkpoints/formats/test_timm_families.py.)"""
    import keras

    from keras_vit.normalization import model_input

    timm = import_timm()
    family = families["siglip"]
    model = keras.saving.load_model(family.keras)
    written = keras_vit.save_npz(model, str(tmp_path / "siglip.npz"))
    back = timm.create_model(FAMILIES["siglip"][0], pretrained=False, depth=DEPTH,
                             img_size=family.size, embed_dim=WIDTH, num_heads=HEADS)
    back.load_pretrained(written)
    pixels = np.random.default_rng(6).uniform(0, 255, (2, family.size, family.size, 3))
    pixels = pixels.astype(np.float32)
    _assert_close(np.asarray(model(model_input(model)(pixels))),
                  run_timm(back.eval(), _timm_input(family, pixels), features=True))


# Slow: a run, three exports, predict and timm's strict load of what training gave. The default
# tests above cover each family-specific part cheaply: the normalisation training feeds
# (test_each_family_carries_its_own_normalisation_into_training), the features, the probe and
# the analysis; tests/export/test_export.py covers every export of a plain ViT, and
# tests/checkpoints/formats/test_timm_families.py covers save_safetensors of both families.
@pytest.mark.slow
@pytest.mark.parametrize("name", list(FAMILIES))
def test_train_export_predict_and_write_back_to_timm(families, name, tmp_path, capsys):
    """`train` fine-tunes from timm's file with a new 3-class head; its model.keras carries the
    family's normalisation; `export` writes a SavedModel, a TFLite file and a .keras file that
    each compute what the trained model computes on [0, 255] pixels; `predict` prints its top
    class; `save_safetensors` writes a file timm loads strictly into the same architecture with
    a 3-class head, whose logits on timm-normalised pixels are the model's."""
    import keras
    import tensorflow as tf
    import torch
    from safetensors.torch import load_file

    from keras_vit.normalization import input_normalization, model_input
    from keras_vit.training.recipes import get_recipe

    family = families[name]
    recipe = get_recipe("finetune", batch_size=4, global_batch_size=None, image_size=family.size,
                        warmup_steps=1, learning_rate=0.1)
    run = tmp_path / "run"
    keras_vit.train(dataset=family.data, model=family.variant, weights=family.weights,
                    recipe=recipe, steps=3, output=str(run), execution="graph", verbose=0)
    model = keras.saving.load_model(run / "model.keras")
    assert np.abs(model.get_layer("head").kernel.numpy()).max() > 0  # trained from zero
    mean, std = input_normalization(model)
    np.testing.assert_allclose(mean, family.mean, rtol=1e-6)
    np.testing.assert_allclose(std, family.std, rtol=1e-6)

    paths = sorted(str(p) for p in (family.root / f"{name}_data").rglob("*.png"))[::5]
    pixels = _pixels(paths)
    logits = np.asarray(model(model_input(model)(pixels)))

    timm = import_timm()
    written = keras_vit.save_safetensors(model, str(tmp_path / "trained.safetensors"))
    back = timm.create_model(family.timm.default_cfg["architecture"], pretrained=False,
                             depth=DEPTH, img_size=family.size, embed_dim=WIDTH, num_heads=HEADS,
                             num_classes=CLASSES)
    back.load_state_dict(load_file(written), strict=True)
    _assert_close(logits, run_timm(back.eval(), _timm_input(family, pixels)))
    del torch

    assert main(["export", "--model", str(run / "model.keras"), "--output",
                 str(tmp_path / "serving"), "--execution", "graph"]) == 0
    served = tf.saved_model.load(str(tmp_path / "serving" / "1"))
    out = served.signatures["serving_default"](images=tf.constant(pixels))
    _assert_close(out["logits"].numpy(), logits)
    assert main(["export", "--model", str(run / "model.keras"), "--format", "tflite",
                 "--output", str(tmp_path / "model.tflite")]) == 0
    runner = tf.lite.Interpreter(str(tmp_path / "model.tflite")).get_signature_runner()
    _assert_close(runner(images=pixels)["logits"], logits)
    assert main(["export", "--model", str(run / "model.keras"), "--format", "keras",
                 "--output", str(tmp_path / "copy.keras")]) == 0
    copy = keras.saving.load_model(tmp_path / "copy.keras")
    np.testing.assert_array_equal(np.asarray(copy(model_input(copy)(pixels))), logits)

    capsys.readouterr()
    # The run's model.keras: predict reads the labels.txt beside it.
    assert main(["predict", *paths, "--model", str(run / "model.keras"), "--top", "1"]) == 0
    printed = capsys.readouterr().out
    names = (run / "labels.txt").read_text().split()
    assert [line.split()[-1] for line in printed.splitlines() if not line.startswith("/")] == \
        [names[i] for i in logits.argmax(1)]


# Slow: a run and an int8 calibration per family. The default tests above check the
# family-specific parts (normalisation, features, attention); tests/training/test_lora_run.py,
# test_layer_decay_timm.py and test_augreg_run.py check each option on its own.
@pytest.mark.slow
@pytest.mark.parametrize("name", list(FAMILIES))
def test_lora_layer_decay_and_augreg_fine_tune_and_the_int8_export(families, name, tmp_path,
                                                                   capsys):
    """`train` from timm's file with LoRA (rank 2 on query and value), layer decay 0.75 and
    AugReg's light1 records all three; with LoRA only the factors and the new head train, so
    the merged model.keras holds the file's weights everywhere but the query and value columns
    of each block's qkv kernel (moved by their factors) and the head. `export --quantize int8`
    of it, calibrated on the family's images, writes a TFLite file and its agreement record."""
    import keras

    from keras_vit.training.recipes import get_recipe

    family = families[name]
    recipe = get_recipe("finetune", batch_size=4, global_batch_size=None, image_size=family.size,
                        warmup_steps=1, learning_rate=0.1)
    run = tmp_path / "run"
    # 3 steps: the zero head gives the factors no gradient until it has moved (step 1).
    keras_vit.train(dataset=family.data, model=family.variant, weights=family.weights,
                    recipe=recipe, steps=3, output=str(run), execution="graph", verbose=0,
                    lora_rank=2, layer_decay=0.75, augment="light1")
    config = json.loads((run / "run.json").read_text())["config"]
    assert config["lora"] == {"rank": 2, "targets": ["query", "value"]}
    assert config["recipe"]["layer_decay"] == 0.75 and config["recipe"]["augment"] == "light1"

    source = {w.path: w.numpy() for w in keras.saving.load_model(family.keras).weights}
    trained = {w.path: w.numpy() for w in keras.saving.load_model(run / "model.keras").weights}
    assert set(trained) - set(source) == {"head/kernel", "head/bias"}
    moved = {path for path in source if not np.array_equal(source[path], trained[path])}
    qkv = {path for path in source if path.endswith("/qkv_kernel")}
    assert moved == qkv and len(qkv) == DEPTH, sorted(moved)
    for path in qkv:  # (D, 3 D): query, key, value columns; the key's is not adapted
        np.testing.assert_array_equal(trained[path][:, WIDTH:2 * WIDTH],
                                      source[path][:, WIDTH:2 * WIDTH])

    output = tmp_path / "int8.tflite"
    assert main(["export", "--model", str(run / "model.keras"), "--format", "tflite",
                 "--quantize", "int8", "--calibration-data", family.data,
                 "--output", str(output)]) == 0
    record = json.loads(output.with_name("int8.tflite.agreement.json").read_text())
    assert record["quantize"] == "int8" and record["images"] > 0, record
    assert 0.0 <= record["top1_agreement"] <= 1.0 and record["max_logit_difference"] >= 0.0
