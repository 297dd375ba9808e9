"""The cache of checkpoint files: where each lives, downloads into it, checksum pins, hub snapshots.

Official files are cached under `$KERAS_HOME/keras_vit/` (default `~/.keras/keras_vit/`),
as Keras caches its own downloads, at a path that mirrors the file's URL
(`vit_models/imagenet21k/ViT-B_16.npz`, `bit_models/BiT-M-R50x1.npz`), so two
tags' files never share a path. Hub entries (`hf://owner/name`) live in huggingface_hub's own cache.

Every file, downloaded or found in the cache, is checked against its catalogue entry
(architecture, classes, pre_logits width, resolution) from its headers before it is used
(`check_contents`); a download becomes visible at its cache path only whole and checked, so
an interrupted or wrong download leaves nothing a later call uses. The functions take a
`catalogue.Checkpoint` record; this module never imports the catalogue.
"""

import hashlib
import http.client
import json
import os
import re

from keras_vit._support.json_files import read_json
from keras_vit._support.paths import cache_dir
from keras_vit.atomic import atomic_open, atomic_path
from keras_vit.checkpoints import download
from keras_vit.checkpoints.download import redact
from keras_vit.checkpoints.errors import CheckpointError, WeightsUnavailableError
from keras_vit.checkpoints.formats import open_checkpoint
from keras_vit.checkpoints.layout import (
    BIT_HEAD_KERNEL_KEY,
    CLS_KEY,
    HEAD_KERNEL_KEY,
    POS_EMBED_KEY,
    PRE_LOGITS_KERNEL_KEY,
    describe_architecture,
    square_grid,
)
from keras_vit.checkpoints.shape_check import variant_fits_shapes
from keras_vit.errors import ArgumentError

__all__ = ["cache_dir", "cache_key", "download_url", "cached_file", "pin_checksum", "is_pinned",
           "pin_first_use", "check_contents", "hub_snapshot", "hub_address", "OFFICIAL_BASE_URL",
           "OFFICIAL_BASE_URLS", "WEIGHTS_URL_ENV"]

# The prefix of every official URL, and the variable that points it at a mirror. BiT's files
# live in a sibling bucket; their names (BiT-M-R50x1.npz, ...) never clash with the ViT
# files' (imagenet21k/..., augreg/...), so one mirror folder can stand for both buckets.
OFFICIAL_BASE_URL = "https://storage.googleapis.com/vit_models"
OFFICIAL_BASE_URLS = (OFFICIAL_BASE_URL, "https://storage.googleapis.com/bit_models")
WEIGHTS_URL_ENV = "KERAS_VIT_WEIGHTS_URL"
# A download never writes more than its entry's declared size and this margin; an entry
# that declares no size is capped at UNDECLARED_SIZE_CAP (the largest official file,
# ViT-H/14's, is 2.4 GiB).
SIZE_MARGIN = 1.02
UNDECLARED_SIZE_CAP = 4 << 30


def _official_base(url):
    """The official bucket prefix `url` starts with, or None."""
    return next((base for base in OFFICIAL_BASE_URLS if url.startswith(base + "/")), None)


def cache_key(checkpoint):
    """The file's path inside the cache, unique per source: the URL's path."""
    url = checkpoint.url
    base = _official_base(url)
    if base:  # vit_models/imagenet21k/ViT-B_16.npz, bit_models/BiT-M-R50x1.npz
        return base.rsplit("/", 1)[1] + "/" + url[len(base) + 1:]
    scheme, _, rest = url.partition("://")
    return rest.replace(":", "_")


def cached_path(checkpoint):
    return os.path.join(cache_dir(), *cache_key(checkpoint).split("/"))


def download_url(checkpoint):
    """The URL, with the official prefix replaced by $KERAS_VIT_WEIGHTS_URL when set."""
    mirror = os.environ.get(WEIGHTS_URL_ENV, "").rstrip("/")
    base = _official_base(checkpoint.url)
    if mirror and base:
        return mirror + checkpoint.url[len(base):]
    return checkpoint.url


def is_pinned(checkpoint):
    """Whether the file's sha256 is known: declared by its entry, or pinned in the cache."""
    return bool(checkpoint.sha256 or _pins().get(cache_key(checkpoint)))


