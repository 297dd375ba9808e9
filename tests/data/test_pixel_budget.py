"""Nothing unbounded: the pixel budget on every decode path, and serving under load (issue 15).

The decompression bombs are real files: a 12000 x 12000 PNG of zeros (a few
hundred KB that decode to 432 MB), and a small JPEG whose header declares
12000 x 12000 pixels.
"""

import io
import json
import os
import struct
import textwrap
import threading
import zlib

import numpy as np
import pytest
import tensorflow as tf
from PIL import Image

from keras_vit import cli, preprocessing
from keras_vit.data import load_image_folder
from keras_vit.export import export_saved_model
from tests.data.test_pipeline import write_folder
from tests.export.test_export import encoded_test_images, keras_reference, softmax, tiny_classifier

BOMB = 12000


def png_chunk(kind, body):
    return struct.pack(">I", len(body)) + kind + body + struct.pack(">I", zlib.crc32(kind + body))


def png_of_zeros(width, height):
    """A valid RGB PNG of `width` x `height` black pixels, compressed row by row."""
    compressor = zlib.compressobj(9)
    row = bytes(1 + 3 * width)  # filter byte 0, then the row's pixels
    idat = b"".join(compressor.compress(row) for _ in range(height)) + compressor.flush()
    header = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    return (b"\x89PNG\r\n\x1a\n" + png_chunk(b"IHDR", header) + png_chunk(b"IDAT", idat)
            + png_chunk(b"IEND", b""))


def jpeg_declaring(width, height):
    """A 16 x 16 JPEG whose start-of-frame header is rewritten to declare `width` x `height`."""
    buffer = io.BytesIO()
    Image.fromarray(np.full((16, 16, 3), 128, np.uint8)).save(buffer, "JPEG")
    data = bytearray(buffer.getvalue())
    sof = data.index(b"\xff\xc0")  # baseline start of frame: length, precision, height, width
    data[sof + 5:sof + 9] = struct.pack(">HH", height, width)
    return bytes(data)


def read(path):
    with open(path, "rb") as f:
        return f.read()


@pytest.mark.filterwarnings("ignore::PIL.Image.DecompressionBombWarning")  # it is one
def test_the_bombs_are_what_they_claim(bombs):
    png = read(bombs["png"])
    assert len(png) < 1_000_000  # under 1 MB on the wire ...
    image = Image.open(io.BytesIO(png))
    assert image.size == (BOMB, BOMB) and image.mode == "RGB"  # ... 432 MB decoded
    assert Image.open(bombs["jpeg"]).size == (BOMB, BOMB)


def test_declared_size_of_every_format_matches_pillow():
    """The header parser against Pillow, for every format and WebP's three kinds."""
    rng = np.random.default_rng(0)
    cases = [("JPEG", {}, 3), ("PNG", {}, 3), ("PNG", {}, 1), ("GIF", {}, 3), ("BMP", {}, 3),
             ("WEBP", {"lossless": False}, 3), ("WEBP", {"lossless": True}, 3),
             ("WEBP", {}, 4)]  # RGBA WebP is written with a VP8X header
    for fmt, options, channels in cases:
        for height, width in ((37, 53), (301, 17)):
            pixels = rng.integers(0, 255, (height, width, channels), dtype=np.uint8)
            buffer = io.BytesIO()
            Image.fromarray(pixels.squeeze()).save(buffer, fmt, **options)
            data = buffer.getvalue()
            size = Image.open(io.BytesIO(data)).size
            declared = [int(v) for v in preprocessing.declared_image_size(tf.constant(data))]
            assert declared == [size[1], size[0]] == [height, width], (fmt, options)
            assert preprocessing.decode_image(tf.constant(data)).shape == (height, width, 3)
    # A top-down BMP has a negative height.
    header = b"BM" + bytes(16) + struct.pack("<ii", 7, -5) + bytes(6)
    assert [int(v) for v in preprocessing.declared_image_size(tf.constant(header))] == [5, 7]
    assert [int(v) for v in preprocessing.declared_image_size(tf.constant(b"no"))] == [0, 0]


