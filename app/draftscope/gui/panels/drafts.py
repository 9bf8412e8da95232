"""The accepted-drafts panel: one row per decoding step of the selected (or streaming) answer.

Columns: step, tree size, accepted length, the accepted text, its source, draft and verify
milliseconds. Selecting a row emits ``step_selected`` (the index in the step list) so the other
panels and the chat follow; ``select_step`` moves the selection without emitting.
"""

from __future__ import annotations

from PySide6.QtCore import QItemSelectionModel, QModelIndex, Qt, Signal
from PySide6.QtGui import QColor, QPalette, QStandardItem, QStandardItemModel
from PySide6.QtWidgets import QAbstractItemView, QHeaderView, QLabel, QTableView, QVBoxLayout, QWidget

from draftscope.gui.chat.render import provenance_words
from draftscope.gui.palettes import PROVENANCE_COLOURS

COLUMNS = ("Step", "Tree", "Accepted", "Accepted text", "Source", "Draft ms", "Verify ms")
NUMERIC = {0, 1, 2, 5, 6}


def visible_text(text: str) -> str:
    """Whitespace made visible, so an accepted space or line break can be seen in a cell."""
    return text.replace(" ", "·").replace("\n", "⏎").replace("\t", "⇥")


def step_row(ev) -> tuple:
    """What a row shows for one StepEvent (computed once: data() is called very often)."""
    accepted = ev.accepted
    sources = list(dict.fromkeys(s for s in ev.provenance[:accepted] if s != "target"))
    text = "".join(ev.pieces[:accepted])
    return (
        ev.step,
        ev.proposed,
        accepted,
        visible_text(text),
        ", ".join(sources) or "—",
        round(ev.draft_ms, 1),
        round(ev.verify_ms, 1),
        sources[0] if len(sources) == 1 else None,
    )


class StepTableModel(QStandardItemModel):
    """The rows as Qt-held items, not a Python model: a view paints by asking for every visible
    cell's data, and each Python ``data()`` call would wait for the GIL while the decoding thread
    holds it (tens of ms per repaint while streaming)."""

    def __init__(self, parent=None) -> None:
        super().__init__(0, len(COLUMNS), parent)
        self.setHorizontalHeaderLabels(list(COLUMNS))
        self.sources: list[str | None] = []  # the single source of each row's accepted tokens, for colours
        self.dark = False

    def set_events(self, events: list) -> None:
        self.removeRows(0, self.rowCount())
        self.sources = []
        self.append_events(events)

    def append_events(self, events: list) -> None:
        for ev in events:
            row = step_row(ev)
            items = []
            for col, value in enumerate(row[: len(COLUMNS)]):
                item = QStandardItem()
                item.setData(f"{value:.1f}" if isinstance(value, float) else value, Qt.ItemDataRole.DisplayRole)
                if col in NUMERIC:
                    item.setTextAlignment(Qt.AlignmentFlag.AlignRight | Qt.AlignmentFlag.AlignVCenter)
                items.append(item)
            self.sources.append(row[7])
            self._colour(items, row[7])
            self.appendRow(items)

    def recolour(self) -> None:
        for r, source in enumerate(self.sources):
            self._colour([self.item(r, c) for c in range(len(COLUMNS))], source)

    def _colour(self, items: list, source: str | None) -> None:
        fill = PROVENANCE_COLOURS["dark" if self.dark else "light"].get(source or "")
        if fill is None:  # no source, or one with no colour (the benchmarks' oracle): left plain
            return
        colour = QColor(fill)
        for col in (3, 4):
            items[col].setBackground(colour)
        items[4].setToolTip(provenance_words(source))


