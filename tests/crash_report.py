"""A native crash fails its test, not the run, and says what killed it.

The suite runs in a pytest-xdist worker (``scripts/setup.sh test``: ``-n 1``); when a faulting
kernel (llama.cpp's, Qt's, torch's) kills the worker, xdist reports the test it was running as
failed and starts another worker for the rest. xdist can only say "worker crashed", so each worker's
fault handler writes to a file of its own, and the crashed test's report quotes it: the signal
("Fatal Python error: Segmentation fault") and the Python stack of every thread."""

from __future__ import annotations

import faulthandler
import os
import tempfile
from pathlib import Path

import pytest

_DIR_VAR = "DRAFTSCOPE_CRASH_DIR"
_QUOTED_LINES = 60


def pytest_configure(config):
    if not os.environ.get("PYTEST_XDIST_WORKER"):  # the controller: a folder its workers inherit
        os.environ.setdefault(_DIR_VAR, tempfile.mkdtemp(prefix="draftscope-crashes-"))


@pytest.hookimpl(trylast=True)  # after pytest's own faulthandler plugin, which points it at stderr
def pytest_sessionstart(session):
    worker = os.environ.get("PYTEST_XDIST_WORKER")
    folder = os.environ.get(_DIR_VAR)
    if worker and folder:
        log = open(Path(folder) / f"{worker}.log", "w")  # open until the worker ends
        session.config._crash_log = log  # kept alive: faulthandler writes to its descriptor
        faulthandler.enable(file=log, all_threads=True)


@pytest.hookimpl(optionalhook=True)
def pytest_handlecrashitem(crashitem, report, sched):
    """xdist's hook: the crashed test's report gets the worker's last words."""
    node = getattr(report, "node", None)
    worker = getattr(getattr(node, "gateway", None), "id", None)
    folder = os.environ.get(_DIR_VAR)
    if not worker or not folder:
        return
    try:
        said = (Path(folder) / f"{worker}.log").read_text(errors="replace").strip().splitlines()
    except OSError:
        return
    if said:
        cause = said[0].removeprefix("Fatal Python error: ")
        report.longrepr = f"{cause}: the test process died while running {crashitem}\n\n" + "\n".join(
            said[:_QUOTED_LINES]
        )
