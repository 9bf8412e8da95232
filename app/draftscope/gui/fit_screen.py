"""Windows that fit the screen they open on (a 1366x768 laptop included): a dialog's pages in
scroll areas that ask for their full size but can shrink, and a window's size capped to its
screen's available area (the desktop's panels left out, and the window manager's title bar and
borders) and moved inside it. Every dialog and the main window size themselves through here."""

from __future__ import annotations

from PySide6.QtCore import QEvent, QObject, QPoint, QRect, QSize, Qt
from PySide6.QtGui import QGuiApplication
from PySide6.QtWidgets import QFrame, QScrollArea, QStyle, QTabWidget, QWidget

# A window manager's borders and title bar while a window has no frame yet to measure (px).
FRAME_ALLOWANCE = QSize(16, 48)
MIN_PAGE_HEIGHT = 120  # px: a scrolled page never shrinks below a few rows


class FittingScroll(QScrollArea):
    """A page in a scroll area: it asks for the page's whole size (QScrollArea caps its wish at
    36 x 24 lines) and its width, so that it never scrolls sideways, but only a few rows of its
    height: a dialog on a short screen scrolls its page rather than its buttons off the screen."""

    def __init__(self, page: QWidget, name: str = "") -> None:
        super().__init__(objectName=name)
        self.setFrameShape(QFrame.Shape.NoFrame)
        self.setWidgetResizable(True)
        self.setHorizontalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAsNeeded)
        self.setWidget(page)
        page.installEventFilter(self)  # a page that grows (a row shown) asks its dialog again

    def _bar_width(self) -> int:
        return self.style().pixelMetric(QStyle.PixelMetric.PM_ScrollBarExtent, None, self)

    def sizeHint(self) -> QSize:
        page = self.widget().sizeHint()
        return QSize(page.width() + self._bar_width(), page.height())

    def minimumSizeHint(self) -> QSize:
        page = self.widget().minimumSizeHint()
        return QSize(page.width() + self._bar_width(), min(page.height(), MIN_PAGE_HEIGHT))

    def eventFilter(self, watched: QObject, event: QEvent) -> bool:
        if event.type() == QEvent.Type.LayoutRequest:
            self.updateGeometry()
        return False


def scrolling(page: QWidget, name: str = "") -> FittingScroll:
    """``page`` in a FittingScroll (``name``: the scroll area's object name)."""
    return FittingScroll(page, name)


def scroll_tabs(tabs: QTabWidget) -> None:
    """Every page of ``tabs`` in a FittingScroll (its tab's text, tooltip and place kept)."""
    current = tabs.currentIndex()
    for i in range(tabs.count()):
        page, text, tip = tabs.widget(i), tabs.tabText(i), tabs.tabToolTip(i)
        tabs.removeTab(i)
        tabs.insertTab(i, scrolling(page, f"{page.objectName() or 'page'}Scroll"), text)
        tabs.setTabToolTip(i, tip)
    tabs.setCurrentIndex(current)


def screen_of(window: QWidget):
    """The screen ``window`` is on; before it is shown, its parent's (a dialog opens over it)."""
    shown_on = window if window.isVisible() or window.parentWidget() is None else window.parentWidget().window()
    return shown_on.screen() or QGuiApplication.primaryScreen()


def frame_extra(window: QWidget) -> QSize:
    """What the window manager adds around the window: measured once it is shown with a frame."""
    if window.isVisible():
        extra = window.frameGeometry().size() - window.geometry().size()
        if extra.width() > 0 or extra.height() > 0:
            return extra
    return FRAME_ALLOWANCE


def available(window: QWidget) -> QRect:
    """The part of the window's screen windows may use (the desktop's panels and docks left out)."""
    return screen_of(window).availableGeometry()


def room(window: QWidget) -> QSize:
    """The largest size the window may have with its frame inside its screen's available area."""
    return available(window).size() - frame_extra(window)


def fit_to_screen(window: QWidget, wanted: QSize | None = None) -> None:
    """Resize ``window`` to ``wanted`` (default: its size hint), capped to its screen's room, and
    move it inside the screen when it is shown."""
    window.resize((wanted if wanted is not None else window.sizeHint()).boundedTo(room(window)))
    if window.isVisible():
        move_inside(window)


def grow_to(window: QWidget, height: int) -> None:
    """Grow ``window`` to ``height`` (wrapped text that needs more lines), no taller than its screen."""
    if height > window.height():
        window.resize(window.width(), min(height, max(window.height(), room(window).height())))
        if window.isVisible():
            move_inside(window)


def move_inside(window: QWidget) -> None:
    """Move a shown window so that its frame lies inside its screen's available area (as far as it fits)."""
    area, frame = available(window), window.frameGeometry()
    x = max(area.left(), min(frame.left(), area.right() + 1 - frame.width()))
    y = max(area.top(), min(frame.top(), area.bottom() + 1 - frame.height()))
    if QPoint(x, y) != frame.topLeft():
        window.move(x, y)


def centre_on_screen(window: QWidget, size: QSize) -> None:
    """``size`` (capped to the room) in the middle of the window's screen."""
    fit_to_screen(window, size)
    frame = QRect(QPoint(0, 0), window.size() + frame_extra(window))
    frame.moveCenter(available(window).center())
    window.move(frame.topLeft())


class KeepOnScreen(QObject):
    """Caps a dialog to its screen each time it is shown (its screen is known then: its parent's)."""

    def eventFilter(self, watched: QObject, event: QEvent) -> bool:
        if event.type() == QEvent.Type.Show and isinstance(watched, QWidget) and watched.isWindow():
            if watched.width() > room(watched).width() or watched.height() > room(watched).height():
                fit_to_screen(watched, watched.size())
            move_inside(watched)
        return False


def fit_dialog(dialog: QWidget, wanted: QSize | None = None) -> None:
    """A dialog sized to ``wanted`` (default: its size hint) within its screen, now and whenever it
    is shown."""
    fit_to_screen(dialog, wanted)
    keeper = KeepOnScreen(dialog)
    dialog.installEventFilter(keeper)
