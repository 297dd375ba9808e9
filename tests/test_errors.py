"""One error family: what keras_vit raises on purpose, and what the command line makes of it.

A member of `keras_vit.KerasViTError`'s family, an argparse error, or an `OSError` about a path the
user named is one line on stderr and exit status 2; anything else is a bug and keeps its traceback.
"""

import ast
import builtins
import errno
import pathlib
import re

import pytest

import keras_vit
from keras_vit import errors
from keras_vit.cli import main

ROOT = pathlib.Path(__file__).resolve().parents[1]

# The builtin each member refines, as docs/api.md documents it: `except <builtin>` code written
# before the family keeps catching it. None: the member refines no builtin.
BUILTIN_OF = {
    "KerasViTError": None,
    "ArgumentError": ValueError,
    "ArgumentTypeError": TypeError,
    "CheckpointError": ValueError,
    "WeightsUnavailableError": RuntimeError,
    "ImageError": ValueError,
    "DatasetError": ValueError,
    "DatasetUnavailableError": RuntimeError,
    "DeviceUnavailableError": RuntimeError,
    "RunConflictError": ValueError,
    "CommandError": None,
    "PathError": OSError,
    "PathNotFoundError": FileNotFoundError,
    "PathExistsError": FileExistsError,
    "SizeError": ValueError,
    "KerasVersionError": RuntimeError,
    "OutOfMemoryError": MemoryError,
    "TrainingDivergedError": ArithmeticError,
}

# Raises (and returns) of a bare builtin exception that are not the user's to fix, by
# (module, enclosing function, exception), each with the reason it is not a family member.
NOT_THE_USERS = {
    ("keras_vit/checkpoints/layout.py", "layout", "TypeError"):
        "invariant: keras_vit's model builder added a weighted part of a kind layout() has no "
        "rows for; no user input reaches it",
    ("keras_vit/layers/transformer.py", "load_own_variables", "ValueError"):
        "Keras' own Layer.load_own_variables raises ValueError for a store of other variables, "
        "and keras.saving gathers it into its one 'could not be loaded' error",
    ("keras_vit/_lazy.py", "__getattr__", "AttributeError"):
        "the module __getattr__ protocol: Python expects AttributeError",
    ("keras_vit/_lazy.py", "moved_name", "AttributeError"):
        "the module __getattr__ protocol: Python expects AttributeError",
    ("keras_vit/atomic.py", "atomic_path", "FileNotFoundError"):
        "invariant: keras_vit's own writer wrote nothing to the temporary file",
    ("keras_vit/atomic.py", "publish_folder", "FileExistsError"):
        "caught by export, which raises PathExistsError naming the version folder",
    ("keras_vit/atomic.py", "atomic_open", "ValueError"):
        "invariant: keras_vit's own writers open files for writing; atomic is not public",
    ("keras_vit/checkpoints/download.py", "stream", "TimeoutError"):
        "caught by the catalogue's download, which raises WeightsUnavailableError naming the file",
    ("keras_vit/checkpoints/download.py", "stream", "ConnectionError"):
        "caught by the catalogue's download, which raises WeightsUnavailableError naming the file",
    ("keras_vit/checkpoints/catalogue.py", "__getattr__", "AttributeError"):
        "the attribute protocol (OpenedCheckpoint's fields are its record's): Python expects it",
    ("keras_vit/checkpoints/cache.py", "hub_snapshot", "ImportError"):
        "a missing optional dependency: Python's own signal, the message gives the pip line",
    ("keras_vit/checkpoints/formats/keras_hub_presets.py", "import_keras_hub", "ImportError"):
        "a missing optional dependency: Python's own signal, the message gives the pip line",
    ("keras_vit/export/hub_push.py", "push_to_hub", "ImportError"):
        "a missing optional dependency: Python's own signal, the message gives the pip line",
    ("keras_vit/export/runtimes.py", "_import_runtime", "ImportError"):
        "a missing optional dependency: Python's own signal, the message gives the pip line",
    ("keras_vit/export/runtimes.py", "_quantize_int8", "ImportError"):
        "a missing optional dependency (NNCF): Python's own signal, the message gives the pip line",
    ("keras_vit/checkpoints/formats/safetensors.py", "_header", "ValueError"):
        "caught in the same function and raised again as CheckpointError naming the file",
    ("keras_vit/checkpoints/formats/npz_metadata.py", "parse_metadata", "ValueError"):
        "caught in the same function and raised again as CheckpointError naming the file",
    ("keras_vit/checkpoints/formats/safetensors.py", "_no_duplicates", "ValueError"):
        "json's object hook, called inside _header, which raises CheckpointError naming the file",
}


