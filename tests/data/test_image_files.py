"""Images and paths a viewer or a shell would hand keras_vit: each case with its input, its
bound (time, memory, exit status, lines) and a check that nothing the user had was changed.

The GIFs are made here: valid files (Pillow writes the image) with a comment extension of
many data sub-blocks, the shape that made the header walk cost one loop step per sub-block.
Pixels are compared with Pillow, the independent decoder.
"""

import dataclasses
import io
import os
import struct
import sys
import threading
import time

import numpy as np
import pytest
import tensorflow as tf
from PIL import Image

from keras_vit import cli, preprocessing
from keras_vit.data import load_image_folder, make_pipeline
from keras_vit.errors import ImageError
from tests.data.test_pixel_budget import serve_in_fresh_process
from tests.export.test_export import SIZE, tiny_classifier

RNG = np.random.default_rng(25)


def encode(image, fmt, **options):
    buffer = io.BytesIO()
    image.save(buffer, fmt, **options)
    return buffer.getvalue()


def noise(height, width):
    return Image.fromarray(RNG.integers(0, 256, (height, width, 3), dtype=np.uint8))


def gif_with_comment(sub_blocks, sub_block_size=1, image=None):
    """A valid GIF whose image follows a comment extension of `sub_blocks` data sub-blocks."""
    data = encode(image or noise(8, 8), "GIF")
    flags = data[10]
    after_screen = 13 + (3 * 2 ** (flags % 8 + 1) if flags & 0x80 else 0)  # global colour table
    comment = (b"\x21\xfe" + (bytes([sub_block_size]) + b"c" * sub_block_size) * sub_blocks
               + b"\x00")
    return data[:after_screen] + comment + data[after_screen:]


def bmp_top_down(data):
    """A bottom-up BMP rewritten top-down: rows reversed, height negated (Pillow writes bottom-up)."""
    offset, = struct.unpack_from("<I", data, 10)
    width, height = struct.unpack_from("<ii", data, 18)
    bits, = struct.unpack_from("<H", data, 28)
    stride = (bits * width + 31) // 32 * 4
    rows = [data[offset + i * stride:offset + (i + 1) * stride] for i in range(height)]
    return (data[:22] + struct.pack("<i", -height) + data[26:offset] + b"".join(rows[::-1])
            + data[offset + height * stride:])


def with_byte(data, at, value):
    return data[:at] + bytes([value]) + data[at + 1:]


PALETTE_BMP = encode(noise(9, 13).quantize(16), "BMP")


@dataclasses.dataclass
class ImageCase:
    name: str
    data: bytes
    # The bound on load_image, eagerly (the old GIF walk: 109 s for 2 KB): 6 s, over 10x the
    # slowest case under load (0.58 s, the palette BMP; tests/conftest.py TIME_BOUNDS).
    seconds: float
    refused: str = ""  # the one line's reason; "" when the pixels must equal Pillow's


IMAGE_CASES = [
    ImageCase("GIF, 1,000 one-byte comment sub-blocks (2 KB)", gif_with_comment(1000), 6.0),
    ImageCase("GIF, 100,000 one-byte comment sub-blocks (200 KB)", gif_with_comment(100_000), 6.0),
    ImageCase("GIF, 4,000 full comment sub-blocks (1 MB)", gif_with_comment(4000, 255), 6.0),
    ImageCase("GIF as Pillow writes it, 240 x 320 noise", encode(noise(240, 320), "GIF"), 6.0),
    ImageCase("8-bit palette BMP", PALETTE_BMP, 6.0),
    ImageCase("8-bit palette BMP, top-down rows", bmp_top_down(PALETTE_BMP), 6.0),
    ImageCase("1-bit BMP, width not a multiple of 8", encode(noise(7, 11).convert("1"), "BMP"), 6.0),
    ImageCase("grey BMP (a 256-grey palette)", encode(noise(6, 5).convert("L"), "BMP"), 6.0),
    ImageCase("RLE8-compressed palette BMP", with_byte(PALETTE_BMP, 30, 1), 6.0,
              refused="cannot be decoded: the image is a compressed or truncated palette BMP"),
    ImageCase("truncated palette BMP", PALETTE_BMP[:-20], 6.0,
              refused="cannot be decoded: the image is a compressed or truncated palette BMP"),
]


