"""tests/conftest.py runs a big_memory test under pytest-xdist in a fresh process of its own
and reports what it did there as the worker's own outcome: run here on a throw-away test file
under one worker, with the conftest's hooks loaded as a plugin."""

import os
import subprocess
import sys

from tests.conftest import ROOT

CASES = '''
import os
import pytest

@pytest.fixture(scope="module")
def shared():
    return "module"

def test_ordinary_before(shared):
    assert shared == "module"

@pytest.mark.big_memory
def test_big_runs_outside_the_worker():
    assert "PYTEST_XDIST_WORKER" not in os.environ

@pytest.mark.big_memory
def test_big_skips():
    pytest.skip("skipped inside")

@pytest.mark.big_memory
def test_big_fails():
    assert 1 == 2, "failed inside"

def test_ordinary_runs_in_the_worker(shared):
    assert "PYTEST_XDIST_WORKER" in os.environ

@pytest.mark.big_memory
def test_big_last_in_its_module():
    pass
'''
# The module after it on the same worker: its setup finds the module before torn down.
NEXT_MODULE = '''
def test_the_next_module_sets_up():
    pass
'''


def test_a_big_memory_test_runs_and_reports_from_a_process_of_its_own(tmp_path):
    (tmp_path / "test_cases.py").write_text(CASES)
    (tmp_path / "test_next.py").write_text(NEXT_MODULE)
    (tmp_path / "pytest.ini").write_text("[pytest]\nmarkers =\n    big_memory: test\n")
    result = subprocess.run(
        # one worker runs both modules in order: the module fixture set up before the
        # big_memory tests and used after them, then the next module
        [sys.executable, "-m", "pytest", "-n", "1", "-p", "tests.conftest", "-rA",
         "-p", "no:cacheprovider", "test_cases.py", "test_next.py"],
        cwd=tmp_path, env={**os.environ, "PYTHONPATH": ROOT}, capture_output=True, text=True,
        timeout=300)
    lines = result.stdout.splitlines()
    assert "PASSED test_cases.py::test_big_runs_outside_the_worker" in lines, result.stdout
    assert "PASSED test_cases.py::test_ordinary_runs_in_the_worker" in lines, result.stdout
    assert "PASSED test_cases.py::test_ordinary_before" in lines, result.stdout
    assert "PASSED test_cases.py::test_big_last_in_its_module" in lines, result.stdout
    assert "PASSED test_next.py::test_the_next_module_sets_up" in lines, result.stdout
    assert not [line for line in lines if line.startswith("ERROR")], result.stdout
    assert any(line.startswith("SKIPPED") and "skipped inside" in line for line in lines)
    failed = [line for line in lines if line.startswith("FAILED")]
    assert failed == [line for line in failed if "test_big_fails" in line] and failed, lines
    # The child's own report, with the assertion's message, is in the worker's failure.
    assert "in its own process" in result.stdout and "failed inside" in result.stdout
    assert result.returncode == 1