def _run(argv, capsys):
    try:
        code = main(argv)
    except SystemExit as exit_:
        code = exit_.code
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def _raising(error):
    def raise_it(*args, **kwargs):
        raise error
    return raise_it


# --- the policy, in process: `info` calls keras_vit.checkpoints.catalogue() ---

def test_an_internal_value_error_keeps_its_traceback(monkeypatch, capsys):
    """A plain ValueError inside a command is a bug: it propagates, no one-line report."""
    import keras_vit.checkpoints

    monkeypatch.setattr(keras_vit.checkpoints, "catalogue", _raising(ValueError("internal bug")))
    with pytest.raises(ValueError, match="internal bug") as raised:
        main(["info"])
    assert not isinstance(raised.value, errors.KerasViTError)
    assert "error:" not in capsys.readouterr().err


@pytest.mark.parametrize("name", errors.__all__)
def test_a_family_member_is_one_line_and_exit_2(name, monkeypatch, capsys):
    import keras_vit.checkpoints

    error = getattr(errors, name)("the weights are\n  not there")  # a message over two lines
    monkeypatch.setattr(keras_vit.checkpoints, "catalogue", _raising(error))
    code, out, err = _run(["info"], capsys)
    assert code == 2
    assert err == "keras-vit info: error: the weights are not there\n"


# --- OSErrors: one line when the path is one the user named, a traceback otherwise ---

def _predict_argv(tmp_path, labels):
    image = tmp_path / "a.png"
    image.write_bytes(b"")  # predict reads --labels before it opens any image or builds a model
    return ["predict", str(image), "--model", "Ti/16", "--labels", labels]


def test_an_os_error_about_a_named_path_is_one_line(tmp_path, capsys):
    folder = tmp_path / "labels"
    folder.mkdir()
    code, out, err = _run(_predict_argv(tmp_path, str(folder)), capsys)  # a folder, not a file
    assert code == 2
    assert out == ""
    lines = err.splitlines()
    assert len(lines) == 1, err
    assert lines[0].startswith(f"keras-vit predict: error: {folder}: "), err


def test_a_named_path_matches_however_it_is_spelled(tmp_path, monkeypatch, capsys):
    """The user types a relative path; the error names it absolute: the same path."""
    import keras_vit.labels

    monkeypatch.chdir(tmp_path)
    denied = OSError(errno.EACCES, "Permission denied", str(tmp_path / "labels.txt"))
    monkeypatch.setattr(keras_vit.labels, "read_labels", _raising(denied))
    code, _, err = _run(_predict_argv(tmp_path, "sub/../labels.txt"), capsys)
    assert code == 2
    assert err == f"keras-vit predict: error: {tmp_path / 'labels.txt'}: Permission denied\n"


def test_an_os_error_about_a_file_inside_a_named_folder_is_one_line(tmp_path, monkeypatch, capsys):
    """A folder the user named stands for the files in it (an unreadable image in it)."""
    import keras_vit.labels

    folder = tmp_path / "given"
    folder.mkdir()
    inside = folder / "deep" / "x.png"
    denied = OSError(errno.EACCES, "Permission denied", str(inside))
    monkeypatch.setattr(keras_vit.labels, "read_labels", _raising(denied))
    code, _, err = _run(_predict_argv(tmp_path, str(folder)), capsys)
    assert code == 2
    assert err == f"keras-vit predict: error: {inside}: Permission denied\n"
    # A sibling whose name merely starts like the folder's is not inside it.
    sibling = OSError(errno.EACCES, "Permission denied", str(tmp_path / "given-not" / "x.png"))
    monkeypatch.setattr(keras_vit.labels, "read_labels", _raising(sibling))
    with pytest.raises(PermissionError):
        main(_predict_argv(tmp_path, str(folder)))


@pytest.mark.parametrize("filename", [None, "elsewhere/internal.json"])
def test_an_os_error_about_another_path_keeps_its_traceback(filename, tmp_path, monkeypatch, capsys):
    import keras_vit.labels

    error = OSError(errno.EACCES, "Permission denied", *([filename] if filename else []))
    monkeypatch.setattr(keras_vit.labels, "read_labels", _raising(error))
    with pytest.raises(PermissionError):
        main(_predict_argv(tmp_path, str(tmp_path / "labels.txt")))
    assert "error:" not in capsys.readouterr().err