@pytest.mark.parametrize("case", IMAGE_CASES, ids=lambda case: case.name)
def test_image_cases_decode_as_pillow_shows_them_within_their_bound(case, tmp_path):
    path = tmp_path / "image"
    path.write_bytes(case.data)
    preprocessing.decode_image(tf.constant(gif_with_comment(1)))  # the walk's one-off trace
    start = time.perf_counter()
    try:
        pixels = preprocessing.load_image(str(path), (SIZE, SIZE))
        outcome = ""
    except preprocessing.ImageError as error:
        outcome = str(error)
    seconds = time.perf_counter() - start
    assert seconds < case.seconds, f"{case.name}: {seconds:.2f} s"
    assert path.read_bytes() == case.data
    if case.refused:
        assert case.refused in outcome and "\n" not in outcome, outcome
        return
    assert not outcome, outcome
    assert pixels.shape == (SIZE, SIZE, 3)
    decoded = preprocessing.decode_image(tf.constant(case.data)).numpy()
    np.testing.assert_array_equal(decoded, np.asarray(Image.open(path).convert("RGB")))
    # One channel: Pillow's ITU-R 601 luma of the same RGB, within TensorFlow's rounding.
    grey = preprocessing.decode_image(tf.constant(case.data), channels=1).numpy()[..., 0]
    luma = np.asarray(Image.open(path).convert("RGB").convert("L"), np.int16)
    assert np.abs(grey.astype(np.int16) - luma).max() <= 1


def test_palette_bmp_shows_its_colours_not_its_indices():
    """The case the issue named: pure blue in an 8-bit BMP was (190, 190, 190)."""
    image = Image.new("P", (4, 2))
    image.putpalette([0, 0, 0] * 190 + [0, 0, 255] + [0, 0, 0] * 65)
    image.putdata([190] * 8)
    decoded = preprocessing.decode_image(tf.constant(encode(image, "BMP"))).numpy()
    assert decoded.shape == (2, 4, 3)
    assert (decoded == (0, 0, 255)).all()


def test_the_gif_walk_reads_every_frame_of_a_long_chain():
    """The walk crosses its chunks and counts what lies beyond: frames after a comment longer
    than a chunk, each frame's size read from its own descriptor."""
    frames = [noise(30, 40) for _ in range(3)]
    animation = encode(frames[0], "GIF", save_all=True, append_images=frames[1:])
    long = gif_with_comment(70_000, image=noise(20, 10))  # 140 KB of comment: two chunks
    for data, expected in ((animation, [30, 40, 3, 3600]), (long, [20, 10, 1, 200])):
        assert [int(v) for v in preprocessing._gif_frames(tf.constant(data))] == expected


# -- paths that are not regular files, and files too large to read whole --------------------

def snapshot(folder):
    """Every entry under `folder` with its size and modification time."""
    found = {}
    for root, dirs, files in os.walk(folder):
        for name in dirs + files:
            status = os.lstat(os.path.join(root, name))
            found[os.path.relpath(os.path.join(root, name), folder)] = (
                status.st_size, status.st_mtime_ns)
    return found


