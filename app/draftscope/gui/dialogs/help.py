"""The Help menu: a short guide and the documentation (gui/dialogs/guide.py), the keyboard shortcuts
(read off the window's own actions, so the list is always the one that works) and an About box
(the version, the model and what runs it, a link to the documentation)."""

from __future__ import annotations

import html
from importlib import metadata

from PySide6.QtCore import Qt
from PySide6.QtGui import QAction, QKeySequence
from PySide6.QtWidgets import (
    QDialog,
    QDialogButtonBox,
    QLabel,
    QMessageBox,
    QTableWidget,
    QTableWidgetItem,
    QVBoxLayout,
)

from draftscope.gui.dialogs.guide import documentation_dialog, guide_dialog

COMPOSER_KEYS = [("Send the message", "Enter"), ("Break the line", "Shift+Enter"), ("Leave an edit", "Esc")]


def add_help_menu(window) -> None:
    menu = window.menuBar().addMenu("&Help")
    guide = QAction("&Guide", window, objectName="guideAction")
    guide.triggered.connect(lambda: _open(window, guide_dialog(window)))
    docs = QAction("&Documentation", window, objectName="documentationAction")
    docs.triggered.connect(lambda: _open(window, documentation_dialog(window)))
    menu.addAction(guide)
    menu.addAction(docs)
    shortcuts = QAction("&Keyboard shortcuts", window, objectName="shortcutsAction", shortcut=QKeySequence("F1"))
    shortcuts.triggered.connect(lambda: _open(window, shortcuts_dialog(window)))
    about = QAction("&About Draftscope", window, objectName="aboutAction")
    about.triggered.connect(lambda: _open(window, about_box(window)))
    menu.addAction(shortcuts)
    menu.addAction(about)


def _open(window, dialog) -> None:
    window.help_dialog = dialog  # kept while open
    dialog.open()


def shortcut_rows(window) -> list[tuple[str, str]]:
    """(what, keys) for every menu action with a shortcut, then the message box's keys."""
    rows = []
    for action in window.findChildren(QAction):
        keys = action.shortcut().toString(QKeySequence.SequenceFormat.NativeText)
        if keys and action.text():
            rows.append((action.text().replace("&", "").rstrip("…"), keys))
    return sorted(set(rows)) + COMPOSER_KEYS


def shortcuts_dialog(window) -> QDialog:
    dialog = QDialog(window, objectName="shortcutsDialog")
    dialog.setWindowTitle("Keyboard shortcuts")
    rows = shortcut_rows(window)
    table = QTableWidget(len(rows), 2, objectName="shortcutsTable")
    table.setHorizontalHeaderLabels(["What", "Keys"])
    for r, (what, keys) in enumerate(rows):
        table.setItem(r, 0, QTableWidgetItem(what))
        table.setItem(r, 1, QTableWidgetItem(keys))
    table.resizeColumnsToContents()
    table.verticalHeader().hide()
    buttons = QDialogButtonBox(QDialogButtonBox.StandardButton.Close)
    buttons.rejected.connect(dialog.reject)
    layout = QVBoxLayout(dialog)
    layout.addWidget(table)
    layout.addWidget(buttons)
    dialog.resize(460, 520)
    return dialog


def about_box(window) -> QMessageBox:
    try:
        version = metadata.version("draftscope")
    except metadata.PackageNotFoundError:
        version = "(not installed)"
    engine = window.engine
    text = (
        f"<h3>Draftscope {html.escape(version)}</h3><p>A chat app that answers fast through speculative "
        "decoding, and shows how: drafts from your datastore, the conversation, the model's own answers and "
        "small drafters, verified by the model in one forward, so the answer is what plain decoding gives.</p>"
        f"<p>Model: {html.escape(engine.name)}<br>Runs on: {html.escape(engine.backend.describe())}</p>"
        '<p><a href="docs:guide">Guide</a> &nbsp; <a href="docs:readme">Documentation</a></p>'
        "<p>Apache-2.0</p>"
    )
    box = QMessageBox(QMessageBox.Icon.Information, "About Draftscope", text, QMessageBox.StandardButton.Ok, window)
    box.setObjectName("aboutBox")
    box.setTextInteractionFlags(Qt.TextInteractionFlag.TextBrowserInteraction)
    label = box.findChild(QLabel, "qt_msgbox_label")  # the box's text: its links open the pages in the app
    label.setOpenExternalLinks(False)
    label.linkActivated.connect(lambda link: _open(window, _DOC_PAGES[link](window)))
    return box


_DOC_PAGES = {"docs:guide": guide_dialog, "docs:readme": documentation_dialog}