def test_a_torn_keras_file_is_one_line(tmp_path, capsys):
    model = tmp_path / "model.keras"
    model.write_bytes(b"PK\x03\x04 torn")
    code, _, err = _run(["export", "--model", str(model), "--output", str(tmp_path / "out")], capsys)
    assert code == 2
    assert err.startswith(f"keras-vit export: error: {model} is not a .keras file") and \
        len(err.splitlines()) == 1, err


# --- the family itself ---

def test_every_member_is_documented_here_and_exported():
    assert set(errors.__all__) == set(BUILTIN_OF)
    for name in errors.__all__:
        assert getattr(keras_vit, name) is getattr(errors, name), name
        assert name in keras_vit.__all__, name


@pytest.mark.parametrize("name", sorted(BUILTIN_OF))
def test_every_member_refines_its_builtin(name):
    cls = getattr(errors, name)
    error = cls("a message")
    assert isinstance(error, errors.KerasViTError)
    assert str(error) == "a message"  # an OSError given one argument keeps it as its text
    nearest = next((c for c in cls.__mro__ if c.__module__ == "builtins"), None)
    expected = BUILTIN_OF[name] or Exception
    assert nearest is expected, f"{name} refines {nearest.__name__}, documented as {expected.__name__}"
    assert isinstance(error, expected)


def test_the_api_page_documents_each_members_builtin():
    page = (ROOT / "docs" / "api.md").read_text(encoding="utf-8")
    rows = dict(re.findall(r"^\| `(\w+)` \| `(\w+)` \|", page, flags=re.M))
    assert rows == {name: (builtin or Exception).__name__ for name, builtin in BUILTIN_OF.items()}


# --- no bare builtin raised on purpose ---

_BUILTIN_ERRORS = {name for name, value in vars(builtins).items()
                   if isinstance(value, type) and issubclass(value, BaseException)}


def _builtin_raises(root=ROOT):
    """{(module, enclosing function, exception): [line, ...]} for every `raise X(...)`, `raise X`
    and `return X(...)` of a builtin exception under keras_vit/ (a helper returning the error
    its caller raises counts too)."""
    found = {}

    def visit(node, path, function):
        for child in ast.iter_child_nodes(node):
            inner = child.name if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)) else function
            value = child.exc if isinstance(child, ast.Raise) else \
                child.value if isinstance(child, ast.Return) else None
            if isinstance(value, ast.Call):
                value = value.func
            if isinstance(value, ast.Name) and value.id in _BUILTIN_ERRORS:
                found.setdefault((path, function, value.id), []).append(child.lineno)
            visit(child, path, inner)

    for file in sorted((root / "keras_vit").rglob("*.py")):
        path = file.relative_to(root).as_posix()
        visit(ast.parse(file.read_text(encoding="utf-8")), path, "<module>")
    return found


def test_no_bare_builtin_error_is_raised_on_purpose():
    found = _builtin_raises()
    unexplained = {f"{path}:{lines[0]} ({function}): {name}"
                   for (path, function, name), lines in found.items()
                   if (path, function, name) not in NOT_THE_USERS}
    assert not unexplained, ("raise a member of keras_vit.errors instead (or, for a bug inside "
                             f"keras_vit, add the site to NOT_THE_USERS with why): {sorted(unexplained)}")
    stale = set(NOT_THE_USERS) - set(found)
    assert not stale, f"NOT_THE_USERS lists sites that no longer raise: {sorted(stale)}"


def test_the_scan_sees_a_bare_raise(tmp_path):
    """The scan above can fail: a module with a bare ValueError is listed."""
    module = tmp_path / "keras_vit" / "new.py"
    module.parent.mkdir()
    module.write_text("def check(x):\n    if x:\n        raise ValueError('bad x')\n"
                      "def helper():\n    return TypeError('made here, raised there')\n")
    assert _builtin_raises(tmp_path) == {("keras_vit/new.py", "check", "ValueError"): [3],
                                 ("keras_vit/new.py", "helper", "TypeError"): [5]}


def test_a_tpu_strategy_without_a_tpu_is_a_family_member():
    """The machine lacks what the user asked for: one line from the CLI, not a traceback."""
    import keras

    if keras.backend.backend() != "tensorflow":
        pytest.skip("tf.distribute's TPU strategy is the TensorFlow backend's")
    from keras_vit.errors import DeviceUnavailableError
    from keras_vit.training.distribute import get_strategy

    with pytest.raises(DeviceUnavailableError, match="No TPU could be resolved"):
        get_strategy("tpu")