def test_the_budget_is_inclusive_and_configurable():
    data = tf.constant(png_of_zeros(50, 40))
    assert preprocessing.decode_image(data, max_pixels=2000).shape == (40, 50, 3)
    with pytest.raises(tf.errors.InvalidArgumentError, match="50 x 40 pixels, over the pixel"):
        preprocessing.decode_image(data, max_pixels=1999)
    assert preprocessing.decode_image(data, max_pixels=None).shape == (40, 50, 3)


def test_gif_frames_count_not_only_the_logical_screen():
    """TensorFlow decodes a GIF at its largest frame, after giflib has read every frame."""
    tiny_screen = (b"GIF89a" + struct.pack("<HH", 10, 10) + bytes([0x80, 0, 0]) + bytes(6)
                   + b"\x2c" + struct.pack("<HHHH", 0, 0, BOMB, BOMB) + b"\x00"
                   + b"\x02\x02\x4c\x01\x00\x3b")
    assert [int(v) for v in preprocessing.declared_image_size(tf.constant(tiny_screen))] == [
        BOMB, BOMB]
    with pytest.raises(tf.errors.InvalidArgumentError, match=f"{BOMB} x {BOMB} pixels, over"):
        preprocessing.decode_image(tf.constant(tiny_screen))
    rng = np.random.default_rng(1)
    frames = [Image.fromarray(rng.integers(0, 255, (30, 40, 3), dtype=np.uint8)) for _ in range(5)]
    buffer = io.BytesIO()
    frames[0].save(buffer, "GIF", save_all=True, append_images=frames[1:])
    animation = tf.constant(buffer.getvalue())
    assert Image.open(buffer).n_frames == 5
    assert preprocessing.decode_image(animation, max_pixels=5 * 40 * 30).shape == (30, 40, 3)
    with pytest.raises(tf.errors.InvalidArgumentError,
                       match="40 x 30 pixels in 5 frames, over the pixel budget of 5999"):
        preprocessing.decode_image(animation, max_pixels=5 * 40 * 30 - 1)


def webp(frames, **options):
    buffer = io.BytesIO()
    Image.fromarray(frames[0]).save(buffer, "WEBP", save_all=len(frames) > 1,
                                    append_images=[Image.fromarray(f) for f in frames[1:]],
                                    **options)
    return buffer.getvalue()


def test_webp_with_alpha_decodes_as_pillow_reads_it():
    """TensorFlow decodes a WebP with alpha only to 4 channels; keras_vit drops alpha, as
    TensorFlow's PNG decoder does, in 3 channels and in grey."""
    rgba = np.random.default_rng(2).integers(0, 255, (29, 31, 4), dtype=np.uint8)
    lossless = webp([rgba], lossless=True, exact=True)  # exact: keep colour under alpha 0
    lossy = webp([rgba], quality=90)
    assert (lossless[12:16], lossy[12:16]) == (b"VP8L", b"VP8X")  # both ways alpha is stored
    for data in (lossless, lossy):
        pillow = np.asarray(Image.open(io.BytesIO(data)).convert("RGB"))
        if data is lossless:
            np.testing.assert_array_equal(pillow, rgba[..., :3])
        np.testing.assert_array_equal(preprocessing.decode_image(tf.constant(data)), pillow)
        grey = preprocessing.decode_image(tf.constant(data), channels=1).numpy()[..., 0]
        luma = pillow.astype(np.float64) @ [0.2989, 0.587, 0.114]  # ITU-R 601-2, as TensorFlow
        assert np.abs(grey - luma).max() <= 1.0
    # In a graph too, as the serving signature decodes.
    assert preprocessing.decode_images(tf.constant([lossless, lossy]), (8, 8)).shape == (2, 8, 8, 3)


