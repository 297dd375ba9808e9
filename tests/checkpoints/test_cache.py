"""The weights cache, through an HTTP server on 127.0.0.1 (KERAS_VIT_WEIGHTS_URL points at it).

Each case ends with the right file loaded or a one-line error naming the file and
the fix; no partial or wrong file is ever kept or pinned.
"""

import base64
import dataclasses
import http.server
import importlib
import io
import json
import logging
import os
import re
import shutil
import signal
import subprocess
import sys
import threading
import time

import numpy as np
import pytest

import keras_vit
from keras_vit.atomic import TEMP_PREFIX
from keras_vit.checkpoints import find_checkpoint
from keras_vit.variants import get_variant
from tests.bare_packages import FRAMEWORKS, PRELUDE
from tests.conftest import ROOT
from tests.oracle import random_vit_npz

cat = importlib.import_module("keras_vit.checkpoints.catalogue")
cache = importlib.import_module("keras_vit.checkpoints.cache")
download = importlib.import_module("keras_vit.checkpoints.download")

TI = get_variant("Ti/16")
TAG = "augreg-in21k-ft-in1k-224"
# A child that fetches the Ti/16 file and prints the sum of its class token as read back by
# NumPy, then the frameworks it imported: none (tests/bare_packages.py), so each costs no
# TensorFlow start-up.
FETCH_CHILD = PRELUDE + f"""
import numpy as np
from keras_vit.checkpoints.catalogue import find_checkpoint
from keras_vit.variants import get_variant
path = find_checkpoint(get_variant("Ti/16"), {TAG!r}).path()
with np.load(path) as arrays:
    print("CLS", float(arrays["cls"].sum()))
"""


