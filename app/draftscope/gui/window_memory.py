"""The window's shape, kept in the settings' REMEMBERED section (storage/settings.py) and given back:
its size and place and its docks (Qt's saveGeometry and saveState, base64), the drafter colouring and
the open conversation. A reload hands them (and a new conversation's documents folder) from the window
it replaces to the new one; a start restores them from the settings file. A size or place off every
screen there is now is not restored: the window opens centred instead, and never larger than its
screen (gui/fit_screen.py)."""

from __future__ import annotations

import base64
import binascii

from PySide6.QtCore import QByteArray, QDataStream, QEvent, QIODevice, QObject, QRect, QSize
from PySide6.QtGui import QGuiApplication

from draftscope.gui.fit_screen import centre_on_screen, fit_to_screen, move_inside

DEFAULT_SIZE = QSize(1100, 720)  # a first start's window, centred
GEOMETRY_MAGIC = 0x1D9D0CB  # what QWidget.saveGeometry writes first
MIN_ON_SCREEN = QSize(120, 60)  # px of a saved window that must lie on a screen for its place to be kept


def remember(window, settings) -> None:
    """Put ``window``'s shape, colouring and open conversation in ``settings`` (in place)."""
    settings.window_geometry = _text(window.saveGeometry())
    settings.window_layout = _text(window.saveState())
    settings.colour_drafts = window.provenance_action.isChecked()
    settings.last_conversation = window.conversation_id or 0


def restore(window, settings) -> None:
    """Give ``window`` (not shown yet) the shape, colouring and conversation ``settings`` remember."""
    geometry = _bytes(settings.window_geometry)
    if geometry and on_a_screen(saved_frame(geometry)) and window.restoreGeometry(geometry):
        fit_to_screen(window, window.size())  # saved on a larger screen: no larger than this one
    else:
        centre_on_screen(window, DEFAULT_SIZE)
    layout = _bytes(settings.window_layout)
    if layout:
        window.restoreState(layout)
    window.provenance_action.setChecked(settings.colour_drafts)
    if settings.last_conversation:  # one deleted since: a new conversation (show_conversation says so)
        window.show_conversation(settings.last_conversation)


def carry_unsent(previous, window) -> None:
    """What the window a reload replaces held for a new conversation before its first message, kept
    in no history yet, goes to ``window``: its documents folder."""
    folder = previous.documents_panel.folder
    if previous.conversation_id is None and folder and window.conversation_id is None:
        window.documents_panel.set_folder(folder)


def saved_frame(geometry: QByteArray) -> QRect | None:
    """The window's frame as saveGeometry wrote it (None: not a geometry Qt wrote)."""
    stream = QDataStream(geometry, QIODevice.OpenModeFlag.ReadOnly)
    if stream.readUInt32() != GEOMETRY_MAGIC:
        return None
    stream.readUInt16(), stream.readUInt16()  # the format's version
    left, top, right, bottom = (stream.readInt32() for _ in range(4))
    if stream.status() != QDataStream.Status.Ok:
        return None
    return QRect(left, top, right - left + 1, bottom - top + 1)


def on_a_screen(frame: QRect | None) -> bool:
    """Whether enough of ``frame`` lies on one of the screens there are now to reach it."""
    if frame is None:
        return False
    for screen in QGuiApplication.screens():
        seen = frame.intersected(screen.availableGeometry())
        if seen.width() >= MIN_ON_SCREEN.width() and seen.height() >= MIN_ON_SCREEN.height():
            return True
    return False


class WindowKeeper(QObject):
    """Saves the window's shape when it changes the user would miss: the colouring switched, an
    answer ended (its conversation is the one to reopen), and the window closing; and keeps the
    window on its screen when a panel or an edit makes it grow. ``save(window)``
    is the launcher's (it knows which settings the running model holds and where they are kept)."""

    def __init__(self, window, save) -> None:
        super().__init__(window)
        self.window, self.save = window, save
        window.provenance_action.toggled.connect(self.changed)
        window.answer_signals.answer_ended.connect(self.changed)
        window.installEventFilter(self)

    def changed(self, *_args) -> None:
        self.save(self.window)

    def eventFilter(self, watched: QObject, event: QEvent) -> bool:
        if watched is self.window and event.type() == QEvent.Type.Close:
            self.save(self.window)
        elif watched is self.window and event.type() == QEvent.Type.Resize and watched.isVisible():
            move_inside(watched)  # a panel opened widens the window to the right: past the screen's edge
        return False


def _text(data: QByteArray) -> str:
    return base64.b64encode(bytes(data)).decode("ascii")


def _bytes(text: str) -> QByteArray | None:
    """A remembered base64 value as Qt's bytes (None: empty, or not base64: a hand-edited file)."""
    try:
        raw = base64.b64decode(text, validate=True)
    except (binascii.Error, ValueError):
        return None
    return QByteArray(raw) if raw else None
