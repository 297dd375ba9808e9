"""The documentation says what the code does."""

import importlib
import importlib.util
import pathlib
import re

ROOT = pathlib.Path(__file__).resolve().parents[2]


def _load_script(name):
    spec = importlib.util.spec_from_file_location(name, ROOT / "tools" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_models_page_is_generated_from_the_tables():
    render = _load_script("make_models_page").render
    page = (ROOT / "docs" / "models-and-weights.md").read_text()
    assert page == render(), "run: python tools/make_models_page.py"


# --- docs/architecture.md draws the real tree ---------------------------------------------------

ARCHITECTURE = ROOT / "docs" / "architecture.md"
# A path written in the page's prose: `keras_vit/...` or `tools/...` (not `$KERAS_HOME/keras_vit/`).
PROSE_PATH = re.compile(r"(?<![\w$./~-])(?:keras_vit|tools)/[\w./-]*")
# A file named by a relative path elsewhere in the page: `tests/models/test_variants.py`, `cli/analyze.py`.
RELATIVE_FILE = re.compile(r"(?<![\w$./~<-])(?:[\w.-]+/)+[\w.-]+\.(?:py|json|md|tsv)\b")
DOTTED_NAME = re.compile(r"(?<![\w./-])keras_vit(?:\.\w+)+")


def _tree_paths(page):
    """The repository paths the code block under "## Layout" draws, one per line.

    Each line is `name   what it owns`; two spaces of indent per folder level, folders end in "/".
    """
    section = re.split(r"^## Layout$", page, maxsplit=1, flags=re.M)[1]
    block = section.split("```", 2)[1]
    paths, folders = [], []
    for line in block.splitlines()[1:]:  # after the fence's own line
        if not line.strip():
            continue
        indent = len(line) - len(line.lstrip(" "))
        assert indent % 2 == 0, f"odd indent in the tree: {line!r}"
        level = indent // 2
        assert level <= len(folders), f"the tree skips a level: {line!r}"
        name = line.split()[0]
        folders[level:] = []
        paths.append("/".join([*folders, name.rstrip("/")]))
        if name.endswith("/"):
            folders.append(name.rstrip("/"))
    return paths


def _module_path(dotted):
    """(`keras_vit/x/y`, attribute names) for `keras_vit.x.y.attr`: the longest module prefix."""
    parts = dotted.split(".")
    for end in range(len(parts), 0, -1):
        path = ROOT.joinpath(*parts[:end])
        if path.with_suffix(".py").is_file() or (path / "__init__.py").is_file():
            return "/".join(parts[:end]), parts[end:]
    return None, parts


def _unresolved_names(page):
    """Every path or dotted name the page gives that the repository lacks."""
    bad = [f"tree: {p}" for p in _tree_paths(page) if not (ROOT / p).exists()]
    prose = [p.rstrip(".") for p in PROSE_PATH.findall(page)]  # not a sentence's full stop
    bad += [f"path: {p}" for p in prose if not (ROOT / p).exists()]
    bad += [f"path: {p}" for p in RELATIVE_FILE.findall(page)
            if not ((ROOT / p).exists() or (ROOT / "keras_vit" / p).exists())]
    for dotted in sorted(set(DOTTED_NAME.findall(page))):
        module, attributes = _module_path(dotted)
        if module is None:
            bad.append(f"name: {dotted}")
            continue
        obj = importlib.import_module(module.replace("/", "."))
        for attribute in attributes:
            if not hasattr(obj, attribute):
                bad.append(f"name: {dotted}")
                break
            obj = getattr(obj, attribute)
    return list(dict.fromkeys(bad))  # a path both patterns find is reported once


def _package_modules():
    """Every module of keras_vit/ (but __init__ and __main__), every package, every tool script."""
    modules = {str(p.relative_to(ROOT).with_suffix("")) for p in (ROOT / "keras_vit").rglob("*.py")
               if p.stem not in ("__init__", "__main__")}
    modules |= {str(p.parent.relative_to(ROOT)) for p in (ROOT / "keras_vit").rglob("__init__.py")}
    modules |= {str(p.relative_to(ROOT).with_suffix("")) for p in (ROOT / "tools").glob("*.py")}
    return modules


def _undrawn_modules(page):
    drawn = {p.removesuffix(".py") for p in _tree_paths(page)}
    return sorted(_package_modules() - drawn)


def test_architecture_page_names_only_paths_that_exist():
    bad = _unresolved_names(ARCHITECTURE.read_text())
    assert not bad, f"docs/architecture.md names what the repository lacks: {bad}"


def test_architecture_page_draws_every_module():
    missing = _undrawn_modules(ARCHITECTURE.read_text())
    assert not missing, f"add to the tree in docs/architecture.md: {missing}"


def test_the_architecture_checks_catch_drift():
    """A made-up module in the tree, the prose or a dotted name is caught, and so is one left out."""
    page = "## Layout\n\n```\nkeras_vit/\n  memory.py     the sizes\n  layers/\n" \
           "    fake.py     made up\n```\n\nSee `keras_vit/fake/`, `tools/fake.py`, " \
           "`keras_vit.layers.fake` and `keras_vit.variants.VARIANTS`.\n"
    assert _unresolved_names(page) == ["tree: keras_vit/layers/fake.py", "path: keras_vit/fake/",
                                       "path: tools/fake.py", "name: keras_vit.layers.fake"]
    undrawn = _undrawn_modules(page)
    assert "keras_vit/layers/pooling" in undrawn and "keras_vit/layers" not in undrawn
    assert "keras_vit/memory" not in undrawn


# --- the page's claims about the code ---------------------------------------------------------

def _section(page, title):
    return re.split(rf"^## {re.escape(title)}$", page, maxsplit=1, flags=re.M)[1].split("\n## ", 1)[0]


def test_the_model_diagram_draws_every_pooling():
    from keras_vit.models.vit import _POOLINGS

    diagram = _section(ARCHITECTURE.read_text(), "Building a model")
    missing = [p for p in _POOLINGS if p is not None and f'"{p}_pool"' not in diagram]
    assert not missing, f"the Building a model diagram lacks the poolings {missing}"


# Calls that change state beyond the call itself (the process, the interpreter, Keras' registry),
# each as (pattern, what the page's "Process-wide state" bullet must name for it).
PROCESS_WIDE = [
    (r"\bset_random_seed\(", "set_random_seed"),
    (r"\bset_global_policy\(", "set_global_policy"),
    (r"\bos\.environ\[[^\]]+\]\s*=(?!=)|\bos\.environ\.(setdefault|update)\(|\bos\.putenv\(",
     "TF_CPP_MIN_LOG_LEVEL"),
    (r"\bsys\.modules\.setdefault\(|\bsys\.modules\[[^\]]+\]\s*=(?!=)|\bsys\.meta_path\b", "sys.modules"),
    (r"\bget_custom_objects\(\)\[", "get_custom_objects"),
    (r"\bsetdefaulttimeout\(", "setdefaulttimeout"),
    (r"\bmatplotlib\.use\(|\bswitch_backend\(", "matplotlib.use"),
    (r"\b(np|numpy)\.random\.seed\(|\brandom\.seed\(|\btf\.random\.set_seed\(", "np.random.seed"),
    (r"\bkeras\.config\.set_\w+\(|\btf\.config\.(experimental\.)?set_\w+\(", "keras.config"),
    (r"\bset_distribution\(", "set_distribution"),
    (r"\bwarnings\.(filterwarnings|simplefilter)\(|\blogging\.basicConfig\(", "warnings filter"),
]


def _process_wide_calls(root):
    found = {}
    for path in sorted((root / "keras_vit").rglob("*.py")):
        for number, line in enumerate(path.read_text().splitlines(), 1):
            code = line.split("#", 1)[0]
            for pattern, token in PROCESS_WIDE:
                if re.search(pattern, code):
                    found.setdefault(token, []).append(f"{path.relative_to(root)}:{number}")
    return found


def test_the_page_names_every_change_of_process_wide_state():
    bullet = _section(ARCHITECTURE.read_text(), "Design decisions")
    bullet = bullet.split("**Process-wide state", 1)[1].split("\n- **", 1)[0]
    found = _process_wide_calls(ROOT)
    unnamed = {token: sites for token, sites in found.items() if token not in bullet}
    assert not unnamed, f"changes of process-wide state the Architecture page does not name: {unnamed}"
    assert {"set_random_seed", "set_global_policy", "sys.modules"} <= set(found)  # the scan works


def test_the_process_wide_scan_sees_a_new_call(tmp_path):
    module = tmp_path / "keras_vit" / "new.py"
    module.parent.mkdir()
    module.write_text("import matplotlib\nmatplotlib.use('Agg')  # switch\nx = 1  # np.random.seed(0)\n")
    assert _process_wide_calls(tmp_path) == {"matplotlib.use": ["keras_vit/new.py:2"]}


def test_the_write_path_claim_is_checked_by_the_rename_scan():
    """The page says every file goes through keras_vit.atomic; tests/test_atomic.py enforces it."""
    page = ARCHITECTURE.read_text()
    assert "tests/test_atomic.py" in page
    assert "def test_nothing_outside_atomic_py_renames" in (ROOT / "tests" / "test_atomic.py").read_text()
