"""The window's docks, built in one place: the inspection panels (draft tree, speedup, accepted
drafts), shown together by View ▸ Show all inspection panels, and the conversation's documents."""

from __future__ import annotations

import functools

from PySide6.QtCore import Qt
from PySide6.QtGui import QAction, QKeySequence
from PySide6.QtWidgets import QDockWidget

from draftscope.gui.panels.documents import DocumentsPanel
from draftscope.gui.panels.drafts import DraftsPanel
from draftscope.gui.panels.inspection import InspectionController
from draftscope.gui.panels.speedup import SpeedupPanel
from draftscope.gui.panels.trie_view import TrieView

TREE_MIN_HEIGHT = 160  # px of the draft tree's drawing: a tree a few levels deep, its labels readable


def build_docks(window, engine) -> None:
    """Sets ``window.docks`` (the inspection docks by name), its panels and ``inspection``, and
    ``window.documents_panel`` in a dock of its own."""
    # the draft tree labels each node with its token's text; decoding is cached per window
    token_text = functools.lru_cache(maxsize=65536)(lambda token_id: engine.tokenizer.decode([token_id]))
    window.docks, window.drafts_panel = {}, DraftsPanel()
    window.trie_view = TrieView(token_text)
    window.speedup_panel = SpeedupPanel()
    window.inspection = InspectionController(window.drafts_panel, window.trie_view, window.speedup_panel, window)
    window.inspection.step_selected.connect(window.chat_view.highlight_step)
    window.chat_view.selection = lambda: (
        None if window.inspection.selected is None else (window.inspection.answer, window.inspection.selected)
    )
    # the right-hand docks run the window's full height, beside the accepted-drafts table rather than
    # above it: with the speedup charts' minimum below it, the tree kept ~40 px at the default size
    window.setCorner(Qt.Corner.BottomRightCorner, Qt.DockWidgetArea.RightDockWidgetArea)
    window.trie_view.view.setMinimumHeight(TREE_MIN_HEIGHT)
    for name, title, widget, area in (
        ("trieDock", "Draft tree", window.trie_view, Qt.DockWidgetArea.RightDockWidgetArea),
        ("speedupDock", "Speedup", window.speedup_panel, Qt.DockWidgetArea.RightDockWidgetArea),
        ("draftsDock", "Accepted drafts", window.drafts_panel, Qt.DockWidgetArea.BottomDockWidgetArea),
    ):
        window.docks[name] = _dock(window, name, title, widget, area)
    window.show_panels_action = QAction(
        "Show all inspection &panels", window, objectName="showPanelsAction", shortcut=QKeySequence("Ctrl+I")
    )
    window.show_panels_action.triggered.connect(window.show_panels)
    window.view_menu.addAction(window.show_panels_action)
    window.view_menu.addSeparator()
    window.documents_panel = DocumentsPanel(window.session, window.history)
    window.documents_panel.said.connect(lambda text: window.status.say(text, 8000))
    window.documents_dock = _dock(
        window, "documentsDock", "Documents", window.documents_panel, Qt.DockWidgetArea.LeftDockWidgetArea
    )
    window.answer_selected.connect(
        lambda message_id, steps: window.inspection.show_answer(message_id, steps, window._baseline_of(message_id))
    )


def _dock(window, name: str, title: str, widget, area) -> QDockWidget:
    dock = QDockWidget(title, window, objectName=name)
    dock.setWidget(widget)
    window.addDockWidget(area, dock)
    dock.hide()
    window.view_menu.addAction(dock.toggleViewAction())
    return dock
