"""What the faces that keep a documents folder say when files in it are bad: the terminal (chat and
serve --documents) and the window index the rest and name what was skipped (a link out of the
folder, a link to nothing) instead of stopping; the watcher that keeps the folder up to date says a
failed pass once and goes on looking."""

from __future__ import annotations

import threading
from types import SimpleNamespace

import pytest

from draftscope.documents.folder import FolderIndex, Watcher

OUTSIDE = "links outside the folder"  # the reason the window and the terminal give


@pytest.fixture
def folder(tmp_path, monkeypatch):
    """A folder with one good file, a link to a private file outside it and a link to nothing."""
    monkeypatch.setenv("DRAFTSCOPE_DATA_DIR", str(tmp_path / "data"))
    (tmp_path / "secret.txt").write_text("the vault code is 0451\n")
    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "guide.md").write_text("The vault is behind the library.\n")
    (docs / "secret.txt").symlink_to(tmp_path / "secret.txt")
    (docs / "old.md").symlink_to(tmp_path / "deleted.md")
    return docs


def test_the_terminal_indexes_the_rest_and_names_the_links_it_skipped(folder, capsys):
    from draftscope.commands.chat import open_documents

    runtime = SimpleNamespace(documents=None)
    watcher = open_documents(runtime, str(folder))
    try:
        said = capsys.readouterr().err
        assert "1 documents indexed" in said
        assert "old.md is a link to nothing" in said
        assert f"1 skipped, {OUTSIDE} (secret.txt)" in said
        found = runtime.documents.search("vault code", 400, lambda t: len(t.split()))
        assert found and not any("0451" in p.text for p in found)
    finally:
        watcher.stop()
        runtime.documents.close()


def test_the_window_indexes_the_rest_and_names_the_links_it_skipped(folder, qtbot):
    from draftscope.gui.panels.documents import DocumentsPanel

    session = SimpleNamespace(conversation_id=None, documents=None)
    panel = DocumentsPanel(session, history=None)
    qtbot.addWidget(panel)
    panel.set_folder(str(folder))
    qtbot.waitUntil(lambda: not panel.jobs.running, timeout=10_000)
    status = panel.status.text()
    assert "Indexing stopped" not in status and session.documents is panel.index
    assert status.startswith("1 files searchable; 1 could not be read (old.md is a link to nothing")
    assert status.endswith(f"1 skipped, {OUTSIDE} (secret.txt)")
    panel.close_jobs()
    panel.index.close()


def test_the_watcher_says_a_failed_pass_once_and_keeps_looking(folder, tmp_path):
    index = FolderIndex(folder, tmp_path / "index.sqlite3")
    real_refresh, passes = index.refresh, []

    def refresh(**kwargs):  # the first three passes fail as a disk that hiccups would
        passes.append(1)
        if len(passes) <= 3:
            raise RuntimeError("the disk hiccuped")
        return real_refresh(**kwargs)

    index.refresh = refresh
    errors, indexed = [], threading.Event()
    watcher = Watcher(index, interval=0.01, on_report=lambda report: indexed.set(), on_error=errors.append)
    try:
        assert indexed.wait(timeout=10), "the watcher went on after the failed passes and indexed the folder"
    finally:
        watcher.stop()
    assert len(errors) == 1 and "the disk hiccuped" in errors[0] and str(folder) in errors[0]
    assert index.search("vault library", 400, lambda t: len(t.split()))
    index.close()