@pytest.fixture
def user_files(tmp_path):
    """A user's folder: a good image, a FIFO named like an image and like a labels file, a
    17 MB (sparse) labels file, and an image folder with a FIFO among its images."""
    Image.fromarray(np.full((12, 12, 3), 90, np.uint8)).save(tmp_path / "good.png")
    os.mkfifo(tmp_path / "fifo.png")
    os.mkfifo(tmp_path / "labels.fifo")
    os.mkfifo(tmp_path / "weights.npz")
    with open(tmp_path / "huge.txt", "wb") as f:
        f.truncate(17 * 2 ** 20)
    for name in ("a", "b"):
        (tmp_path / "folder" / name).mkdir(parents=True)
        for i in range(3):
            noise(8, 8).save(tmp_path / "folder" / name / f"{i}.png")
    os.mkfifo(tmp_path / "folder" / "a" / "fifo.png")
    return tmp_path


def command(*argv):
    def run(folder):
        code = cli.main([a.format(folder=folder) for a in argv])
        return code
    return run


def library(function):
    def run(folder):
        try:
            return function(folder)
        except ImageError as error:
            print(f"error: {error}", file=sys.stderr)
            return 2
    return run


PATH_CASES = [  # (name, how, expected exit status, what the one line says)
    ("--labels a FIFO", command("predict", "{folder}/good.png", "--model", "demo", "--labels",
                                "{folder}/labels.fifo"), 2, "labels.fifo is a FIFO, not a labels file"),
    ("--labels /dev/null", command("predict", "{folder}/good.png", "--model", "demo", "--labels",
                                   "/dev/null"), 2, "/dev/null is a character device"),
    ("--labels a 17 MB file", command("predict", "{folder}/good.png", "--model", "demo", "--labels",
                                      "{folder}/huge.txt"), 2, "larger than 16 MB"),
    ("--weights a FIFO", command("predict", "{folder}/good.png", "--model", "demo", "--weights",
                                 "{folder}/weights.npz"), 2, "weights.npz is a FIFO"),
    ("predict a FIFO image", command("predict", "{folder}/fifo.png", "--model", "demo"), 2,
     "fifo.png"),
    ("analyze a FIFO image", command("analyze", "{folder}/fifo.png", "--model", "demo",
                                     "--output-dir", "{folder}/out"), 2,
     "fifo.png is a FIFO, not an image"),
    ("load_image /dev/null", library(lambda folder: preprocessing.load_image("/dev/null", (8, 8))),
     2, "/dev/null is a character device, not an image"),
    ("a FIFO among a folder's images", library(
        lambda folder: len(load_image_folder(str(folder / "folder")).unsupported_files)), 1, ""),
]


@pytest.mark.parametrize("name, run, status, message", PATH_CASES, ids=[c[0] for c in PATH_CASES])
def test_paths_that_are_not_regular_files_are_refused_unopened(name, run, status, message,
                                                               user_files, capsys):
    """Each case runs in a thread: one that opens a FIFO blocks for ever, and fails here."""
    before = snapshot(user_files)
    outcome = {}
    thread = threading.Thread(target=lambda: outcome.update(status=run(user_files)), daemon=True)
    thread.start()
    # A blocked open never returns: 300 s tells it from the slowest case under load (13.7 s, the
    # FIFO among a folder's images, TensorFlow's first use; tests/conftest.py TIME_BOUNDS).
    thread.join(timeout=300)
    assert "status" in outcome, f"{name}: still blocked after 300 s"
    err = capsys.readouterr().err.strip()
    assert outcome["status"] == status, (name, err)
    if message:
        assert message in err and len(err.splitlines()) == 1, err
    assert snapshot(user_files) == before  # nothing written, nothing read away from a FIFO


# -- serve_bytes and EXIF: one decode path -------------------------------------------------

@pytest.fixture(scope="module")
def exported(served_requests):
    """The model and its SavedModel that `served_requests` (tests/data/conftest.py) serves;
    the model rebuilt here is the same (tiny_classifier seeds its weights)."""
    return tiny_classifier(seed=5), served_requests[0]


def exif_rotated_jpeg():
    """A 24 x 40 JPEG tagged with EXIF orientation 6 (viewers show it rotated, 40 x 24)."""
    exif = Image.Exif()
    exif[0x0112] = 6
    return encode(noise(24, 40), "JPEG", exif=exif.tobytes(), quality=95)


