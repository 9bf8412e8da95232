"""The bundle's entry point (packaging/entry.py) stands in for Python where the app starts a
child as ``sys.executable -m MODULE``: in a PyInstaller bundle ``sys.executable`` is the app
itself, so without it every PDF, DOCX and HTML page (read in a child) would be refused."""

from __future__ import annotations

import sys
from pathlib import Path

import draftscope.documents.isolate as isolate
from draftscope.documents.extract import read_bytes

ENTRY = Path(__file__).resolve().parents[2] / "packaging" / "entry.py"


def test_the_bundles_entry_runs_the_file_readers_child(monkeypatch):
    """The command a bundle runs for the reader: its entry point with ``-m draftscope.documents.child``."""
    monkeypatch.setattr(isolate, "CHILD_COMMAND", [sys.executable, str(ENTRY), "-m", "draftscope.documents.child"])
    page = b"<html><head><title>Boiler</title><body><p>Serviced every 18 months.</p></body></html>"
    got = read_bytes("boiler.html", page)
    assert "Serviced every 18 months." in got.text


def test_the_bundles_entry_without_m_is_the_app():
    """Anything else is the app's own command line, as before."""
    import subprocess

    done = subprocess.run([sys.executable, str(ENTRY), "--help"], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0 and "usage: draftscope" in done.stdout