def test_animated_webp_is_refused_before_decoding(model, tmp_path, capsys):
    """TensorFlow 2.21 corrupts its heap decoding an animated WebP, so keras_vit never asks it
    to: refused at any channel count, in the serving graph, and by predict in one line."""
    rng = np.random.default_rng(3)
    frames = [rng.integers(0, 255, (30, 40, 3), dtype=np.uint8) for _ in range(3)]
    animated = webp(frames, lossless=True)
    assert Image.open(io.BytesIO(animated)).n_frames == 3
    message = "the image is an animated WebP, which TensorFlow does not decode safely"
    for channels in (3, 1, 4):
        with pytest.raises(tf.errors.InvalidArgumentError, match=message):
            preprocessing.decode_image(tf.constant(animated), channels=channels)
    with pytest.raises(tf.errors.InvalidArgumentError, match=message):
        preprocessing.decode_images(tf.constant([webp(frames[:1]), animated]), (8, 8))
    path = tmp_path / "animated.webp"
    path.write_bytes(animated)
    model.save(tmp_path / "tiny.keras")
    assert cli.main(["predict", str(path), "--model", str(tmp_path / "tiny.keras")]) == 1
    error = capsys.readouterr().err.strip().splitlines()
    assert error == [f"keras-vit predict: error: {path} cannot be decoded: {message}; save one "
                     "frame as a still image.",
                     "keras-vit predict: 1 of 1 images could not be read."], error


SERVE_SCRIPT = textwrap.dedent("""
    import json, sys, time
    import tensorflow as tf
    from tests.memory import peak_rss_mb, reset_peak, status_mb
    serve = tf.saved_model.load(sys.argv[1]).signatures["serve_bytes"]
    good = tf.constant([open(sys.argv[2], "rb").read()])
    answer = serve(image_bytes=good)["probabilities"].numpy()
    serve(image_bytes=good)
    results = {"requests": []}
    for path in sys.argv[3:]:
        data = tf.constant([open(path, "rb").read()])
        reset_peak()
        rss_before = status_mb("VmRSS")
        start = time.perf_counter()
        logits = None
        try:
            logits = serve(image_bytes=data)["logits"].numpy().tolist()
            outcome = "served"
        except tf.errors.InvalidArgumentError as error:
            outcome = "refused: " + error.message
        seconds = time.perf_counter() - start
        peak_growth_mb = peak_rss_mb() - rss_before
        after = serve(image_bytes=good)["probabilities"].numpy()
        results["requests"].append({"path": path, "outcome": outcome, "logits": logits,
                                    "seconds": seconds,
                                    "peak_growth_mb": peak_growth_mb,
                                    "next_served": bool((abs(after - answer) < 1e-6).all())})
    print(json.dumps(results))
""")


@pytest.fixture(scope="module")
def model():
    return tiny_classifier(seed=3)


PARENT_WITH_A_HIGH_PEAK = textwrap.dedent("""
    import subprocess, sys
    block = bytearray(1 << 30)
    block[::4096] = b"x" * len(block[::4096])  # touch every page: a 1 GiB peak
    del block
    child = "from tests.memory import peak_rss_mb; print(peak_rss_mb())"
    print(subprocess.run([sys.executable, "-c", child], capture_output=True, text=True,
                         check=True).stdout)
""")


def test_a_fresh_process_measures_its_own_peak_not_its_parents(python):
    """What the serving measurement relies on: under pytest (a process of several GB), the
    child's ru_maxrss starts at pytest's peak; tests.memory reads the child's own."""
    result = python(["-c", PARENT_WITH_A_HIGH_PEAK], timeout=60)
    assert result.returncode == 0, result.stderr[-2000:]
    assert float(result.stdout.strip()) < 200