EXIF_JPEG = exif_rotated_jpeg()


@pytest.fixture(scope="module")
def served(served_requests):
    """serve_bytes' answers (tests/data/conftest.py): requests[0] the 200 KB GIF of one-byte
    sub-blocks, requests[1] the EXIF JPEG."""
    return served_requests[1]


def write_requests(folder, requests):
    """(a good PNG's path, the requests' paths) written under `folder`."""
    Image.fromarray(np.full((20, 20, 3), 90, np.uint8)).save(folder / "good.png")
    paths = []
    for i, data in enumerate(requests):
        paths.append(str(folder / f"request-{i}"))
        with open(paths[-1], "wb") as f:
            f.write(data)
    return str(folder / "good.png"), paths


def test_serve_bytes_walks_a_gif_of_many_sub_blocks_fast_in_bounded_memory(served):
    request = served["requests"][0]
    print("\n", {k: v for k, v in request.items() if k != "logits"})
    assert request["outcome"] == "served" and request["next_served"], request
    # 36 s a request before; 0.13 s under load, and 1.5 s is over 10x that (TIME_BOUNDS).
    assert request["seconds"] < 1.5, request
    assert request["peak_growth_mb"] < 50, request


@pytest.mark.slow
def test_serve_bytes_walks_a_16_mb_gif_in_bounded_memory(exported, tmp_path, python):
    """A large GIF's walk widens one 64 KB chunk at a time, never the file (as int64, 16 MB
    became 130 MB). The default test above covers the walk; this one its memory at scale:
    under four times the file (the request's copy into the graph, giflib's reading of it, a
    chunk), where widening alone would be eight."""
    results = serve_in_fresh_process(python, exported[1], *write_requests(
        tmp_path, [gif_with_comment(64_000, 255)]))
    request = results["requests"][0]
    print("\n", {k: v for k, v in request.items() if k != "logits"})
    assert request["outcome"] == "served" and request["next_served"], request
    assert request["peak_growth_mb"] < 4 * 16, request
    assert request["seconds"] < 30, request


def test_exif_orientation_is_ignored_alike_by_every_path(exported, served, tmp_path):
    """keras_vit, like TensorFlow and Keras, decodes the stored pixels and ignores EXIF
    orientation: predict and analyze (load_image), the folder dataset's pipeline and
    serve_bytes give one array for a JPEG tagged "rotate 90"."""
    model = exported[0]
    assert Image.open(io.BytesIO(EXIF_JPEG)).getexif()[0x0112] == 6
    for name in ("a", "b"):
        (tmp_path / "folder" / name).mkdir(parents=True)
        for i in range(3):
            (tmp_path / "folder" / name / f"{i}.jpg").write_bytes(EXIF_JPEG)
    decoded = preprocessing.decode_image(tf.constant(EXIF_JPEG)).numpy()
    assert decoded.shape == (24, 40, 3)  # as stored; exif_transpose would give (40, 24, 3)
    np.testing.assert_array_equal(decoded, tf.io.decode_jpeg(EXIF_JPEG).numpy())
    pixels = preprocessing.load_image(str(tmp_path / "folder" / "a" / "0.jpg"), (SIZE, SIZE))
    splits = load_image_folder(str(tmp_path / "folder"))
    batch, _ = next(iter(make_pipeline(splits.test, SIZE, 1, training=False)))
    np.testing.assert_allclose(batch[0].numpy(), preprocessing.preprocess_input(pixels),
                               atol=1e-6)
    np.testing.assert_allclose(served["requests"][1]["logits"],
                               model(preprocessing.preprocess_input(pixels[None])), atol=1e-5)


