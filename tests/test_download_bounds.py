"""Downloads bounded in size and time, and credentials in the mirror URL used, never shown;
against a server on 127.0.0.1 (tests/test_cache.py's)."""

import base64
import dataclasses
import io
import logging
import os
import time

import pytest

import keras_vit
from keras_vit.checkpoints import find_checkpoint
from tests.test_cache import TAG, TI, _no_stray, _one_line, _serve, _ti_file, cat, download, server  # noqa: F401


def test_an_endless_body_stops_at_the_declared_size_and_leaves_nothing(server, monkeypatch):
    # The entry as the catalogue's official files declare their size (the augreg ones do not).
    checkpoint = dataclasses.replace(find_checkpoint(TI, TAG), size_mib=21.0)
    declared = checkpoint.size_mib * (1 << 20)
    _, url_path = _serve(server, checkpoint, _ti_file())
    server.modes[url_path] = "endless"
    written = io.BytesIO()
    with pytest.raises(ConnectionError, match="more than the"):
        download.stream(server.url + url_path, written, cat._size_limit(checkpoint))
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
def test_slow_headers_and_a_silent_server_are_refused_within_thirty_seconds(server, mode):
    """At the default timeouts: a status line sent a byte every half second (each read
    within the socket timeout) is stopped by the headers' deadline; silence by the timeout."""
    checkpoint = find_checkpoint(TI, TAG)
    _, url_path = _serve(server, checkpoint, _ti_file())
    server.modes[url_path] = mode
    start = time.monotonic()
    with pytest.raises(keras_vit.WeightsUnavailableError) as info:
        checkpoint.path()
    assert time.monotonic() - start < 30
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
