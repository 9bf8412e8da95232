"""CI cannot be killed by one test (issue 40): run as ``scripts/setup.sh test`` runs the suite (an
xdist worker, the crash report plugin), a test that dies of a native fault fails by name with its
signal, and the tests after it still run and report."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("xdist")

CRASHING = """
import ctypes, os, signal

def test_before():
    assert True

def test_a_kernel_that_faults():
    ctypes.string_at(0)  # a read of address 0, as a faulting native kernel does

def test_an_illegal_instruction():
    os.kill(os.getpid(), signal.SIGILL)

def test_after():
    assert True
"""


def test_a_native_crash_fails_its_test_and_the_run_goes_on(tmp_path):
    (tmp_path / "test_crashing.py").write_text(CRASHING)
    tests = Path(__file__).resolve().parents[1]
    child = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-q",
            "-n",
            "1",
            "--max-worker-restart",
            "100",
            "-p",
            "crash_report",
            "-p",
            "no:cacheprovider",
            "-o",
            "addopts=",
            str(tmp_path),
        ],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        timeout=300,
        env={**os.environ, "PYTHONPATH": str(tests)},
    )
    out = child.stdout
    assert child.returncode == 1, out + child.stderr
    assert "2 failed, 2 passed" in out, out
    assert "FAILED test_crashing.py::test_a_kernel_that_faults - Segmentation fault" in out, out
    assert "FAILED test_crashing.py::test_an_illegal_instruction - Illegal instruction" in out, out
    assert "in test_a_kernel_that_faults" in out  # the Python stack of the crash is quoted
