"""Layers point down: analysis/, runtime/ and export/ stand below training (they read
report.json through keras_vit.reports and load models through keras_vit.models.factory),
runtime/ below export/ (the agreement metric both report is runtime/agreement.py's), and
runtime/execution.py below the checkpoints package (its cache folder comes from
_support/paths.py); no two modules import each other; and no module is longer than 500
lines. Checked on the source, so an import inside a function counts too."""

import ast
import pathlib

import keras_vit

PACKAGE = pathlib.Path(keras_vit.__file__).parent
RUNTIME = sorted((PACKAGE / "runtime").rglob("*.py"))
BELOW_TRAINING = [*sorted((PACKAGE / "analysis").rglob("*.py")), *RUNTIME,
                  *sorted((PACKAGE / "export").rglob("*.py"))]


def imported_modules(source):
    """Every module a Python source imports, at any depth (`from a import b` gives a and a.b)."""
    found = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            found.add(node.module)
            found.update(f"{node.module}.{alias.name}" for alias in node.names)
    return found


def _from(package, source):
    return sorted(m for m in imported_modules(source) if m == package or m.startswith(package + "."))


def _from_training(source):
    return _from("keras_vit.training", source)


def test_analysis_runtime_and_export_import_nothing_from_training():
    reaching_up = {path.relative_to(PACKAGE).as_posix(): _from_training(path.read_text("utf-8"))
                   for path in BELOW_TRAINING}
    assert {path: modules for path, modules in reaching_up.items() if modules} == {}


def test_runtime_imports_nothing_from_export():
    reaching_up = {path.relative_to(PACKAGE).as_posix(): _from("keras_vit.export", path.read_text("utf-8"))
                   for path in RUNTIME}
    assert RUNTIME and {path: modules for path, modules in reaching_up.items() if modules} == {}


def test_the_import_scan_sees_an_import_inside_a_function():
    """The check above can fail: each spelling of an import from training is found."""
    source = ("import os\n"
              "from keras_vit import training\n"
              "def f():\n"
              "    from keras_vit.training.report import read_log\n"
              "    import keras_vit.training.optimizers\n")
    assert _from_training(source) == ["keras_vit.training", "keras_vit.training.optimizers",
                                      "keras_vit.training.report",
                                      "keras_vit.training.report.read_log"]


def test_execution_imports_nothing_from_the_checkpoints_package():
    assert _from("keras_vit.checkpoints", (PACKAGE / "runtime" / "execution.py").read_text("utf-8")) == []
    assert _from("keras_vit.checkpoints", "from keras_vit.checkpoints.cache import x") != []


def _module_files():
    """{module name: file} of every keras_vit module (a package by its __init__.py)."""
    files = {}
    for path in PACKAGE.rglob("*.py"):
        parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
        files[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return files


def _import_graph(files):
    """{module: the keras_vit modules it imports, at any depth}; `from a import b` is an
    arrow to a.b where that is a module, else to a."""
    return {name: {m for m in imported_modules(path.read_text("utf-8")) if m in files}
            - {name} for name, path in files.items()}


def _cycles(graph, skip=lambda module: False):
    """The strongly connected groups of more than one module (Tarjan), less `skip`'s."""
    index, low, stack, on_stack, groups = {}, {}, [], set(), []

    def visit(node):
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for nxt in graph[node]:
            if skip(nxt):
                continue
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in on_stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            group = set()
            while True:
                member = stack.pop()
                on_stack.discard(member)
                group.add(member)
                if member == node:
                    break
            if len(group) > 1:
                groups.append(sorted(group))

    for node in sorted(graph):
        if node not in index and not skip(node):
            visit(node)
    return groups


def test_no_two_modules_import_each_other():
    """No circle of imports among the package's modules, imports inside functions included (a
    circle of two formats was once tied by one such import). A package's __init__, which
    gathers its modules for users, is not a module here."""
    files = _module_files()
    packages = {name for name, path in files.items() if path.name == "__init__.py"}
    assert _cycles(_import_graph(files), skip=packages.__contains__) == []


def test_the_circle_scan_finds_a_circle():
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


# Issue 43's bound: a module that grows past it holds more than one thing (training/run.py was
# 712 lines, its train() 154 with 30 parameters, before it was split).
LONGEST_MODULE = 500


def test_no_module_is_longer_than_the_bound():
    lengths = {path.relative_to(PACKAGE).as_posix(): len(path.read_text("utf-8").splitlines())
               for path in PACKAGE.rglob("*.py")}
    assert len(lengths) > 100  # the package's modules were found
    assert {path: n for path, n in lengths.items() if n > LONGEST_MODULE} == {}
