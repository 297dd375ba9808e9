"""Export: the SavedModel as TF Serving runs it, TFLite, `.keras`, and `keras-vit predict`.

No TF Serving binary runs here, so the SavedModel is checked the closest ways
available: loaded by TensorFlow alone in a fresh process where Keras cannot be
imported, inspected and run by `saved_model_cli` (the TF1 session path, like
TF Serving's C++ loader), and called with the exact REST body TF Serving
accepts, decoded as TF Serving decodes it.
"""

import base64
import dataclasses
import io
import json
import os
import re
import shutil
import subprocess
import sys
import textwrap
import warnings

import keras
import numpy as np
import pytest
import tensorflow as tf
from PIL import Image
from sklearn.datasets import load_sample_images
from tensorflow.python.tools import saved_model_utils

import keras_vit
from keras_vit import cli
from keras_vit.atomic import TEMP_PREFIX
from keras_vit.checkpoints.layout import POS_EMBED_KEY, layout
from keras_vit.export import export_saved_model, export_tflite, next_version
from keras_vit.layers import resize_position_embedding
from tests.writes import temporary_name

TINY = keras_vit.Variant("ViT-test_8", width=32, depth=2, mlp_dim=64, heads=2, patch_size=8)
SIZE = 32
CLASSES = 10
LABELS = [f"flower-{i}" for i in range(CLASSES)]


def write_random_checkpoint(model, path, seed=0):
    """An official-layout `.npz` holding random values for every array `model` reads."""
    rng = np.random.default_rng(seed)
    arrays = {}
    for row in layout(model):
        for key, shape in zip(row.keys, row.shapes):
            value = np.ones(shape) if key.endswith("/scale") else rng.normal(0.0, 0.05, shape)
            arrays[key] = value.astype(np.float32)
    np.savez(path, **arrays)
    return arrays


# For what does not depend on the model's depth (the commands, the .keras round trip): each
# fit, predict and load traces the model, and one block traces half of TINY's block calls.
# (An export's cost is mostly its signatures' image decoding and the SavedModel's writing,
# the same at any depth: the export tests keep TINY.)
ONE_BLOCK = dataclasses.replace(TINY, depth=1)


def tiny_classifier(seed=0):
    """The tiny variant with a random (not zero) head, so outputs differ per class."""
    keras.utils.set_random_seed(seed)
    model = keras_vit.ViT(TINY, image_size=SIZE, classes=CLASSES)
    head = model.get_layer("head")
    rng = np.random.default_rng(seed)
    head.set_weights([rng.normal(0.0, 0.1, head.kernel.shape).astype(np.float32),
                      rng.normal(0.0, 0.1, head.bias.shape).astype(np.float32)])
    return model


def encoded_test_images():
    """Real photos (scikit-learn's two samples) as PNG, JPEG, GIF and BMP of different sizes."""
    china, flower = load_sample_images().images  # (427, 640, 3) uint8 each

    def encode(pixels, fmt):
        buffer = io.BytesIO()
        Image.fromarray(pixels).save(buffer, format=fmt)
        return buffer.getvalue()

    return {"png": encode(china, "PNG"), "jpeg": encode(flower, "JPEG"),
            "gif": encode(flower[100:250, 200:420], "GIF"), "bmp": encode(china[::3, ::5], "BMP")}


def keras_reference(model, encoded):
    """Logits of `model` on encoded images, decoded by Pillow (independent of TF's decoders).

    JPEG decoding is not bit-exact across libraries (DCT method, chroma
    upsampling; up to a few levels per pixel), so JPEGs are decoded by
    `tf.io.decode_jpeg` here, outside the exported graph.
    """
    pixels = []
    for data in encoded:
        if data[:2] == b"\xff\xd8":  # the JPEG start-of-image marker
            rgb = tf.io.decode_jpeg(data, channels=3).numpy().astype(np.float32)
        else:
            rgb = np.asarray(Image.open(io.BytesIO(data)).convert("RGB"), dtype=np.float32)
        pixels.append(tf.image.resize(rgb, (SIZE, SIZE), method="bilinear").numpy())
    return np.asarray(model(keras_vit.preprocess_input(np.stack(pixels))))


