"""The main window's File, Chat and View menus. File and Chat are tables of rows (text, object name,
the window's slot, shortcut, the window attribute keeping the action); the window enables and
disables the actions it keeps. Help is gui/dialogs/help.py's, the panels' toggles gui/panels/docks.py's."""

from __future__ import annotations

from collections.abc import Callable
from operator import attrgetter
from typing import NamedTuple

from PySide6.QtGui import QAction, QKeySequence
from PySide6.QtWidgets import QApplication, QMainWindow, QMenu


class MenuRow(NamedTuple):
    text: str
    name: str  # the action's object name
    slot: str | Callable[[], object]  # a dotted path on the window ("conversations.ask_rename"), or a callable
    shortcut: str | QKeySequence.StandardKey | None = None
    keep_as: str | None = None  # the window attribute holding the action
    on_shown: bool = False  # slot(conversation id) of the conversation shown; nothing while none is or one streams


SEPARATOR = None

FILE_MENU = (
    MenuRow("&New conversation", "newConversationAction", "new_conversation", "Ctrl+N"),
    MenuRow(
        "&Export conversation as Markdown…",
        "exportAction",
        "conversations.ask_export",
        "Ctrl+Shift+E",
        "export_action",
        on_shown=True,
    ),
    MenuRow("Export &all conversations…", "exportAllAction", "conversations.ask_export_all"),
    MenuRow("&Import conversations…", "importAction", "conversations.ask_import"),
    MenuRow("&Build a datastore…", "datastoreWizardAction", "open_datastore_wizard", "Ctrl+Shift+B", "wizard_action"),
    MenuRow("&Forget the learned answers…", "forgetLearnedAction", "forget_learned", None, "forget_action"),
    MenuRow("&Train the recurrent drafter…", "trainHeadAction", "open_train_dialog", None, "train_action"),
    SEPARATOR,
    # Ctrl+, by hand: Qt's Preferences key is empty outside macOS
    MenuRow("&Settings…", "settingsAction", "settings_requested.emit", "Ctrl+,", "settings_action"),
    SEPARATOR,
    MenuRow("&Quit", "quitAction", QApplication.quit, QKeySequence.StandardKey.Quit),
)

CHAT_MENU = (
    MenuRow("&Regenerate answer", "regenerateAction", "regenerate", "Ctrl+R", "regenerate_action"),
    MenuRow("&Edit last message", "editAction", "edit_last", "Ctrl+E", "edit_action"),
    MenuRow("&Stop", "stopAction", "stop", "Ctrl+.", "stop_action"),
    MenuRow("R&ace plain vs speculative…", "raceAction", "open_race", "Ctrl+Shift+R", "race_action"),
    MenuRow("&Measure plain decoding speed", "measureBaselineAction", "measure_baseline", None, "baseline_action"),
    SEPARATOR,
    MenuRow("Re&name conversation…", "renameAction", "conversations.ask_rename", "F2", "rename_action", on_shown=True),
    MenuRow("&Delete conversation…", "deleteAction", "conversations.ask_delete", None, "delete_action", on_shown=True),
)


def build_menus(window: QMainWindow) -> None:
    """File, Chat and View (``window.view_menu``: the panels add their toggles to it)."""
    for title, rows in (("&File", FILE_MENU), ("&Chat", CHAT_MENU)):
        menu = window.menuBar().addMenu(title)
        for row in rows:
            if row is SEPARATOR:
                menu.addSeparator()
            else:
                _add_action(window, menu, row)
    window.view_menu = window.menuBar().addMenu("&View")
    window.provenance_action = _provenance_action(window)
    window.view_menu.addAction(window.provenance_action)
    window.view_menu.addSeparator()


def _add_action(window: QMainWindow, menu: QMenu, row: MenuRow) -> None:
    action = QAction(row.text, window, objectName=row.name)
    if row.shortcut:
        action.setShortcut(QKeySequence(row.shortcut))
    action.triggered.connect(_slot(window, row))
    menu.addAction(action)
    if row.keep_as:
        setattr(window, row.keep_as, action)


def _slot(window: QMainWindow, row: MenuRow) -> Callable[[], object]:
    # Called with no arguments: triggered's "checked" must not reach regenerate(message_id) or a signal's emit.
    method = row.slot if callable(row.slot) else attrgetter(row.slot)(window)
    if row.on_shown:
        return lambda: window.conversation_id is not None and not window.streaming and method(window.conversation_id)
    return lambda: method()


def _provenance_action(window: QMainWindow) -> QAction:
    action = QAction("&Colour drafted tokens", window, objectName="provenanceAction", checkable=True)
    action.setShortcut(QKeySequence("Ctrl+D"))
    action.setToolTip("Colour each token of the answers by where it came from; hover for its step")
    action.toggled.connect(window.set_show_provenance)
    return action
