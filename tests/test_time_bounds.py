"""No test in the default suite asserts on elapsed time except the hostile-input bounds listed
in tests/conftest.py TIME_BOUNDS (issue 31): a wall-clock assertion measured beside other work
is a property of the machine's load, not of the code."""

import ast
import os
import re

from tests.conftest import ROOT, TIME_BOUNDS

# What reads as a duration in a test's source: a clock, or a name for what one measured.
TIME_WORDS = re.compile(r"\belapsed\b|seconds|\btime\.(?:time|monotonic|perf_counter)\(|"
                        r"\bduration\b|_s\b")
UPPER_BOUNDS = (ast.Lt, ast.LtE)
LOWER_BOUNDS = (ast.Gt, ast.GtE)


def _is_slow(function):
    """Marked `slow` (setup.cfg's addopts leaves those out of the default suite)."""
    return any(re.fullmatch(r"(pytest\.)?mark\.slow(\(.*\))?", ast.unparse(decorator), re.S)
               for decorator in function.decorator_list)


def _timed(expression, timed_names):
    text = ast.unparse(expression)
    return bool(TIME_WORDS.search(text)) or any(
        isinstance(node, ast.Name) and node.id in timed_names for node in ast.walk(expression))


def _bounds_time(assertion):
    """Whether `assertion` bounds a duration from above: `t < N`, `N > t`, chains alike, with a
    comprehension's variable timed when what it runs over is (`all(s < 60 for s in seconds)`)."""
    timed_names = {target.id for node in ast.walk(assertion) if isinstance(node, ast.comprehension)
                   and _timed(node.iter, set()) for target in ast.walk(node.target)
                   if isinstance(target, ast.Name)}
    for node in ast.walk(assertion.test):
        if not isinstance(node, ast.Compare):
            continue
        operands = [node.left, *node.comparators]
        for op, left, right in zip(node.ops, operands, operands[1:]):
            if isinstance(op, UPPER_BOUNDS) and _timed(left, timed_names):
                return True
            if isinstance(op, LOWER_BOUNDS) and _timed(right, timed_names):
                return True
    return False


def time_assertions(root=None):
    """{"tests/path.py::function": first line} of each default-suite function (a test or a helper)
    under `root` (tests/) with an assertion that bounds a duration from above."""
    root = root or os.path.join(ROOT, "tests")
    found = {}
    for folder, _dirs, files in os.walk(root):
        for name in sorted(files):
            if not name.endswith(".py"):
                continue
            path = os.path.join(folder, name)
            with open(path, encoding="utf-8") as f:
                tree = ast.parse(f.read(), path)
            relative = os.path.relpath(path, ROOT).replace(os.sep, "/")
            for function in ast.walk(tree):
                if not isinstance(function, (ast.FunctionDef, ast.AsyncFunctionDef)):
                    continue
                if _is_slow(function):
                    continue
                for node in ast.walk(function):
                    if isinstance(node, ast.Assert) and _bounds_time(node):
                        found.setdefault(f"{relative}::{function.name}", node.lineno)
    return found


def test_every_time_assertion_is_a_listed_hostile_input_bound():
    unlisted = {key: line for key, line in time_assertions().items() if key not in TIME_BOUNDS}
    assert not unlisted, ("assertions on elapsed time outside tests/conftest.py TIME_BOUNDS "
                          f"(count work instead, or list a hostile-input bound with its measured "
                          f"time and a 10x margin): {unlisted}")


def test_every_listed_bound_names_a_test_that_exists():
    defined = set()
    for key in TIME_BOUNDS:
        path, function = key.split("::")
        with open(os.path.join(ROOT, path), encoding="utf-8") as f:
            tree = ast.parse(f.read())
        if any(isinstance(node, ast.FunctionDef) and node.name == function for node in ast.walk(tree)):
            defined.add(key)
    assert defined == set(TIME_BOUNDS), sorted(set(TIME_BOUNDS) - defined)
    assert all("x" in note and "s" in note for note in TIME_BOUNDS.values())  # a margin stated


def test_the_search_finds_time_assertions_in_their_usual_shapes(tmp_path):
    """The search can fail: each shape the suite has used is found; a lower bound, a count and
    a slow test are not."""
    (tmp_path / "test_shapes.py").write_text(
        "import time\nimport pytest\n"
        "def test_a():\n    start = time.monotonic()\n    assert time.monotonic() - start < 5\n"
        "def test_b():\n    elapsed = 1.0\n    assert elapsed < 60, elapsed\n"
        "def test_c(stats):\n    assert stats['seconds'] < 1.0\n"
        "def test_d(seconds):\n    assert all(0 < s < 60 for s in seconds.values())\n"
        "def test_e(limit, took):\n    assert limit > took_seconds\n"
        "def test_lower(seconds):\n    assert seconds > 0 and seconds == seconds\n"
        "def test_count(calls):\n    assert len(calls) < 3\n"
        "@pytest.mark.slow\ndef test_slow():\n    elapsed = 1.0\n    assert elapsed < 60\n"
        "@pytest.mark.parametrize('mode', ['slow'])\ndef test_f(mode, elapsed):\n"
        "    assert elapsed < 60\n")
    found = {key.split("::")[1] for key in time_assertions(str(tmp_path))}
    assert found == {"test_a", "test_b", "test_c", "test_d", "test_e", "test_f"}, found
