"""The catalogue of official checkpoints: look-up, download into a cache, checksums.

The catalogue itself is data (`catalogue.json` beside this file). Files are
cached under `$KERAS_HOME/keras_vit/` (default `~/.keras/keras_vit/`), as
Keras caches its own downloads.
"""

import dataclasses
import functools
import hashlib
import json
import os
import shutil
import urllib.request
from importlib import resources

from keras_vit.checkpoints.errors import WeightsUnavailableError
from keras_vit.checkpoints.formats.npz import inspect_npz

__all__ = ["Checkpoint", "catalogue", "find_checkpoint", "resolve_weights", "pin_checksum",
           "cache_dir"]

# How long one network step may stall before the download gives up.
DOWNLOAD_TIMEOUT_S = 10


@dataclasses.dataclass(frozen=True)
class Checkpoint:
    """One official weight file: where it lives and what the model needs to match it."""

    variant: str
    tag: str
    url: str | None
    classes: int | None
    resolution: int | None
    representation_size: int | None
    size_mib: float | None = None
    sha256: str | None = None
    source: str = ""
    local_path: str | None = None  # set for a user's own .npz file

    @property
    def filename(self):
        return os.path.basename(self.local_path or self.url)

    @property
    def cached_path(self):
        return os.path.join(cache_dir(), self.filename)

    def path(self):
        """A local path of the file, downloading it into the cache if needed."""
        if self.local_path:
            return self.local_path
        return _download(self)


@functools.cache
def catalogue():
    """Every catalogued checkpoint, as `Checkpoint` records."""
    text = resources.files("keras_vit.checkpoints").joinpath("catalogue.json").read_text()
    return tuple(Checkpoint(**entry) for entry in json.loads(text)["checkpoints"])


def find_checkpoint(variant, tag):
    """The catalogue entry for a variant (a `Variant`) and a tag such as "imagenet21k"."""
    matches = [c for c in catalogue() if c.variant == variant.name and c.tag == tag]
    if matches:
        return matches[0]
    tags = sorted({c.tag for c in catalogue()})
    if tag not in tags:
        from keras_vit._names import did_you_mean

        raise ValueError(f"Unknown weights {tag!r}.{did_you_mean(tag, tags)} Use None, the path of "
                         f"an .npz file, or one of the catalogue tags: {', '.join(tags)}.")
    available = sorted(c.tag for c in catalogue() if c.variant == variant.name)
    raise ValueError(f"There are no {tag!r} weights for {variant.name}. Available for this "
                     f"variant: {', '.join(available) or 'none'}.")


def resolve_weights(variant, weights, image_size=None):
    """Turns a constructor's `weights` argument into a `Checkpoint`, or None."""
    if weights is None:
        return None
    if not isinstance(weights, (str, os.PathLike)):
        raise TypeError(f"weights must be None, a catalogue tag or a path, got {type(weights).__name__}.")
    weights = os.fspath(weights)
    if weights.endswith(".npz") or os.path.sep in weights:
        if not os.path.isfile(weights):
            raise FileNotFoundError(f"No checkpoint file at {weights!r}.")
        info = inspect_npz(weights)
        return Checkpoint(variant=variant.name, tag="file", url=None, classes=info.classes,
                          resolution=info.resolution(variant), local_path=weights,
                          representation_size=info.representation_size)
    return find_checkpoint(variant, weights)


def cache_dir():
    """Where downloaded checkpoints live: `$KERAS_HOME/keras_vit`."""
    home = os.environ.get("KERAS_HOME", os.path.join(os.path.expanduser("~"), ".keras"))
    return os.path.join(home, "keras_vit")


def _pins_path():
    return os.path.join(cache_dir(), "checksums.json")


def _pins():
    try:
        with open(_pins_path()) as f:
            return json.load(f)
    except FileNotFoundError:
        return {}


def pin_checksum(filename, sha256):
    """Records the sha256 a checkpoint file must have; later loads verify it.

    `filename` is the file's base name (`Checkpoint.filename`). Without a pin,
    keras_vit records the hash of a file the first time it uses it, so a file
    that changes or is damaged in the cache afterwards is detected.
    """
    if len(sha256) != 64 or any(c not in "0123456789abcdef" for c in sha256.lower()):
        raise ValueError(f"A sha256 is 64 hexadecimal digits, got {sha256!r}.")
    pins = _pins()
    pins[filename] = sha256.lower()
    os.makedirs(cache_dir(), exist_ok=True)
    tmp = _pins_path() + ".tmp"
    with open(tmp, "w") as f:
        json.dump(pins, f, indent=1)
    os.replace(tmp, _pins_path())  # atomic: never a half-written pin file


def _download(checkpoint):
    """The cached file of `checkpoint`, fetched first when absent or not the pinned file."""
    expected = checkpoint.sha256 or _pins().get(checkpoint.filename)
    path = checkpoint.cached_path
    if not (os.path.exists(path) and (not expected or _sha256(path) == expected)):
        try:
            _fetch(checkpoint.url, path)
        except OSError as error:  # URLError, timeouts and refused connections are OSErrors
            raise WeightsUnavailableError(_offline_message(checkpoint, error)) from error
        if expected and _sha256(path) != expected:
            raise WeightsUnavailableError(
                f"{path} does not have the sha256 recorded for it ({expected}); the download "
                "is damaged or the file changed. Delete the file and call again.")
    if not expected:  # trust on first use: later damage to the cached file is caught
        pin_checksum(checkpoint.filename, _sha256(path))
    return path


def _fetch(url, path):
    """Downloads `url` to `path` through a temporary file, renamed into place when whole."""
    os.makedirs(os.path.dirname(path), exist_ok=True)
    partial = f"{path}.part-{os.getpid()}"
    try:
        # The timeout bounds each network step of this request alone; no global setting.
        with urllib.request.urlopen(url, timeout=DOWNLOAD_TIMEOUT_S) as response, \
                open(partial, "wb") as f:
            shutil.copyfileobj(response, f, 1 << 20)
        os.replace(partial, path)
    finally:
        if os.path.exists(partial):
            os.unlink(partial)


def _sha256(path):
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def _offline_message(checkpoint, error):
    size = f" ({checkpoint.size_mib:.0f} MiB)" if checkpoint.size_mib else ""
    return (
        f"Could not download the {checkpoint.tag!r} weights for {checkpoint.variant}{size}.\n"
        f"  URL:   {checkpoint.url}\n"
        f"  cache: {checkpoint.cached_path}\n"
        f"  cause: {error}\n"
        "Without network access, fetch the file on another machine (e.g. `gsutil cp "
        f"{checkpoint.url.replace('https://storage.googleapis.com/', 'gs://')} .` or a browser), "
        "copy it to the cache path above, and call again; or pass the file's path as "
        "weights='/path/to/file.npz'.")
