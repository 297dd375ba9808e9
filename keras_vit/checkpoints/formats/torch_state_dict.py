"""The pickled torch state-dict container (.bin, .pth, .pth.tar, .pt), read only through
torch's weights-only loader: the same interface as safetensors.py's files (`shapes`,
`dtypes`, `read`), so that every row-table format reads either container.

A pickle may hold code. keras_vit opens one only through `torch.load(path,
weights_only=True, map_location="cpu")`, torch's restricted unpickler, which builds tensors
and plain containers and refuses any other object (no code of the file runs), and only when
torch is installed; without torch, or for a pickle that is not a dict of named tensors, the
load is refused in one line. Files in torch's zip format are memory-mapped, so detection
reads no array.

What the libraries write: a plain {name: tensor} dict (`torch.save(model.state_dict())`,
timm's `save_for_hf` `pytorch_model.bin`, DINOv2's release), or a training checkpoint whose
weights sit under `state_dict_ema`, `state_dict` or `model` beside the optimizer's state
(timm's train.py `.pth.tar`, open_clip's `epoch_N.pt`). From a checkpoint with both, the EMA
weights are read, as timm's `load_checkpoint` reads them; the optimizer is never read. timm's
checkpoints record train.py's arguments as an `argparse.Namespace`, a plain attribute holder
whose unpickling runs no code, which the loader is allowed to build. A `module.` prefix on
every name (a model saved inside DistributedDataParallel) is removed.
"""

import argparse
import os
import warnings
import zipfile

import numpy as np

from keras_vit.checkpoints.errors import CheckpointError

__all__ = ["PICKLED_SUFFIXES", "TorchStateDict", "is_pickled", "refuse_pickle"]

# Pickled torch files: unpickling runs whatever code the file holds, so only torch's
# weights-only loader opens one. ".tar" is timm's ".pth.tar".
PICKLED_SUFFIXES = (".bin", ".pth", ".pt", ".tar", ".ckpt", ".pkl", ".pickle")
# Where a training checkpoint keeps its weights, in the order timm's load_checkpoint reads them.
WEIGHTS_KEYS = ("state_dict_ema", "state_dict", "model")
_DATA_PARALLEL_PREFIX = "module."
# Whatever the weights-only loader reads is bounded by the file; a pickle this large is no
# checkpoint keras_vit reads (DINOv2-g's is 4.5 GB).
_SIZE_LIMIT = 64 << 30


def is_pickled(path):
    """Whether `path` names a pickled torch file by its suffix (any case)."""
    return path.lower().endswith(PICKLED_SUFFIXES)


def refuse_pickle(path, why):
    """A one-line refusal of a pickled file, with the conversion to run where it is trusted."""
    raise CheckpointError(f"{path} is a pickled PyTorch file {why}; or convert it where you "
                          "trust it: safetensors.torch.save_file(torch.load(path, "
                          "weights_only=True), 'model.safetensors').")


def _torch():
    try:
        import torch
    except ImportError:
        return None
    return torch


def _reason(error):
    """torch's one line on why, from its multi-line message."""
    text = str(error)
    if "WeightsUnpickler error:" in text:
        text = text.split("WeightsUnpickler error:", 1)[1].split("Check the documentation")[0]
    return " ".join(text.split())[:160] or type(error).__name__


def _load(path):
    """The file's object, through torch's weights-only unpickler (its warnings kept off
    stderr: a refusal is one line)."""
    torch = _torch()
    if torch is None:
        refuse_pickle(path, "and torch is not installed: keras_vit reads .bin, .pth and .pt "
                            "files only through torch.load(weights_only=True) (pip install torch)")
    try:
        size = os.path.getsize(path)
    except OSError as error:
        raise CheckpointError(f"{path} cannot be opened ({error.strerror or error}).") from error
    if size > _SIZE_LIMIT:
        refuse_pickle(path, f"of {size} bytes, more than any checkpoint keras_vit reads")
    try:
        # record=True: torch's warnings are kept, not printed, for the load alone.
        with warnings.catch_warnings(record=True), \
                torch.serialization.safe_globals([argparse.Namespace]):
            return torch.load(path, map_location="cpu", weights_only=True,
                              mmap=zipfile.is_zipfile(path))  # zip maps; legacy cannot
    except Exception as error:  # noqa: BLE001 - torch raises many types for one bad file
        refuse_pickle(path, f"that torch's weights-only loader refuses ({_reason(error)}): "
                            "keras_vit reads a dict of tensors only")


def _weights(path, loaded, torch):
    """The {name: tensor} dict of a loaded file: itself, or a checkpoint's weights."""
    if isinstance(loaded, dict) and not _is_tensor_dict(loaded, torch):
        found = next((k for k in WEIGHTS_KEYS if isinstance(loaded.get(k), dict)), None)
        if found is not None:
            loaded = loaded[found]
    if not _is_tensor_dict(loaded, torch):
        refuse_pickle(path, f"holding a {type(loaded).__name__} that is not a dict of named "
                            f"tensors (nor one under {', '.join(WEIGHTS_KEYS)}), which is what "
                            "keras_vit reads")
    if loaded and all(k.startswith(_DATA_PARALLEL_PREFIX) for k in loaded):
        loaded = {k[len(_DATA_PARALLEL_PREFIX):]: v for k, v in loaded.items()}
    return loaded


def _is_tensor_dict(value, torch):
    return isinstance(value, dict) and bool(value) and all(
        isinstance(k, str) and isinstance(v, torch.Tensor) for k, v in value.items())


def _numpy_dtype(torch, torch_dtype):
    """The dtype `read` returns: half precision widened; no NumPy dtype ("V") for what is not
    read as weights (quantised, float8, complex32)."""
    if torch_dtype in (torch.bfloat16, torch.float16):
        return np.dtype(np.float32)
    try:
        return torch.empty((), dtype=torch_dtype).numpy().dtype
    except (TypeError, RuntimeError):
        return np.dtype("V")


class TorchStateDict:
    """A pickled state dict opened once: shapes and dtypes, arrays on request (half
    precision widened to float32)."""

    def __init__(self, path):
        self.path = path
        torch = _torch()
        self._tensors = _weights(path, _load(path), torch)
        for name, tensor in self._tensors.items():
            if tensor.layout != torch.strided:  # sparse: no dense array to read
                refuse_pickle(path, f"whose tensor {name[:80]!r} is {tensor.layout}, not dense")
        self.shapes = {k: tuple(v.shape) for k, v in self._tensors.items()}
        # So that a header reports an integer or bool tensor as one, for the loader to refuse.
        self.dtypes = {k: _numpy_dtype(torch, v.dtype) for k, v in self._tensors.items()}

    def read(self, names=None):
        torch, out = _torch(), {}
        for name in self.shapes if names is None else names:
            tensor = self._tensors[name].detach()
            if tensor.dtype in (torch.bfloat16, torch.float16):  # bfloat16 has no NumPy view
                tensor = tensor.float()
            elif self.dtypes[name].kind == "V":
                raise CheckpointError(f"{self.path}: tensor {name[:80]!r} has dtype "
                                      f"{tensor.dtype}, which keras_vit does not read.")
            out[name] = tensor.numpy()
        return out

    def close(self):
        self._tensors = {}