def softmax(logits):
    shifted = np.exp(logits - logits.max(axis=-1, keepdims=True))
    return shifted / shifted.sum(axis=-1, keepdims=True)


def top5(logits):
    return np.argsort(-logits, axis=-1, kind="stable")[:, :5]


def rest_body(encoded):
    """The JSON body of `POST /v1/models/vit:predict` for the serve_bytes signature."""
    return json.dumps({"signature_name": "serve_bytes",
                       "instances": [{"b64": base64.b64encode(d).decode("ascii")} for d in encoded]})


@pytest.fixture(scope="module")
def exported(tiny_saved_model):
    """(the model, its SavedModel with LABELS): the suite's one export of `tiny_classifier()`
    (tests/conftest.py), beside the same model rebuilt here as the reference."""
    return tiny_classifier(), tiny_saved_model


# Runs in a fresh interpreter where `import keras` fails: TensorFlow alone serves the model.
TF_ONLY_CLIENT = textwrap.dedent("""
    import sys
    sys.modules["keras"] = None
    import base64, json
    import numpy as np
    import tensorflow as tf

    saved_model, pixels_file, body_file, out_file = sys.argv[1:]
    try:
        import keras
        raise SystemExit("keras is importable; the test would not prove TF-only serving")
    except ImportError:
        pass
    loaded = tf.saved_model.load(saved_model)
    signatures = loaded.signatures

    def rest_instance_to_value(instance):
        # TF Serving's REST row format: with one input, an instance is that input's
        # value, and {"b64": s} stands for the bytes base64-decoded from s.
        if isinstance(instance, dict) and set(instance) == {"b64"}:
            return base64.b64decode(instance["b64"])
        raise ValueError(instance)

    def run(signature, **inputs):
        return {k: v.numpy().astype(str) if v.dtype == tf.string else v.numpy()
                for k, v in signature(**inputs).items()}

    results = {}
    for key, value in run(signatures["serving_default"], images=tf.constant(np.load(pixels_file))).items():
        results["pixels/" + key] = value
    for key, value in loaded(tf.constant(np.load(pixels_file))).items():  # loaded(images)
        results["call/" + key] = value.numpy().astype(str) if value.dtype == tf.string else value.numpy()
    uint8_pixels = tf.constant(np.load(pixels_file).astype(np.uint8))
    for key, value in run(signatures["serve_uint8"], images=uint8_pixels).items():
        results["uint8/" + key] = value
    body = json.loads(open(body_file).read())
    signature = signatures[body["signature_name"]]
    image_bytes = [rest_instance_to_value(i) for i in body["instances"]]
    for key, value in run(signature, image_bytes=tf.constant(image_bytes)).items():
        results["bytes/" + key] = value
    try:
        run(signature, image_bytes=tf.constant([b"Hello, this is not an image"]))
        error = ""
    except tf.errors.InvalidArgumentError as e:
        error = e.message
    for key, value in run(signature, image_bytes=tf.constant(image_bytes[:1])).items():
        results["after_error/" + key] = value
    np.savez(out_file, error=np.array(error), **results)
""")