def _pins_path():
    return os.path.join(cache_dir(), "checksums.json")


def _pins():
    try:
        pins = read_json(_pins_path(), "a checksum record", CheckpointError)
    except (FileNotFoundError, CheckpointError):  # none yet, or not a record: pinned anew
        return {}
    return pins if isinstance(pins, dict) else {}


def pin_checksum(key, sha256):
    """Records the sha256 a cached checkpoint file must have; later loads verify it.

    `key` is the file's path inside the cache (`Checkpoint.cache_key`, e.g.
    "vit_models/imagenet21k/ViT-B_16.npz"). Without a pin, keras_vit records
    the hash of a file the first time it uses it (after checking its contents
    against its entry), so a file that changes in the cache afterwards is caught.
    """
    if len(sha256) != 64 or any(c not in "0123456789abcdef" for c in sha256.lower()):
        raise ArgumentError(f"A sha256 is 64 hexadecimal digits, got {sha256!r}.")
    pins = _pins()
    pins[key] = sha256.lower()
    with atomic_open(_pins_path(), "w") as f:  # never a half-written pin file
        json.dump(pins, f, indent=1)


def cached_file(checkpoint):
    """The cached file of `checkpoint`, fetched first when absent or not the pinned file
    (`Checkpoint.open` checks its contents)."""
    expected = checkpoint.sha256 or _pins().get(cache_key(checkpoint))
    path = cached_path(checkpoint)
    if not (os.path.exists(path) and (not expected or _sha256(path) == expected)):
        _fetch(checkpoint, path, expected)
    return path


def pin_first_use(checkpoint):
    """Trust on first use, after the contents check: a later change to the file is caught."""
    try:
        pin_checksum(cache_key(checkpoint), _sha256(cached_path(checkpoint)))
    except OSError:  # a read-only cache: the file is checked on every use anyway
        pass


def check_contents(checkpoint, reader, shown_path=None):
    """Raises `CheckpointError` when the file (a path, or an open `CheckpointReader`) is not
    what `checkpoint` declares."""
    from keras_vit.variants import get_architecture

    variant = get_architecture(checkpoint.variant)
    shown = shown_path or getattr(reader, "path", reader)
    try:
        if isinstance(reader, (str, os.PathLike)):
            with open_checkpoint(reader, checkpoint.format) as opened:
                info = opened.info()
        elif reader.format.name != checkpoint.format:
            raise CheckpointError(f"{reader.path} is a {reader.format.name} checkpoint, not the "
                                  f"{checkpoint.format} file expected.")
        else:
            info = reader.info()
    except CheckpointError as error:
        raise CheckpointError(f"{shown} is not a readable {checkpoint.format} checkpoint, so it "
                              f"cannot be the {checkpoint.tag!r} {checkpoint.variant} weights "
                              f"({error}); it was not used.") from error
    found = _summary(info.shapes, variant)
    wanted = {"architecture": _architecture(variant), "classes": checkpoint.classes,
              "pre_logits width": checkpoint.representation_size}
    # Only a position table records a file's resolution (DINOv3's RoPE files and BiT's have none).
    if POS_EMBED_KEY in info.shapes:
        wanted["resolution"] = checkpoint.resolution
    wrong = [f"{k} {found[k]} where the entry says {v}" for k, v in wanted.items()
             if found[k] != v]
    if wrong:
        raise CheckpointError(
            f"{shown} is not the {checkpoint.tag!r} {checkpoint.variant} file its catalogue "
            f"entry describes: it has {'; '.join(wrong)}. It was not used; delete it and call "
            f"again to fetch the right file.")


def _architecture(variant):
    if hasattr(variant, "units"):  # a BiTVariant; the words describe_bit uses
        return f"{variant.name} (depth {variant.depth}, width {variant.width}, units {variant.units})"
    return f"{variant.name} (width {variant.width}, depth {variant.depth}, patch {variant.patch_size})"


