"""Why the inspection panels paint with Qt-held data: the repaint cost of a view whose cells or
items call into Python while another thread runs Python code (as the decoding worker does), so
every call waits for the GIL.

    QT_QPA_PLATFORM=offscreen python scripts/bench_gil_paint.py
"""

import os
import threading
import time

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")

from PySide6.QtCore import QAbstractTableModel, QModelIndex, QRectF, Qt
from PySide6.QtGui import QBrush, QColor, QPainterPath, QStandardItem, QStandardItemModel
from PySide6.QtWidgets import (
    QApplication,
    QGraphicsItem,
    QGraphicsPathItem,
    QGraphicsScene,
    QGraphicsSimpleTextItem,
    QGraphicsView,
    QTableView,
)

NODES, ROWS, COLUMNS, REPAINTS = 64, 100, 7, 5


class PythonNode(QGraphicsItem):
    """A node painted by Python (what the tree view first did)."""

    def __init__(self, rect: QRectF) -> None:
        super().__init__()
        self.rect = rect

    def boundingRect(self) -> QRectF:
        return self.rect

    def paint(self, painter, _option, _widget=None) -> None:
        painter.drawRoundedRect(self.rect, 5, 5)
        painter.drawText(self.rect, "token")


class PythonModel(QAbstractTableModel):
    """A table model answering data() in Python (what the drafts panel first did)."""

    def rowCount(self, parent=QModelIndex()) -> int:  # noqa: B008 - Qt's own signature
        return 0 if parent.isValid() else ROWS

    def columnCount(self, parent=QModelIndex()) -> int:  # noqa: B008 - Qt's own signature
        return 0 if parent.isValid() else COLUMNS

    def data(self, index, role=Qt.ItemDataRole.DisplayRole):
        return f"{index.row()},{index.column()}" if role == Qt.ItemDataRole.DisplayRole else None


def python_scene() -> QGraphicsScene:
    scene = QGraphicsScene()
    for i in range(NODES):
        scene.addItem(PythonNode(QRectF(0, i * 30, 100, 24)))
    return scene


def qt_scene() -> QGraphicsScene:
    scene = QGraphicsScene()
    for i in range(NODES):
        outline = QPainterPath()
        outline.addRoundedRect(QRectF(0, i * 30, 100, 24), 5, 5)
        node = QGraphicsPathItem(outline)
        node.setBrush(QBrush(QColor("#cfe3ff")))
        scene.addItem(node)
        QGraphicsSimpleTextItem("token", node).setPos(5, i * 30 + 4)
    return scene


def qt_model() -> QStandardItemModel:
    model = QStandardItemModel(ROWS, COLUMNS)
    for r in range(ROWS):
        for c in range(COLUMNS):
            model.setItem(r, c, QStandardItem(f"{r},{c}"))
    return model


def repaint_ms(app, widget) -> float:
    widget.show()
    app.processEvents()
    started = time.perf_counter()
    for _ in range(REPAINTS):
        widget.viewport().repaint()
    return (time.perf_counter() - started) * 1000 / REPAINTS


def main() -> None:
    app = QApplication([])
    stop = threading.Event()

    def python_work():  # holds the GIL, handing it over at the switch interval
        while not stop.is_set():
            sum(range(1000))

    worker = threading.Thread(target=python_work)
    worker.start()
    try:
        for name, widget in (
            ("tree, Python-painted items", QGraphicsView(python_scene())),
            ("tree, Qt items", QGraphicsView(qt_scene())),
        ):
            widget.resize(400, 600)
            print(f"{name:32s} {repaint_ms(app, widget):6.1f} ms per repaint")
        for name, model in (("table, Python model", PythonModel()), ("table, QStandardItemModel", qt_model())):
            table = QTableView()
            table.setModel(model)
            table.resize(600, 600)
            print(f"{name:32s} {repaint_ms(app, table):6.1f} ms per repaint")
    finally:
        stop.set()
        worker.join()


if __name__ == "__main__":
    main()
