"""The settings form's building blocks: labels whose wrapped text gets its height in a form row,
greyed hints, rows of widgets, spin boxes, and one label column for every tab."""

from __future__ import annotations

from PySide6.QtCore import QSize, Qt
from PySide6.QtGui import QPainter
from PySide6.QtWidgets import (
    QDoubleSpinBox,
    QFormLayout,
    QHBoxLayout,
    QLabel,
    QProgressBar,
    QPushButton,
    QSpinBox,
    QTabWidget,
    QWidget,
)


class FitsWidth:
    """Asks for the height its wrapped text takes at its actual width. QFormLayout gives a row the
    height of its size hint, which Qt works out for a narrower guess at the width: a wrapped text
    would float in a gap a line or two too tall. Mixed in before a QWidget class."""

    def _fitted(self, hint: QSize) -> QSize:
        if self.width() > 1 and self.hasHeightForWidth():
            height = self.heightForWidth(self.width())
            if height > 0:
                return QSize(hint.width(), height)
        return hint

    def sizeHint(self) -> QSize:
        return self._fitted(super().sizeHint())

    def minimumSizeHint(self) -> QSize:
        return self._fitted(super().minimumSizeHint())

    def resizeEvent(self, event) -> None:
        super().resizeEvent(event)
        if event.oldSize().width() != event.size().width():
            self.updateGeometry()


class FittedLabel(FitsWidth, QLabel):
    """A QLabel that, wrapped, is as tall as its text at its width."""


def hint(text: str, *, wrap: bool = False, objectName: str = "") -> QLabel:
    """Explanatory text next to or under a field."""
    label = FittedLabel(text, objectName=objectName)
    label.setEnabled(False)  # the disabled palette greys it, in every theme
    label.setWordWrap(wrap)
    return label


def form_layout(tab: QWidget) -> QFormLayout:
    form = QFormLayout(tab)
    form.setFieldGrowthPolicy(QFormLayout.FieldGrowthPolicy.AllNonFixedFieldsGrow)
    form.setLabelAlignment(Qt.AlignmentFlag.AlignRight | Qt.AlignmentFlag.AlignVCenter)
    return form


def row(*widgets: QWidget, stretch_first: bool = True) -> QWidget:
    """Widgets side by side: the first takes the spare width, or (``stretch_first=False``) none does."""
    box = QWidget()
    layout = QHBoxLayout(box)
    layout.setContentsMargins(0, 0, 0, 0)
    for i, w in enumerate(widgets):
        layout.addWidget(w, 1 if (i == 0 and stretch_first) else 0)
    if not stretch_first:
        layout.addStretch(1)
    return box


def double_spin(name: str, low: float, high: float, step: float) -> QDoubleSpinBox:
    spin = QDoubleSpinBox(objectName=name)
    spin.setRange(low, high)
    spin.setSingleStep(step)
    spin.setDecimals(2)
    spin.setMinimumWidth(110)
    return spin


def int_spin(name: str, low: int, high: int) -> QSpinBox:
    spin = QSpinBox(objectName=name)
    spin.setRange(low, high)
    spin.setMinimumWidth(110)
    return spin


def align_label_columns(tabs: QTabWidget) -> None:
    """One label width for all tabs (each a QFormLayout), so the fields do not jump when switching tabs."""
    labels = []
    for i in range(tabs.count()):
        form = tabs.widget(i).layout()
        for r in range(form.rowCount()):
            item = form.itemAt(r, QFormLayout.ItemRole.LabelRole)
            if item is not None and item.widget() is not None:
                labels.append(item.widget())
    width = max(label.sizeHint().width() for label in labels)
    for label in labels:
        label.setMinimumWidth(width)
        label.setAlignment(Qt.AlignmentFlag.AlignRight | Qt.AlignmentFlag.AlignVCenter)


def show_error(label: QLabel, on: bool = True) -> None:
    """Colour ``label`` as an error (the style sheet's ``error`` colour, light or dark) or not."""
    label.setProperty("error", bool(on))
    label.style().unpolish(label)  # a dynamic property: the style sheet is applied again
    label.style().polish(label)


def wrapping_label(text: str = "", *, objectName: str = "") -> QLabel:
    label = QLabel(text, objectName=objectName)
    label.setWordWrap(True)
    return label


def note(text: str) -> QLabel:
    """Smaller, dimmer explanatory text."""
    label = wrapping_label(text)
    label.setStyleSheet("color: palette(placeholder-text);")
    return label


def indented(widget: QWidget) -> QWidget:
    box = QWidget()
    layout = QHBoxLayout(box)
    layout.setContentsMargins(24, 0, 0, 0)
    layout.addWidget(widget)
    return box


def progress_row(bar: QProgressBar, cancel: QPushButton) -> QWidget:
    row = QWidget()
    policy = row.sizePolicy()
    policy.setRetainSizeWhenHidden(True)  # the page keeps its height when a download starts or ends
    row.setSizePolicy(policy)
    layout = QHBoxLayout(row)
    layout.setContentsMargins(0, 0, 0, 0)
    layout.addWidget(bar, 1)
    layout.addWidget(cancel)
    return row


SHORTEST = 48  # pixels an elided label may shrink to by default


class ElidedLabel(QLabel):
    """A one-line label that, given less room than its text needs, ends it with "…" (its whole
    text on hover) instead of being cut mid-letter; it gives way before the labels beside it that
    hold figures. ``shortest``: the width it shrinks to at most (KEPT: what runs, which the other
    names give way to)."""

    def __init__(self, *args, shortest: int = SHORTEST, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.shortest = shortest

    def minimumSizeHint(self) -> QSize:
        hint = super().minimumSizeHint()
        return QSize(min(self.shortest, hint.width()), hint.height())

    def paintEvent(self, event) -> None:  # Qt's name
        room = self.contentsRect().width()
        if self.fontMetrics().horizontalAdvance(self.text()) <= room:
            super().paintEvent(event)
            return
        painter = QPainter(self)
        painter.setPen(self.palette().color(self.foregroundRole()))
        shown = self.fontMetrics().elidedText(self.text(), Qt.TextElideMode.ElideRight, room)
        painter.drawText(self.contentsRect(), int(self.alignment()), shown)

    def shown_text(self) -> str:
        """The text as drawn now (elided when the label is narrower than its text)."""
        return self.fontMetrics().elidedText(self.text(), Qt.TextElideMode.ElideRight, self.contentsRect().width())