def _summary(shapes, variant):
    """What a checkpoint's official-key shapes say, in the terms of a catalogue entry."""
    head = shapes.get(HEAD_KERNEL_KEY) or shapes.get(BIT_HEAD_KERNEL_KEY)
    pre, pos = shapes.get(PRE_LOGITS_KERNEL_KEY), shapes.get(POS_EMBED_KEY)
    family = getattr(variant, "family", "ViT") != "ViT"  # a BiTVariant has no family
    # The tokens the position embedding covers besides the patches: a family's row says (DeiT
    # distilled: 2; DINOv2 with registers, DeiT III and FlexiViT: none, timm's no_embed_class).
    prefix = variant.position_prefix_tokens if family else CLS_KEY in shapes
    grid = pos and square_grid(pos[1] - prefix)
    # A family's row shares its shapes with a paper variant (DeiT-Ti/16's are ViT-Ti_16's), so
    # the shapes cannot name it: its file is the row's when its shapes fit the row.
    fits = family and variant_fits_shapes(variant, shapes)
    return {"architecture": _architecture(variant) if fits else describe_architecture(shapes),
            "classes": head[-1] if head else None,
            "pre_logits width": pre[-1] if pre else None,
            "resolution": grid[0] * variant.total_stride if grid else None}


def _fetch(checkpoint, path, expected):
    """Downloads the file to `path` through a private temporary file, renamed into place only
    when whole, of the pinned sha256 and of the entry's contents."""
    url = download_url(checkpoint)
    shown = redact(url)  # a mirror's credentials never reach a message
    try:
        os.makedirs(os.path.dirname(path), exist_ok=True)
    except OSError as error:
        raise _not_writable(path, shown, error) from error
    try:
        with atomic_path(path) as partial:  # also removes what killed downloads of `path` left
            try:
                handle = open(partial, "wb")
            except OSError as error:
                raise _not_writable(path, shown, error) from error
            with handle:
                download.stream(url, handle, _size_limit(checkpoint))
            if expected and _sha256(partial) != expected:
                raise WeightsUnavailableError(
                    f"The file downloaded from {shown} does not have the sha256 recorded for "
                    f"{path} ({expected}); it was not kept. If the file changed on purpose, "
                    f"delete that entry from {_pins_path()} and call again.")
            try:
                check_contents(checkpoint, partial, shown_path=f"the file downloaded from {shown}")
            except CheckpointError as error:
                hint = (" (it is an HTML page: a proxy or login page? set "
                        f"{WEIGHTS_URL_ENV} to a mirror, or copy the file to {path} by hand)"
                        if _looks_like_html(partial) else "")
                raise WeightsUnavailableError(f"{error}{hint}") from error
    except (OSError, http.client.HTTPException) as error:  # URLError, timeouts, refused or cut
        # connections, a full disk
        raise WeightsUnavailableError(_offline_message(checkpoint, error)) from error


def _size_limit(checkpoint):
    """The most bytes a download of `checkpoint` may write."""
    if checkpoint.size_mib:
        return int(checkpoint.size_mib * (1 << 20) * SIZE_MARGIN) + (1 << 20)
    return UNDECLARED_SIZE_CAP


def _not_writable(path, url, error):
    return WeightsUnavailableError(
        f"Cannot write {path} ({error.strerror or error}): the cache is not writable; set "
        f"KERAS_HOME to a writable directory, or copy the file from {url} to {path} by hand.")


def _looks_like_html(path):
    with open(path, "rb") as f:
        start = f.read(512).lstrip().lower()
    return start.startswith((b"<!doctype html", b"<html"))


def _sha256(path):
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def _offline_message(checkpoint, error):
    size = f" ({checkpoint.size_mib:.0f} MiB)" if checkpoint.size_mib else ""
    path = cached_path(checkpoint)
    old = os.path.join(cache_dir(), checkpoint.filename)
    stale = (f" (The old-layout file {old} was not used: that flat layout gave two tags' files "
             "one name.)" if os.path.exists(old) else "")
    gs = checkpoint.url.replace("https://storage.googleapis.com/", "gs://")
    return (f"Could not download the {checkpoint.tag!r} weights for {checkpoint.variant}{size} "
            f"from {redact(download_url(checkpoint))} ({error}). Without network access, fetch the file on "
            f"another machine (`gsutil cp {gs} .` or a browser) and copy it to the cache path "
            f"{path}, set {WEIGHTS_URL_ENV} to a mirror, or pass the file's path as "
            f"weights='/path/to/file.npz'.{stale}")


