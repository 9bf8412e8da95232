"""Help ▸ Guide and Help ▸ Documentation (offscreen Qt, a tiny real model): the guide covers what
a first hour needs (chat, attach, the speedup panel, a datastore, the server), the documentation
is the project's README, and About's link opens it in the app."""

import os

import pytest

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
pytest.importorskip("PySide6")

from engine_fixtures import tiny_llama
from PySide6.QtGui import QAction
from PySide6.QtWidgets import QLabel, QTextBrowser
from runtime_helpers import runtime_for

from draftscope.engine.engine import Engine
from draftscope.gui.main_window import MainWindow
from draftscope.storage import HistoryStore


def test_the_guide_and_the_documentation_open_from_help_and_from_about(qtbot, tokenizer, tmp_path):
    engine = Engine(tiny_llama(len(tokenizer), seed=3), tokenizer, name="tiny")
    window = MainWindow(runtime_for(engine), HistoryStore(tmp_path / "h.sqlite3"))
    qtbot.addWidget(window)
    help_menu = next(a.menu() for a in window.menuBar().actions() if a.text() == "&Help")
    assert [a.objectName() for a in help_menu.actions()][:2] == ["guideAction", "documentationAction"]

    window.findChild(QAction, "guideAction").trigger()
    guide = window.help_dialog.findChild(QTextBrowser, "guideDialogText").toPlainText()
    for part in ("Chat", "Attach files", "Read the speedup panel", "Build a datastore", "Serve other programs"):
        assert part in guide
    window.help_dialog.close()

    window.findChild(QAction, "aboutAction").trigger()
    about = window.help_dialog
    label = about.findChild(QLabel, "qt_msgbox_label")
    assert 'href="docs:readme"' in label.text()
    label.linkActivated.emit("docs:readme")
    readme = window.help_dialog.findChild(QTextBrowser, "documentationDialogText").toPlainText()
    assert "speculative" in readme and "Using the desktop app" in readme
    about.close()
    window.help_dialog.close()