def walk_gif_in_python(data):
    """The GIF block walk one step at a time, as giflib does it: the reference for the
    vectorised walk. (height, width, frames, pixels of all frames)."""
    def table(flags):
        return 3 * 2 ** (flags % 8 + 1) if flags >= 128 else 0

    padded = data + bytes(1024)
    height, width = struct.unpack_from("<H", padded, 8)[0], struct.unpack_from("<H", padded, 6)[0]
    frames = pixels = 0
    at = 13 + table(padded[10])
    while at < len(data):
        if padded[at] == 0x2C:
            frame_w, frame_h = struct.unpack_from("<HH", padded, at + 5)
            height, width = max(height, frame_h), max(width, frame_w)
            frames, pixels = frames + 1, pixels + frame_w * frame_h
            at += 11 + table(padded[at + 9])
        elif padded[at] == 0x21:
            at += 2
        else:
            break
        while at < len(data) and padded[at]:
            at += 1 + padded[at]
        at += 1
    return [height, width, frames, pixels]


def random_gif_structure(rng, blocks):
    """Header, screen, a colour table, then `blocks` random extensions and image descriptors
    (random sizes and local tables) with random sub-blocks, and the trailer."""
    flags = int(rng.choice([0, 0x80 | int(rng.integers(0, 8))]))
    out = [b"GIF89a", struct.pack("<HHBBB", *rng.integers(1, 300, 2), flags, 0, 0)]
    out.append(bytes(3 * 2 ** (flags % 8 + 1)) if flags & 0x80 else b"")
    for _ in range(blocks):
        if rng.random() < 0.5:
            local = int(rng.choice([0, 0x80 | int(rng.integers(0, 8))]))
            out.append(b"\x2c" + struct.pack("<HHHHB", 0, 0, *rng.integers(1, 2000, 2), local))
            out.append((bytes(3 * 2 ** (local % 8 + 1)) if local & 0x80 else b"") + b"\x08")
        else:
            out.append(b"\x21" + bytes([int(rng.integers(0, 256))]))
        for size in rng.choice([1, 2, 255, int(rng.integers(1, 256))], int(rng.integers(0, 600))):
            out.append(bytes([size]) + rng.integers(0, 256, size, dtype=np.uint8).tobytes())
        out.append(b"\x00")
    return b"".join(out) + b"\x3b"


def test_the_gif_walk_agrees_with_a_step_by_step_walk():
    """Random block structures (many crossing the walk's 64 KB chunks), and the same files cut
    short at random points: the vectorised walk counts what the one-step walk counts."""
    rng = np.random.default_rng(7)
    for _ in range(12):
        data = random_gif_structure(rng, int(rng.integers(1, 12)))
        for cut in (data, data[:int(rng.integers(14, len(data)))]):
            assert [int(v) for v in preprocessing._gif_frames(tf.constant(cut))] == \
                walk_gif_in_python(cut), len(cut)


def test_a_torn_jpeg_is_one_line_without_libjpegs_own(tmp_path, monkeypatch, capfd):
    """libjpeg prints "Improper call to JPEG library in state 201" to the process's stderr
    itself (file descriptor 2, so capfd) when TensorFlow's decoder fails on a torn JPEG; the
    command says the file is not an image, once. As the command: running_the_command."""
    from keras_vit._support import tf_log as _tf_log

    whole = encode(noise(16, 16), "JPEG")
    path = tmp_path / "torn.jpg"
    path.write_bytes(whole[:len(whole) // 2])
    with pytest.raises(ImageError):  # a library user's process is left alone: libjpeg's line
        preprocessing.load_image(str(path), (8, 8))
    assert "Improper call to JPEG library" in capfd.readouterr().err
    monkeypatch.setattr(_tf_log, "running_the_command", lambda: True)
    assert cli.main(["analyze", str(path), "--model", "demo", "--output-dir",
                     str(tmp_path / "out")]) == 2
    assert capfd.readouterr().err.splitlines() == [
        f"keras-vit analyze: error: {path} is not a JPEG, PNG, GIF, BMP or WebP image (Invalid "
        f"JPEG data, size {len(whole) // 2})."]