def test_tensorflow_alone_serves_both_signatures_like_keras(exported, tmp_path):
    model, path = exported
    pixels = np.random.default_rng(1).integers(0, 256, (3, SIZE, SIZE, 3)).astype(np.float32)
    np.save(tmp_path / "pixels.npy", pixels)
    encoded = list(encoded_test_images().values())
    (tmp_path / "body.json").write_text(rest_body(encoded))
    (tmp_path / "client.py").write_text(TF_ONLY_CLIENT)

    done = subprocess.run([sys.executable, str(tmp_path / "client.py"), path, str(tmp_path / "pixels.npy"),
                           str(tmp_path / "body.json"), str(tmp_path / "out.npz")],
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    out = np.load(tmp_path / "out.npz")

    pixel_logits = np.asarray(model(keras_vit.preprocess_input(pixels)))
    for prefix, logits in (("pixels", pixel_logits), ("uint8", pixel_logits),
                           ("call", pixel_logits), ("bytes", keras_reference(model, encoded))):
        np.testing.assert_allclose(out[f"{prefix}/logits"], logits, atol=1e-5, rtol=0)
        np.testing.assert_allclose(out[f"{prefix}/probabilities"], softmax(logits), atol=1e-5, rtol=0)
        np.testing.assert_array_equal(out[f"{prefix}/class_ids"], top5(logits))
        np.testing.assert_array_equal(out[f"{prefix}/labels"], np.asarray(LABELS)[top5(logits)])
    # A bad request is a readable InvalidArgument; the next request is answered as before.
    assert "not JPEG, PNG, GIF, BMP or WebP files (by index, from 0):] [0]" in str(out["error"])
    np.testing.assert_array_equal(out["after_error/class_ids"], out["bytes/class_ids"][:1])
    np.testing.assert_allclose(out["after_error/logits"], out["bytes/logits"][:1], atol=1e-6)


# Slow (-m slow, 20 s: two saved_model_cli processes): the default suite serves both
# signatures with TensorFlow alone (test_tensorflow_alone_serves_both_signatures_like_keras).
@pytest.mark.slow
def test_saved_model_cli_shows_and_runs_the_signatures(exported, tmp_path):
    model, path = exported
    script = os.path.join(os.path.dirname(sys.executable), "saved_model_cli")
    command = [script] if os.path.exists(script) else [
        sys.executable, "-m", "tensorflow.python.tools.saved_model_cli"]

    shown = subprocess.run([*command, "show", "--dir", path, "--all"], capture_output=True,
                           text=True, timeout=300)
    assert shown.returncode == 0, shown.stderr[-3000:]
    sections = shown.stdout.split("signature_def[")
    by_name = {s.split("'")[1]: s for s in sections[1:] if s.startswith("'")}
    for name, input_name in (("serving_default", "images"), ("serve_bytes", "image_bytes")):
        assert f"inputs['{input_name}']" in by_name[name]
        for output in ("logits", "probabilities", "class_ids", "labels"):
            assert f"outputs['{output}']" in by_name[name]

    encoded = [encoded_test_images()[k] for k in ("png", "jpeg")]
    # saved_model_cli feeds strings from an .npy of dtype S (NUL-padded; PNG and JPEG end in no NUL).
    np.save(tmp_path / "bytes.npy", np.array(encoded, dtype=np.bytes_))
    ran = subprocess.run([*command, "run", "--dir", path, "--tag_set", "serve", "--signature_def",
                          "serve_bytes", "--inputs", f"image_bytes={tmp_path / 'bytes.npy'}",
                          "--outdir", str(tmp_path / "out")], capture_output=True, text=True,
                         timeout=300)
    assert ran.returncode == 0, ran.stderr[-3000:]
    np.testing.assert_array_equal(np.load(tmp_path / "out" / "class_ids.npy"),
                                  top5(keras_reference(model, encoded)))


def test_versions_are_numbered_and_never_half_written(exported, tmp_path, monkeypatch):
    model, path = exported
    base = os.path.dirname(path)
    assert os.path.basename(path) == "1" and next_version(base) == 2
    for name in ("3", "12", "notes", ".hidden"):
        os.makedirs(tmp_path / name)
    assert next_version(str(tmp_path)) == 13
    with pytest.raises(FileExistsError, match="already exists"):
        export_saved_model(model, base, version=1)
    with pytest.raises(ValueError, match="2 labels for a model with 10 classes"):
        export_saved_model(model, str(tmp_path / "x"), labels=["a", "b"])

    def fail_half_way(obj, export_dir, *args, **kwargs):
        os.makedirs(os.path.join(export_dir, "variables"))
        open(os.path.join(export_dir, "saved_model.pb"), "wb").close()
        raise OSError("disk full")

    monkeypatch.setattr(tf.saved_model, "save", fail_half_way)
    with pytest.raises(OSError, match="disk full"):
        export_saved_model(model, str(tmp_path / "failed"))
    assert os.listdir(tmp_path / "failed") == []


def test_tflite_uses_builtin_ops_and_matches_keras(tmp_path):
    model = tiny_classifier(seed=2)
    old_umask = os.umask(0o022)
    try:
        path = export_tflite(model, str(tmp_path / "vit.tflite"))
    finally:
        os.umask(old_umask)
    assert os.stat(path).st_mode & 0o777 == 0o644  # what `touch` gives under umask 022, not 0600
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # tf.lite.Interpreter's notice about ai_edge_litert
        interpreter = tf.lite.Interpreter(model_path=path)
    ops = {detail["op_name"] for detail in interpreter._get_ops_details()}
    assert not {op for op in ops if op.startswith("Flex") or op == "CUSTOM"}, ops
    assert "GELU" in ops  # the tanh GELU is one builtin op, not an Erf expansion

    pixels = np.random.default_rng(3).integers(0, 256, (2, SIZE, SIZE, 3)).astype(np.float32)
    out = interpreter.get_signature_runner("serving_default")(images=pixels)
    logits = np.asarray(model(keras_vit.preprocess_input(pixels)))
    np.testing.assert_allclose(out["logits"], logits, atol=1e-4, rtol=0)
    np.testing.assert_allclose(out["probabilities"], softmax(logits), atol=1e-4, rtol=0)
    np.testing.assert_array_equal(out["class_ids"], top5(logits))


def test_keras_file_round_trip_of_a_fine_tuned_model(tmp_path):
    # A checkpoint at 32 px (4x4 grid) fine-tuned at 48 px (6x6) with a new 5-class head.
    source = keras_vit.ViT(ONE_BLOCK, image_size=SIZE, classes=CLASSES)
    arrays = write_random_checkpoint(source, tmp_path / "pretrained.npz")
    model = keras_vit.ViT(ONE_BLOCK, weights=str(tmp_path / "pretrained.npz"), image_size=48, classes=5)
    np.testing.assert_allclose(model.get_layer("posembed_input").pos_embedding.numpy(),
                               resize_position_embedding(arrays[POS_EMBED_KEY], 4, 6), atol=1e-6)
    rng = np.random.default_rng(4)
    images = rng.uniform(-1, 1, (8, 48, 48, 3)).astype(np.float32)
    model.compile(optimizer=keras.optimizers.Adam(1e-2),
                  loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    model.fit(images, rng.integers(0, 5, 8), epochs=1, batch_size=4, verbose=0)
    assert np.abs(model.get_layer("head").kernel.numpy()).max() > 0  # trained away from zero

    model.save(tmp_path / "fine_tuned.keras")
    reloaded = keras.saving.load_model(tmp_path / "fine_tuned.keras")  # safe_mode stays on
    np.testing.assert_array_equal(np.asarray(reloaded(images, training=False)),
                                  np.asarray(model(images, training=False)))
    assert reloaded.get_layer("posembed_input").grid_size == (6, 6)


def write_pngs(folder, count, size, seed):
    """PNGs at the model's size, so the pixels the model sees are exactly the ones written."""
    pixels = np.random.default_rng(seed).integers(0, 256, (count, size, size, 3)).astype(np.uint8)
    paths = [str(folder / f"image{i}.png") for i in range(count)]
    for path, image in zip(paths, pixels):
        Image.fromarray(image).save(path)
    return paths, pixels


def assert_prints_top5(stdout, paths, probabilities):
    """`keras-vit predict` output: per image its path, then the 5 best "probability  label"."""
    names = [name for _, name in keras_vit.imagenet_labels(1000)]
    np.testing.assert_allclose(probabilities.sum(axis=1), 1.0, atol=1e-6)  # over all 1000 classes
    lines = stdout.strip().split("\n")
    assert len(lines) == 6 * len(paths), stdout
    for i, path in enumerate(paths):
        assert lines[6 * i] == path
        printed = [line.split(None, 1) for line in lines[6 * i + 1: 6 * i + 6]]
        best = np.argsort(-probabilities[i])[:5]
        assert [label for _, label in printed] == [names[c] for c in best]
        np.testing.assert_allclose([float(p) for p, _ in printed], probabilities[i][best], atol=1e-4)


def test_predict_command_with_a_model_name_and_weights(tmp_path, capsys):
    # Ti/16 at 32 px with a random 1000-class checkpoint: ImageNet labels apply.
    weights = tmp_path / "ti16.npz"
    write_random_checkpoint(keras_vit.ViT("Ti/16", image_size=32), weights, seed=5)
    reference = keras_vit.ViT("Ti/16", weights=str(weights), image_size=32)
    paths, pixels = write_pngs(tmp_path, 2, 32, seed=6)

    argv = ["predict", *paths, "--model", "Ti/16", "--weights", str(weights), "--image-size", "32"]
    assert cli.main(argv) == 0
    logits = np.asarray(reference(keras_vit.preprocess_input(pixels)), np.float64)
    assert_prints_top5(capsys.readouterr().out, paths, softmax(logits))


def test_export_command_then_predict_from_the_saved_model(tmp_path, capsys):
    keras.utils.set_random_seed(7)
    model = keras_vit.ViT(ONE_BLOCK, image_size=SIZE, classes=1000)
    head = model.get_layer("head")
    head.kernel.assign(np.random.default_rng(7).normal(0.0, 0.3, head.kernel.shape))
    model.save(tmp_path / "tiny.keras")
    paths, pixels = write_pngs(tmp_path, 2, SIZE, seed=8)
    probabilities = softmax(np.asarray(model(keras_vit.preprocess_input(pixels)), np.float64))

    export_dir = str(tmp_path / "serving")
    assert cli.main(["export", "--model", str(tmp_path / "tiny.keras"), "--output", export_dir]) == 0
    printed = capsys.readouterr().out
    assert os.path.join("serving", "1") in printed
    # Every signature the SavedModel has, as TensorFlow itself lists them.
    # (read from saved_model.pb as saved_model_cli shows them, without restoring the model;
    # "__saved_model_init_op" is the restore op, not a signature tf.saved_model.load lists)
    meta_graph, = saved_model_utils.read_saved_model(os.path.join(export_dir, "1")).meta_graphs
    signatures = sorted(name for name in meta_graph.signature_def if not name.startswith("__"))
    assert signatures == ["serve_bytes", "serve_uint8", "serving_default"]
    assert printed.rstrip().endswith(f"(signatures: {', '.join(signatures)})")
    assert cli.main(["predict", *paths, "--saved-model", export_dir]) == 0
    assert_prints_top5(capsys.readouterr().out, paths, probabilities)

    copy = str(tmp_path / "copy.keras")
    assert cli.main(["export", "--model", str(tmp_path / "tiny.keras"), "--format", "keras",
                     "--output", copy]) == 0
    np.testing.assert_array_equal(keras.saving.load_model(copy)(pixels), model(pixels))


def test_predict_command_names_a_file_that_is_not_an_image(tmp_path, capsys):
    model = tiny_classifier()
    model.save(tmp_path / "tiny.keras")
    (tmp_path / "notes.dat").write_text("not an image")
    # The image is a failed row: its error on stderr, the count, exit status 1.
    assert cli.main(["predict", str(tmp_path / "notes.dat"), "--model", str(tmp_path / "tiny.keras")]) == 1
    error = capsys.readouterr().err
    assert "notes.dat is not a JPEG, PNG, GIF, BMP or WebP image" in error
    assert error.splitlines()[-1] == "keras-vit predict: 1 of 1 images could not be read."
    assert "Unknown image file format" in error


# --- hostile requests and exports (issue 17) ------------------------------------------------

@pytest.fixture(scope="module")
def signatures(exported):
    return tf.saved_model.load(exported[1]).signatures


def test_the_serving_page_lists_the_signatures_the_export_has(signatures):
    page = open(os.path.join(os.path.dirname(__file__), "..", "..", "docs", "serving.md")).read()
    table = page.split("### Signatures", 1)[1].split("\n\n| Output |", 1)[0]
    assert set(re.findall(r"^\| `(\w+)` \|", table, re.MULTILINE)) == set(signatures)
    assert "both signatures" not in page.lower()  # there are three


def _pixels(n=2, size=SIZE):
    return np.random.default_rng(2).integers(0, 256, (n, size, size, 3)).astype(np.float32)


def _with(value, item=1):
    pixels = _pixels()
    pixels[item, 3, 4, 1] = value
    return pixels


@pytest.mark.parametrize("name,pixels,message", [
    ("nan", _with(np.nan), r"finite pixel values in \[0, 255\].*\[1\]"),
    ("inf", _with(np.inf, item=0), r"finite pixel values in \[0, 255\].*\[0\]"),
    ("-inf", _with(-np.inf), r"finite pixel values in \[0, 255\].*\[1\]"),
    ("1e6", _with(1e6), r"finite pixel values in \[0, 255\].*\[1\]"),
    ("-1", _with(-1.0), r"finite pixel values in \[0, 255\].*\[1\]"),
    ("255.5", _with(255.5), r"finite pixel values in \[0, 255\].*\[1\]"),
    ("31x31", _pixels(size=31), r"images must be 32x32 pixels.*\[31 31\]"),
])
def test_pixel_signature_refuses_what_is_not_a_pixel(signatures, name, pixels, message):
    with pytest.raises(tf.errors.InvalidArgumentError, match=message):
        signatures["serving_default"](images=tf.constant(pixels))


def test_pixel_signatures_accept_the_whole_documented_range(signatures, exported):
    model, _ = exported
    pixels = _pixels()
    pixels[0, 0, 0], pixels[1, 0, 0] = 0.0, 255.0
    out = signatures["serving_default"](images=tf.constant(pixels))
    np.testing.assert_allclose(out["logits"].numpy(),
                               np.asarray(model(keras_vit.preprocess_input(pixels))), atol=1e-5)
    with pytest.raises(tf.errors.InvalidArgumentError, match="must be 32x32 pixels"):
        signatures["serve_uint8"](images=tf.constant(_pixels(size=40).astype(np.uint8)))


@pytest.mark.parametrize("name,image_bytes,message", [
    ("scalar", "png", r"must be a batch .* got rank\] \[0\]"),
    ("garbage second", ["png", b"<html>502 Bad Gateway</html>"], r"not JPEG.*WebP files.*\[1\]"),
    ("short items", [b"hi", "jpeg", b""], r"not JPEG.*WebP files.*\[0 2\]"),
])
def test_bytes_signature_names_the_bad_items(signatures, name, image_bytes, message):
    encoded = encoded_test_images()
    if isinstance(image_bytes, str):
        value = tf.constant(encoded[image_bytes])
    else:
        value = tf.constant([encoded.get(x, x) if isinstance(x, str) else x for x in image_bytes])
    with pytest.raises(tf.errors.InvalidArgumentError, match=message):
        signatures["serve_bytes"](image_bytes=value)


def _serves(path, model):
    """Whether the SavedModel at `path` computes `model`'s logits."""
    pixels = _pixels()
    served = tf.saved_model.load(path).signatures["serving_default"](images=tf.constant(pixels))
    return np.allclose(served["logits"].numpy(), np.asarray(model(keras_vit.preprocess_input(pixels))),
                       atol=1e-5)


# Numbering the version itself (None) is the default case; a given version is `slow`.
@pytest.mark.parametrize("version", [None, pytest.param(1, marks=pytest.mark.slow)])
def test_an_export_that_finishes_first_is_never_replaced(version, exported, tmp_path, monkeypatch):
    """Another export into the same folder completes while this one is being written. The
    other export's version is the module's SavedModel, copied aside and renamed into place as
    an export commits its version (tracing a second export would cost 5 CPU-seconds); that
    another export keeps a live export's staging folder is
    test_staging_folders_of_dead_exports_are_cleaned's."""
    (second, exported_path), first = exported, tiny_classifier(seed=1)
    base = str(tmp_path / "vit")
    save = tf.saved_model.save  # what ExportArchive.write_out writes with
    raced = []

    def save_while_another_export_finishes(*args, **kwargs):
        save(*args, **kwargs)
        if not raced:
            written = shutil.copytree(exported_path, tmp_path / "other")
            raced.append(os.path.join(base, "1"))  # the version the other export took
            os.rename(written, raced[0])

    monkeypatch.setattr(tf.saved_model, "save", save_while_another_export_finishes)
    if version is None:
        path = export_saved_model(first, base)
        assert path == os.path.join(base, "2")  # it took the next version
        assert _serves(path, first)
    else:
        with pytest.raises(FileExistsError, match="another export wrote it"):
            export_saved_model(first, base, version=1)
    assert raced == [os.path.join(base, "1")] and _serves(raced[0], second)
    assert not [n for n in os.listdir(base) if n.startswith(TEMP_PREFIX)]


def test_overwriting_a_version_never_leaves_it_half_deleted(exported, tmp_path, monkeypatch):
    """A kill while an old version's files are being deleted leaves the folder TF Serving
    watches holding a whole version."""
    new_model = tiny_classifier(seed=5)
    _, old_path = exported  # tiny_classifier(seed=0): other weights than new_model's
    base = str(tmp_path / "vit")
    # The old version: a copy of the module's export (exporting it again would trace anew).
    shutil.copytree(old_path, os.path.join(base, "1"))

    def killed_while_deleting(path, *args, **kwargs):
        for folder, _, files in os.walk(path):
            if files:
                os.remove(os.path.join(folder, files[0]))  # one file gone, then the kill
                break
        raise KeyboardInterrupt("killed")

    monkeypatch.setattr(shutil, "rmtree", killed_while_deleting)
    with pytest.raises(KeyboardInterrupt):
        export_saved_model(new_model, base, version=1, overwrite=True)
    monkeypatch.undo()
    assert _serves(os.path.join(base, "1"), new_model)


def test_staging_folders_of_dead_exports_are_cleaned(exported, tmp_path, monkeypatch):
    """An export first removes what exports that died left in its folder. The export itself is
    stopped where it starts tracing (keras_vit.export._archive, after the cleaning): writing
    the SavedModel, 5 CPU-seconds, is the other export tests' subject."""
    from keras_vit.export import saved_model as export

    model, _ = exported
    base = tmp_path / "vit"
    done = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"],
                          capture_output=True, text=True)
    dead, alive = int(done.stdout), os.getpid()
    # A SavedModel being staged, and an old version an overwrite had set aside.
    left = [temporary_name(base / "model", dead), temporary_name(base / "1", dead)]
    running = temporary_name(base / "model", alive)
    for name in (*left, running):
        os.makedirs(base / name / "variables")

    class Stop(Exception):
        pass

    def archive(*args, **kwargs):
        raise Stop
    monkeypatch.setattr(export, "_archive", archive)
    with pytest.raises(Stop):
        export_saved_model(model, str(base))
    # The folder of a process still running (this one, standing in for another export) stays.
    assert sorted(os.listdir(base)) == [running]