class _Handler(http.server.BaseHTTPRequestHandler):
    def log_message(self, *args):
        pass

    def do_GET(self):
        server = self.server
        server.requests.append(self.path)
        mode = server.modes.get(self.path, "normal")
        if mode == "silent":  # accept, never answer
            time.sleep(30)
            return
        if mode == "slow-status":  # the status line a byte at a time, never finished
            for byte in b"HTTP/1.1 200 OK\r\nContent-Type: application/octet-stream\r\n" * 100:
                self.wfile.write(bytes([byte]))
                self.wfile.flush()
                time.sleep(0.5)
            return
        if mode == "endless":  # a body without end and without Content-Length
            self.send_response(200)
            self.end_headers()
            block = b"\0" * (1 << 20)
            try:
                while True:
                    self.wfile.write(block)
                    server.sent += len(block)
            except OSError:  # the client hung up
                return
        if mode == "auth" and self.headers.get("Authorization") != server.expected_auth:
            self.send_error(401)
            return
        if mode == "html":
            body = b"<!DOCTYPE html><html><body>Sign in to continue</body></html>"
            self._headers(len(body), "text/html")
            self.wfile.write(body)
            return
        path = os.path.join(server.root, *self.path.lstrip("/").split("/"))
        if not os.path.isfile(path):
            self.send_error(404)
            return
        data = open(path, "rb").read()
        self._headers(len(data))
        if mode == "cut":  # the server dies halfway: half the bytes, then the connection closes
            self.wfile.write(data[:len(data) // 2])
            self.wfile.flush()
            self.connection.shutdown(2)
        elif mode == "trickle":
            for i in range(0, len(data), 16):
                self.wfile.write(data[i:i + 16])
                self.wfile.flush()
                time.sleep(0.05)
        elif mode == "slow-half":  # half at once, then a trickle: a client is mid-download
            self.wfile.write(data[:len(data) // 2])
            self.wfile.flush()
            time.sleep(30)
        elif mode == "delay":
            time.sleep(1.0)
            self.wfile.write(data)
        else:
            self.wfile.write(data)

    def _headers(self, length, kind="application/octet-stream"):
        self.send_response(200)
        self.send_header("Content-Type", kind)
        self.send_header("Content-Length", str(length))
        self.end_headers()


@pytest.fixture
def server(tmp_path, monkeypatch):
    root = tmp_path / "served"
    root.mkdir()
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
    httpd.daemon_threads = True
    httpd.root, httpd.modes, httpd.requests, httpd.sent = str(root), {}, [], 0
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    url = f"http://127.0.0.1:{httpd.server_address[1]}"
    monkeypatch.setenv("KERAS_VIT_WEIGHTS_URL", url)
    monkeypatch.setenv("KERAS_HOME", str(tmp_path / "home"))
    httpd.url = url
    yield httpd
    httpd.shutdown()


def _serve(server, checkpoint, arrays_writer):
    """Writes a file at the URL path of `checkpoint` on `server`; returns its arrays."""
    rel = checkpoint.url[len(cache.OFFICIAL_BASE_URL) + 1:]
    path = os.path.join(server.root, *rel.split("/"))
    os.makedirs(os.path.dirname(path), exist_ok=True)
    return arrays_writer(path), "/" + rel


def _ti_file(classes=1000, seed=0):
    return lambda path: random_vit_npz(path, TI, (14, 14), classes=classes, seed=seed)


def _one_line(error):
    text = str(error)
    assert "\n" not in text, text
    return text


def _no_stray(cache):
    """Every file under the cache that a later call could use: no partials, no wrong files."""
    return sorted(os.path.relpath(os.path.join(d, f), cache) for d, _, fs in os.walk(cache)
                  for f in fs)


def test_every_catalogue_entry_has_its_own_cache_path(monkeypatch, tmp_path):
    monkeypatch.setenv("KERAS_HOME", str(tmp_path))
    entries = [c for c in keras_vit.catalogue() if c.url]
    paths = [c.cached_path for c in entries]
    assert len(set(paths)) == len(paths)
    b16 = [find_checkpoint(get_variant("B/16"), t).cached_path
           for t in ("imagenet21k", "imagenet21k+imagenet2012")]
    assert b16[0] != b16[1]
    assert b16[0].endswith(os.path.join("vit_models", "imagenet21k", "ViT-B_16.npz"))


def test_a_hub_entry_asked_of_another_variant_is_refused_before_any_download():
    with pytest.raises(ValueError, match="holds ViT-B_16 weights"):
        keras_vit.ViT_B32(weights="hf://google/vit-base-patch16-224")


def test_mirror_variable_replaces_the_official_prefix(monkeypatch):
    checkpoint = find_checkpoint(TI, TAG)
    monkeypatch.delenv("KERAS_VIT_WEIGHTS_URL", raising=False)
    assert checkpoint.download_url == checkpoint.url
    monkeypatch.setenv("KERAS_VIT_WEIGHTS_URL", "http://mirror.example/vit/")
    assert checkpoint.download_url == "http://mirror.example/vit/" + checkpoint.url.split(
        "vit_models/")[1]


def test_download_loads_the_served_file_and_pins_it(server):
    checkpoint = find_checkpoint(TI, TAG)
    arrays, _ = _serve(server, checkpoint, _ti_file())
    model = keras_vit.ViT_Ti16(weights=TAG)
    np.testing.assert_array_equal(model.get_layer("cls").cls.numpy(), arrays["cls"])
    pins = json.loads(open(os.path.join(cat.cache_dir(), "checksums.json")).read())
    assert pins[checkpoint.cache_key] == cache._sha256(checkpoint.cached_path)
    keras_vit.ViT_Ti16(weights=TAG)  # a cache hit: no second request
    assert len(server.requests) == 1


def test_a_served_file_contradicting_its_entry_is_refused_and_not_kept(server):
    checkpoint = find_checkpoint(TI, TAG)  # declares 1000 classes
    _serve(server, checkpoint, _ti_file(classes=21843))
    with pytest.raises(keras_vit.WeightsUnavailableError) as info:
        checkpoint.path()
    text = _one_line(info.value)
    assert "classes 21843 where the entry says 1000" in text and server.url in text
    assert _no_stray(cat.cache_dir()) == []


def test_a_cached_file_contradicting_its_entry_is_refused_on_every_hit(server):
    checkpoint = find_checkpoint(TI, TAG)
    os.makedirs(os.path.dirname(checkpoint.cached_path))
    random_vit_npz(checkpoint.cached_path, TI, (24, 24), classes=1000)  # a 384 px file
    before = keras_vit.ViT_Ti16(image_size=224)
    weights = [w.numpy() for w in before.weights]
    with pytest.raises(keras_vit.CheckpointError) as info:
        keras_vit.ViT_Ti16(weights=TAG)
    text = _one_line(info.value)
    assert checkpoint.cached_path in text and "resolution 384 where the entry says 224" in text
    assert "delete it" in text
    assert not os.path.exists(os.path.join(cat.cache_dir(), "checksums.json"))  # never pinned
    assert server.requests == []
    # The refusal happened before any model was touched (the constructor never built one).
    for w, v in zip(before.weights, weights):
        np.testing.assert_array_equal(w.numpy(), v)


def test_a_download_cut_halfway_then_retried_ends_with_the_right_file(server):
    checkpoint = find_checkpoint(TI, TAG)
    arrays, url_path = _serve(server, checkpoint, _ti_file())
    server.modes[url_path] = "cut"
    with pytest.raises(keras_vit.WeightsUnavailableError) as info:
        checkpoint.path()
    text = _one_line(info.value)
    assert checkpoint.cached_path in text and "KERAS_VIT_WEIGHTS_URL" in text
    assert _no_stray(cat.cache_dir()) == []
    server.modes[url_path] = "normal"
    model = keras_vit.ViT_Ti16(weights=TAG)
    np.testing.assert_array_equal(model.get_layer("cls").cls.numpy(), arrays["cls"])


def test_a_client_killed_mid_download_leaves_nothing_a_later_call_uses(server, python):
    checkpoint = find_checkpoint(TI, TAG)
    arrays, url_path = _serve(server, checkpoint, _ti_file())
    server.modes[url_path] = "slow-half"
    env = {**os.environ, "PYTHONPATH": ROOT}
    process = subprocess.Popen([sys.executable, "-c", FETCH_CHILD], env=env)
    directory = os.path.dirname(checkpoint.cached_path)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:  # wait until half the file is on disk
        parts = [f for f in os.listdir(directory)] if os.path.isdir(directory) else []
        if parts and os.path.getsize(os.path.join(directory, parts[0])) > 0:
            break
        time.sleep(0.1)
    process.send_signal(signal.SIGKILL)
    process.wait()
    left = os.listdir(directory)
    assert left and all(f.startswith(TEMP_PREFIX) for f in left)  # only a private partial file
    assert not os.path.exists(checkpoint.cached_path)
    server.modes[url_path] = "normal"
    model = keras_vit.ViT_Ti16(weights=TAG)
    np.testing.assert_array_equal(model.get_layer("cls").cls.numpy(), arrays["cls"])
    assert os.listdir(directory) == [os.path.basename(checkpoint.cached_path)]  # partial removed


@pytest.mark.parametrize("mode", ["silent", "trickle"])
def test_a_dead_or_trickling_server_is_refused_within_the_stall_timeout(server, monkeypatch, mode):
    monkeypatch.setattr(download, "DOWNLOAD_TIMEOUT_S", 1)
    checkpoint = find_checkpoint(TI, TAG)
    _, url_path = _serve(server, checkpoint, _ti_file())
    server.modes[url_path] = mode
    start = time.monotonic()
    with pytest.raises(keras_vit.WeightsUnavailableError) as info:
        checkpoint.path()
    # A hostile-input bound (tests/conftest.py TIME_BOUNDS): a dead or trickling server held the
    # client for ever before; the 1 s stall timeout took 1.18 s under load, and 12 s is 10x that.
    assert time.monotonic() - start < 12
    text = _one_line(info.value)
    assert checkpoint.cached_path in text and "copy it to the cache path" in text
    assert _no_stray(cat.cache_dir()) == []


def test_an_html_page_served_with_200_is_refused(server):
    checkpoint = find_checkpoint(TI, TAG)
    _, url_path = _serve(server, checkpoint, _ti_file())
    server.modes[url_path] = "html"
    with pytest.raises(keras_vit.WeightsUnavailableError) as info:
        checkpoint.path()
    text = _one_line(info.value)
    assert "HTML page" in text and checkpoint.cached_path in text
    assert _no_stray(cat.cache_dir()) == []


def test_two_processes_sharing_the_cache_both_load_the_right_file(server, python):
    checkpoint = find_checkpoint(TI, TAG)
    arrays, url_path = _serve(server, checkpoint, _ti_file(seed=7))
    server.modes[url_path] = "delay"  # both requests are in flight together
    env = {**os.environ, "PYTHONPATH": ROOT}
    processes = [subprocess.Popen([sys.executable, "-c", FETCH_CHILD + FRAMEWORKS], env=env,
                                  stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
                 for _ in range(2)]
    outs = [p.communicate(timeout=300) for p in processes]
    expected = float(arrays["cls"].sum())
    for p, (out, err) in zip(processes, outs):
        assert p.returncode == 0, err[-2000:]
        assert float(re.search(r"CLS (\S+)", out).group(1)) == pytest.approx(expected, rel=1e-6)
        assert "FRAMEWORKS []" in out  # the cache code imports no TensorFlow (bare_packages.py)
    # The file both got loads into a model (in this process: the loader is the same code).
    model = keras_vit.ViT_Ti16(weights=TAG)
    np.testing.assert_array_equal(model.get_layer("cls").cls.numpy(), arrays["cls"])
    assert _no_stray(cat.cache_dir()) == sorted(["checksums.json", checkpoint.cache_key])


# The capabilities that let root ignore file modes. Dropped, root meets the modes as any user
# does, and stays the owner of the interpreter and the environment: a virtual environment in
# root's own 0700 home folder stays readable (switching to another user, as this test once did,
# made `sys.executable` unreadable there: ModuleNotFoundError instead of a test).
MODE_OVERRIDES = "-dac_override,-dac_read_search,-fowner"


def _run_without_write_rights(args, env):
    """Runs `args` as this user, unable to write what its file modes forbid: as root, without
    the capabilities that override file modes (setpriv, util-linux); otherwise as it is."""
    if os.geteuid() == 0:
        if shutil.which("setpriv") is None:
            pytest.skip("running as root without setpriv (util-linux): root ignores file modes, "
                        "so a read-only cache cannot be made")
        args = ["setpriv", f"--inh-caps={MODE_OVERRIDES}", f"--bounding-set={MODE_OVERRIDES}",
                "--", *args]
    result = subprocess.run(args, env=env, capture_output=True, text=True, timeout=300)
    if result.returncode != 0 and result.stderr.startswith("setpriv:"):
        pytest.skip(f"setpriv cannot drop capabilities here: {result.stderr.strip()}")
    return result


def test_a_read_only_cache_holding_the_right_file_is_used(tmp_path):
    home = tmp_path / "ro"
    checkpoint = find_checkpoint(TI, TAG)
    path = home / "keras_vit" / checkpoint.cache_key
    path.parent.mkdir(parents=True)
    arrays = random_vit_npz(path, TI, (14, 14), classes=1000, seed=3)
    for d, _dirs, files in os.walk(home):
        os.chmod(d, 0o555)
        for f in files:
            os.chmod(os.path.join(d, f), 0o444)
    code = FETCH_CHILD + (
        "from keras_vit.checkpoints.errors import WeightsUnavailableError\n"
        "try:\n    find_checkpoint(get_variant('Ti/16'), 'augreg-in21k').path()\n"
        "except WeightsUnavailableError as e:\n    print('ERROR', e)\n") + FRAMEWORKS
    env = {"PATH": "/usr/bin:/bin", "HOME": str(tmp_path), "KERAS_HOME": str(home),
           "KERAS_VIT_WEIGHTS_URL": "http://127.0.0.1:9", "TF_CPP_MIN_LOG_LEVEL": "3",
           "PYTHONPATH": ROOT}
    try:
        result = _run_without_write_rights([sys.executable, "-c", code], env)
        assert result.returncode == 0, result.stderr[-2000:]
        assert float(re.search(r"CLS (\S+)", result.stdout).group(1)) == pytest.approx(
            float(arrays["cls"].sum()), rel=1e-6)
        # The cache really was read-only to it: the download it needed was refused as such.
        error = re.search(r"ERROR (.*)", result.stdout).group(1)
        assert "not writable" in error and "KERAS_HOME" in error
        assert sorted(os.listdir(path.parent)) == [path.name]  # nothing written
        assert "FRAMEWORKS []" in result.stdout  # no TensorFlow start-up (bare_packages.py)
    finally:
        for d, _dirs, _files in os.walk(home):
            os.chmod(d, 0o755)


def test_a_file_copied_by_hand_as_the_message_advises_is_used(server):
    checkpoint = find_checkpoint(TI, TAG)
    server.shutdown()  # offline
    old = os.path.join(cat.cache_dir(), checkpoint.filename)
    os.makedirs(cat.cache_dir())
    random_vit_npz(old, TI, (14, 14), classes=1000, seed=1)  # an old flat-layout file
    with pytest.raises(keras_vit.WeightsUnavailableError) as info:
        keras_vit.ViT_Ti16(weights=TAG)
    text = _one_line(info.value)
    assert "was not used" in text  # the flat-layout file is never trusted blindly
    target = re.search(r"copy it to the cache path (\S+),", text).group(1)
    assert target == checkpoint.cached_path
    os.makedirs(os.path.dirname(target), exist_ok=True)
    arrays = random_vit_npz(target, TI, (14, 14), classes=1000, seed=2)
    model = keras_vit.ViT_Ti16(weights=TAG)
    np.testing.assert_array_equal(model.get_layer("cls").cls.numpy(), arrays["cls"])


@pytest.mark.slow
def test_both_b16_tags_in_both_orders_load_their_own_files(server):
    """The README's quickstart weights lines as written (1k, then 21k), then the other order:
    each tag gets its own file (full-size B/16, told apart by content)."""
    from tests import snippets

    b16 = get_variant("B/16")
    in21k = find_checkpoint(b16, "imagenet21k")
    in1k = find_checkpoint(b16, "imagenet21k+imagenet2012")
    a21, _ = _serve(server, in21k, lambda p: random_vit_npz(p, b16, (14, 14), classes=21843,
                                                            pre_logits=768, seed=1))
    a1k, _ = _serve(server, in1k, lambda p: random_vit_npz(p, b16, (24, 24), classes=1000, seed=2))
    root = ROOT
    block = [b for b in snippets.read_blocks(os.path.join(root, "README.md"), root)
             if 'weights="imagenet21k+imagenet2012"' in b.code]
    assert len(block) == 1
    namespace = {"keras_vit": keras_vit, "np": np,
                 "x": np.random.default_rng(0).uniform(-1, 1, (1, 384, 384, 3)).astype("float32")}
    exec(block[0].code, namespace)
    model, tuned = namespace["model"], namespace["tuned"]
    assert model.output_shape == (None, 1000) and tuned.output_shape == (None, 5)
    np.testing.assert_array_equal(model.get_layer("head").kernel.numpy(), a1k["head/kernel"])
    np.testing.assert_array_equal(model.get_layer("cls").cls.numpy(), a1k["cls"])
    np.testing.assert_array_equal(tuned.get_layer("cls").cls.numpy(), a21["cls"])
    del model, tuned, namespace

    shutil.rmtree(cat.cache_dir())
    tuned = keras_vit.ViT_B16(weights="imagenet21k", image_size=384, classes=5)
    np.testing.assert_array_equal(tuned.get_layer("cls").cls.numpy(), a21["cls"])
    del tuned
    model = keras_vit.ViT_B16(weights="imagenet21k+imagenet2012")
    assert model.output_shape == (None, 1000)
    np.testing.assert_array_equal(model.get_layer("head").kernel.numpy(), a1k["head/kernel"])
    assert sorted(server.requests) == sorted(["/imagenet21k/ViT-B_16.npz",
                                              "/imagenet21k+imagenet2012/ViT-B_16.npz"] * 2)


# --- bounds: size, headers deadline, credentials -------------------------------------------

def test_an_endless_body_stops_at_the_declared_size_and_leaves_nothing(server):
    # The entry as the catalogue's official files declare their size (the augreg ones do not).
    checkpoint = dataclasses.replace(find_checkpoint(TI, TAG), size_mib=21.0)
    declared = checkpoint.size_mib * (1 << 20)
    _, url_path = _serve(server, checkpoint, _ti_file())
    server.modes[url_path] = "endless"
    written = io.BytesIO()
    with pytest.raises(ConnectionError, match="more than the"):
        download.stream(server.url + url_path, written, cache._size_limit(checkpoint))
    assert declared <= len(written.getvalue()) <= 1.1 * declared
    # Through the catalogue: one line, nothing left in the cache.
    with pytest.raises(keras_vit.WeightsUnavailableError) as info:
        checkpoint.path()
    assert "more than the" in _one_line(info.value)
    assert _no_stray(cat.cache_dir()) == []


def test_a_body_announced_larger_than_the_entry_is_refused_before_reading(server):
    checkpoint = find_checkpoint(TI, TAG)
    _, url_path = _serve(server, checkpoint, _ti_file())
    written = io.BytesIO()
    with pytest.raises(ConnectionError, match="announces"):
        download.stream(server.url + url_path, written, limit=1000)
    assert written.getvalue() == b""


@pytest.mark.parametrize("mode", ["slow-status", "silent"])
def test_slow_headers_and_a_silent_server_are_refused_at_their_deadlines(server, mode):
    """At the default timeouts: a status line sent a byte every half second (each read
    within the socket timeout) is stopped by the headers' deadline; silence by the timeout.
    Both held the client for ever before. A hostile-input bound (tests/conftest.py TIME_BOUNDS):
    the 10 s deadlines took 10.05 s under load, and 110 s is over 10x that."""
    checkpoint = find_checkpoint(TI, TAG)
    _, url_path = _serve(server, checkpoint, _ti_file())
    server.modes[url_path] = mode
    start = time.monotonic()
    with pytest.raises(keras_vit.WeightsUnavailableError) as info:
        checkpoint.path()
    assert time.monotonic() - start < 110
    assert checkpoint.cached_path in _one_line(info.value)
    assert _no_stray(cat.cache_dir()) == []


def test_credentials_in_the_mirror_url_are_sent_and_never_shown(server, monkeypatch, caplog):
    secret = "s3cr3t-p@ss"
    user_info = f"reader:{secret.replace('@', '%40')}"
    monkeypatch.setenv("KERAS_VIT_WEIGHTS_URL", server.url.replace("://", f"://{user_info}@"))
    server.expected_auth = "Basic " + base64.b64encode(f"reader:{secret}".encode()).decode()
    checkpoint = find_checkpoint(TI, TAG)
    arrays, url_path = _serve(server, checkpoint, _ti_file())
    server.modes[url_path] = "auth"
    caplog.set_level(logging.DEBUG)
    assert os.path.exists(checkpoint.path())  # the server saw the right Authorization header
    # A failing download through the same mirror: the message shows the URL, not the secret.
    other = find_checkpoint(TI, "augreg-in21k")
    with pytest.raises(keras_vit.WeightsUnavailableError) as info:
        other.path()
    text = _one_line(info.value)
    assert "***@127.0.0.1" in text and secret not in text and "reader" not in text
    assert secret not in caplog.text and secret not in repr(info.value.__cause__)


def test_redact_keeps_everything_but_the_credentials():
    assert download.redact("https://u:p@host:8443/a/b.npz?x=1") == "https://***@host:8443/a/b.npz?x=1"
    assert download.redact("https://host/a.npz") == "https://host/a.npz"