# What a repository's snapshot fetches: the configs and the safetensors (or keras-hub .h5)
# weights; pickled ones only where it has neither (PICKLED_HUB_FILES). A catalogued
# repository (a timm or transformers folder) is read from model.safetensors, sharded or not,
# alone: timm's CLIP repositories also hold OpenCLIP's whole model, both towers, as
# open_clip_model.safetensors, which is not fetched.
HUB_FILES = ["*.json", "*.safetensors", "*.h5"]
CATALOGUED_HUB_FILES = ["*.json", "model.safetensors", "model-*.safetensors"]
# Fetched only from a repository that holds none of those weights (timm's save_for_hf default,
# older transformers and OpenCLIP uploads): read through torch's weights-only loader
# (formats/torch_state_dict.py), which runs no code of the file.
PICKLED_HUB_FILES = ["pytorch_model.bin", "open_clip_pytorch_model.bin"]


# The Hub's repository ids (owner/name) and git's ref names: the revision names a file under
# the Hub cache's refs/ when offline, so "..", a leading "/" or a backslash would reach a
# folder outside that cache.
_HUB_REPO = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*/[A-Za-z0-9][A-Za-z0-9._-]*")
_HUB_REVISION = re.compile(r"[A-Za-z0-9._-]+(/[A-Za-z0-9._-]+)*")


def hub_address(weights):
    """(repo, revision or None) of `hf://owner/name[@revision]`, each checked as the Hub and
    git spell them (one-line CheckpointError otherwise)."""
    repo, at, revision = weights[len("hf://"):].partition("@")
    if not _HUB_REPO.fullmatch(repo) or ".." in repo:
        raise CheckpointError(f"{weights!r} is not hf://owner/name[@revision]: {repo!r} is not "
                              "a Hub repository id.")
    if at and (not _HUB_REVISION.fullmatch(revision)
               or any(part in (".", "..") for part in revision.split("/"))):
        raise CheckpointError(f"{weights!r}: {revision!r} is not a revision (a branch, tag or "
                              "commit, without '..' or a leading '/').")
    return repo, revision or None


def hub_snapshot_of(checkpoint):
    at = f"@{checkpoint.revision}" if checkpoint.revision else ""
    return hub_snapshot(checkpoint.hub, checkpoint.revision, f"hf://{checkpoint.hub}{at}",
                        CATALOGUED_HUB_FILES)


def hub_snapshot(repo, revision, weights, files=HUB_FILES):
    """The local folder of the Hub repository `repo` at `revision`, fetched (or found in the
    Hub's cache) through huggingface_hub; `weights` is what the user wrote, for messages."""
    hub_address(f"hf://{repo}" + (f"@{revision}" if revision else ""))
    try:
        import huggingface_hub
    except ImportError as error:
        raise ImportError(f"weights={weights!r} needs huggingface_hub: "
                          'pip install "keras-vit-zoo[hub]".') from error
    try:
        folder = huggingface_hub.snapshot_download(repo, revision=revision, allow_patterns=files)
        if files is HUB_FILES and not _holds_weights(folder):  # the configs again: cached
            folder = huggingface_hub.snapshot_download(
                repo, revision=revision, allow_patterns=[*HUB_FILES, *PICKLED_HUB_FILES])
        return folder
    except Exception as error:  # the hub raises many kinds; all mean "not here"
        cause = " ".join(str(error).split())  # one line, however the hub formats it
        raise WeightsUnavailableError(
            f"Could not fetch {weights} through huggingface_hub ({type(error).__name__}: "
            f"{cause}). Offline, download the repository elsewhere (`hf download {repo}`) into "
            "the Hugging Face cache ($HF_HOME), or pass the directory's path as weights=.") from error


def _holds_weights(folder):
    """Whether a snapshot holds weights of HUB_FILES (safetensors, keras-hub's .h5)."""
    return any(name.endswith((".safetensors", ".h5")) for name in os.listdir(folder))