def serve_in_fresh_process(python, saved_model, good, paths):
    result = python(["-c", SERVE_SCRIPT, saved_model, good, *paths], timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    return json.loads(result.stdout.strip().splitlines()[-1])


def test_serve_bytes_refuses_bombs_fast_with_bounded_memory(served_requests):
    """A SavedModel exported with the default budget, in a fresh process; the PNG and the
    JPEG bomb are requests 2 and 3 of `served_requests` (tests/data/conftest.py)."""
    requests = served_requests[1]["requests"][2:]
    print("\nguarded:", json.dumps(requests))
    assert [os.path.basename(r["path"]) for r in requests] == ["bomb.png", "bomb.jpg"]
    for request in requests:
        assert request["outcome"].startswith("refused"), request
        assert f"{BOMB} x {BOMB} pixels, over the pixel budget of 40000000" in request["outcome"]
        assert request["seconds"] < 1.0, request
        assert request["peak_growth_mb"] < 200, request
        assert request["next_served"], request


@pytest.mark.slow
def test_without_a_budget_the_same_measurement_sees_the_bomb(model, bombs, tmp_path, python):
    """The control of the test above (so its bound can fail): the same request to a SavedModel
    exported without a useful budget decodes the bomb, and the same measurement sees it.
    `slow`: decoding the bomb is most of a minute on two cores."""
    good = str(tmp_path / "good.png")
    Image.fromarray(np.full((64, 48, 3), 90, np.uint8)).save(good)
    unguarded = export_saved_model(model, str(tmp_path / "unguarded"), max_pixels=10 ** 12)
    control = serve_in_fresh_process(python, unguarded, good, [bombs["png"]])
    print("unguarded:", json.dumps(control))
    request = control["requests"][0]
    assert request["outcome"] == "served"
    assert request["peak_growth_mb"] > 300, request  # the pixels alone are 412 MiB


def test_the_budget_is_exported_into_the_graph(model, bombs, tmp_path, capsys):
    """`max_pixels` at export time is a constant of the SavedModel; TensorFlow alone applies it."""
    path = export_saved_model(model, str(tmp_path / "small"), max_pixels=100 * 100)
    serve = tf.saved_model.load(path).signatures["serve_bytes"]
    assert serve(image_bytes=tf.constant([png_of_zeros(100, 100)]))["logits"].shape == (1, 10)
    with pytest.raises(tf.errors.InvalidArgumentError, match="101 x 100 pixels, over the pixel "
                                                             "budget of 10000 pixels"):
        serve(image_bytes=tf.constant([png_of_zeros(101, 100)]))
    # keras-vit predict --saved-model reports the SavedModel's refusal in one line, exit 2.
    assert cli.main(["predict", bombs["png"], "--saved-model", path]) == 1
    error = capsys.readouterr().err.strip().splitlines()
    assert error[0] == (f"keras-vit predict: error: {bombs['png']} is too large to decode: the "
                        f"image is {BOMB} x {BOMB} pixels, over the pixel budget of 10000 pixels.")
    with pytest.raises(ValueError, match="max_pixels must be a positive int"):
        export_saved_model(model, str(tmp_path / "bad"), max_pixels=0)


@pytest.mark.slow  # the guarded serving test above refuses the same bombs by default
def test_concurrent_serving_answers_good_requests_and_refuses_bad(model, bombs, tmp_path):
    path = export_saved_model(model, str(tmp_path / "serving"))
    serve = tf.saved_model.load(path).signatures["serve_bytes"]
    good = encoded_test_images()
    names = sorted(good)
    expected = softmax(np.asarray(keras_reference(model, [good[n] for n in names]), np.float64))
    bad = {"garbage": os.urandom(2000), "empty": b"", "truncated png": good["png"][:300],
           "png bomb": read(bombs["png"]), "jpeg bomb": read(bombs["jpeg"]),
           "gif screen bomb": b"GIF89a" + struct.pack("<HH", 60000, 60000) + bytes(40),
           "animated webp": webp([np.full((8, 8, 3), v, np.uint8) for v in (0, 255)])}
    threads, per_thread = 8, 24
    outcomes, lock = [], threading.Lock()

    def client(index):
        rng = np.random.default_rng(index)
        for _ in range(per_thread):
            if rng.random() < 0.3:
                kind = list(bad)[rng.integers(len(bad))]
                try:
                    serve(image_bytes=tf.constant([bad[kind]]))
                    outcome = ("bad", kind, "served")
                except tf.errors.InvalidArgumentError:
                    outcome = ("bad", kind, "refused")
            else:
                k = int(rng.integers(len(names)))
                try:
                    probabilities = serve(image_bytes=tf.constant([good[names[k]]]))[
                        "probabilities"].numpy()[0]
                    right = np.allclose(probabilities, expected[k], atol=1e-5)
                    outcome = ("good", names[k], "right" if right else "wrong")
                except Exception as error:  # noqa: BLE001 - any failure is a wrong answer here
                    outcome = ("good", names[k], f"error {error}")
            with lock:
                outcomes.append(outcome)

    workers = [threading.Thread(target=client, args=(i,)) for i in range(threads)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join(timeout=600)
    assert len(outcomes) == threads * per_thread
    good_ones = [o for o in outcomes if o[0] == "good"]
    bad_ones = [o for o in outcomes if o[0] == "bad"]
    print(f"\n{len(good_ones)} good requests, {len(bad_ones)} bad ones "
          f"({sorted({o[1] for o in bad_ones})})")
    assert good_ones and bad_ones
    assert [o for o in good_ones if o[2] != "right"] == []
    assert [o for o in bad_ones if o[2] != "refused"] == []
    assert {o[1] for o in bad_ones} >= {"png bomb", "jpeg bomb"}


def too_large(command, path):
    """The start of the command's one-line refusal of a bomb at the default budget."""
    return (f"keras-vit {command}: error: {path} is too large to decode: the image is {BOMB} x "
            f"{BOMB} pixels, over the pixel budget of 40000000 pixels")


def test_predict_and_analyze_refuse_bombs_in_one_line(model, bombs, tmp_path, capsys):
    model.save(tmp_path / "tiny.keras")
    # predict makes a failed row of each (exit 1, a line each, the count after them); one run
    # reads both bombs, as it would a folder holding them.
    assert cli.main(["predict", bombs["png"], bombs["jpeg"],
                     "--model", str(tmp_path / "tiny.keras")]) == 1
    error = capsys.readouterr().err.strip().splitlines()
    assert len(error) == 3, error
    assert error[0].startswith(too_large("predict", bombs["png"])), error
    assert error[1].startswith(too_large("predict", bombs["jpeg"])), error
    assert error[2] == "keras-vit predict: 2 of 2 images could not be read.", error
    for kind, path in bombs.items():  # analyze refuses it: exit 2, one line
        argv = ["analyze", path, "--output-dir", str(tmp_path / "a")]
        assert cli.main([*argv, "--model", str(tmp_path / "tiny.keras")]) == 2, kind
        error = capsys.readouterr().err.strip()
        assert len(error.splitlines()) == 1 and error.startswith(too_large("analyze", path)), error
    # A smaller budget on the command line applies too.
    small = str(tmp_path / "small.png")
    Image.fromarray(np.zeros((30, 40, 3), np.uint8)).save(small)
    assert cli.main(["predict", small, "--model", str(tmp_path / "tiny.keras"),
                     "--max-pixels", "1000"]) == 1
    assert "40 x 30 pixels, over the pixel budget of 1000" in capsys.readouterr().err
    assert cli.main(["predict", small, "--model", str(tmp_path / "tiny.keras"),
                     "--max-pixels", "1200"]) == 0


def test_image_folder_skips_and_counts_bombs(bombs, tmp_path):
    root = str(tmp_path / "data")
    write_folder(root)
    for path in bombs.values():
        with open(os.path.join(root, "cats", os.path.basename(path)), "wb") as f:
            f.write(read(path))
    splits = load_image_folder(root)
    skipped = sorted(os.path.basename(p) for p in splits.skipped_files)
    assert skipped == ["bomb.jpg", "bomb.png", "broken.jpg"]
    assert splits.num_train + splits.num_test == 20