class DraftsPanel(QWidget):
    step_selected = Signal(int)  # the user picked a row: index into the step list

    def __init__(self, parent=None) -> None:
        super().__init__(parent, objectName="draftsPanel")
        self.events: list = []
        self.following = True  # keep the newest row in view while streaming until the user picks one
        self._quiet = False  # selection changes made by select_step do not emit
        self.summary = QLabel(
            "No answer selected: send a message, or “Inspect drafts” under an answer.", objectName="draftsSummary"
        )
        self.summary.setWordWrap(True)
        self.model = StepTableModel(self)
        self.table = QTableView(objectName="draftsTable")
        self.table.setModel(self.model)
        self.table.setSelectionBehavior(QAbstractItemView.SelectionBehavior.SelectRows)
        self.table.setSelectionMode(QAbstractItemView.SelectionMode.SingleSelection)
        self.table.setEditTriggers(QAbstractItemView.EditTrigger.NoEditTriggers)
        self.table.verticalHeader().hide()
        self.table.verticalHeader().setDefaultSectionSize(self.fontMetrics().height() + 6)
        self.table.setWordWrap(False)
        header = self.table.horizontalHeader()
        header.setResizeContentsPrecision(0)  # size columns from the visible rows: a row per step adds up
        for col in range(len(COLUMNS)):
            header.setSectionResizeMode(col, QHeaderView.ResizeMode.ResizeToContents)
        header.setSectionResizeMode(3, QHeaderView.ResizeMode.Stretch)
        self.table.selectionModel().currentRowChanged.connect(self._on_row_changed)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(4, 4, 4, 4)
        layout.addWidget(self.summary)
        layout.addWidget(self.table, 1)
        self._update_palette()

    # ------------------------------------------------------------------ feeding

    def reset(self) -> None:
        self.events = []
        self.following = True
        self.model.set_events([])
        self._summarise()

    def add_steps(self, events: list) -> None:
        self.events.extend(events)
        self.model.append_events(events)
        self._summarise()
        if self.following:
            self.table.scrollToBottom()

    def set_steps(self, events: list) -> None:
        self.events = list(events)
        self.following = False
        self.model.set_events(self.events)
        self._summarise()

    def select_step(self, index: int | None) -> None:
        """Select row ``index`` (None clears) without emitting step_selected."""
        self._quiet = True
        try:
            selection = self.table.selectionModel()
            if index is None or not 0 <= index < len(self.events):
                selection.clearSelection()
                selection.setCurrentIndex(QModelIndex(), QItemSelectionModel.SelectionFlag.NoUpdate)
                return
            self.following = False
            row = self.model.index(index, 0)
            selection.setCurrentIndex(
                row, QItemSelectionModel.SelectionFlag.ClearAndSelect | QItemSelectionModel.SelectionFlag.Rows
            )
            self.table.scrollTo(row)
        finally:
            self._quiet = False

    def selected_step(self) -> int | None:
        current = self.table.selectionModel().currentIndex()
        return current.row() if current.isValid() else None

    # ------------------------------------------------------------------ internals

    def _on_row_changed(self, current: QModelIndex, _previous: QModelIndex) -> None:
        if self._quiet or not current.isValid():
            return
        self.following = False
        self.step_selected.emit(current.row())

    def _summarise(self) -> None:
        if not self.events:
            self.summary.setText("No steps yet.")
            return
        last = self.events[-1]
        drafted = sum(ev.accepted for ev in self.events)
        share = drafted / last.tokens_total if last.tokens_total else 0.0
        self.summary.setText(
            f"{len(self.events):,} steps · {last.tokens_total:,} tokens · {drafted:,} drafted tokens "
            f"accepted ({share:.0%}) · τ {last.tau:.2f} tokens per step"
        )

    def _update_palette(self) -> None:
        dark = self.palette().color(QPalette.ColorRole.Window).lightness() < 128
        if dark != self.model.dark:
            self.model.dark = dark
            self.model.recolour()

    def changeEvent(self, event) -> None:  # a theme switch recolours the source cells
        if event.type() == event.Type.PaletteChange:
            self._update_palette()
        super().changeEvent(event)
