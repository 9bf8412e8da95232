"""The draft-tree view's looks: the tree's colours, read off the palette by the view
(gui/panels/trie_view.py), and each node's fill and outline."""

from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple

from PySide6.QtCore import Qt
from PySide6.QtGui import QBrush, QColor, QPen

from draftscope.engine.events import StepEvent
from draftscope.gui.panels.trie_layout import ROOT, TARGET, NodeFonts


@dataclass
class TreeColours:
    text: QColor
    base: QColor
    button: QColor  # the root's fill
    accent: QColor  # the accepted path and the target's node
    plain_border: QColor  # rejected nodes and edges
    stop: QColor  # the node where verification stopped
    fills: dict  # source -> fill colour name


@dataclass
class NodeLooks:
    fonts: NodeFonts
    colours: TreeColours
    on_path: set  # keys drawn strong: the accepted path, ROOT and TARGET


class NodeStyle(NamedTuple):
    brush: QBrush
    pen: QPen


def node_style(key, ev: StepEvent, stop: int, looks: NodeLooks) -> NodeStyle:
    """A node's fill and outline: the root's and the target's own, else its source's fill, strong on
    the accepted path; the node where verification stopped outlined in the stop colour."""
    colours = looks.colours
    if key == ROOT:
        brush, pen = QBrush(colours.button), QPen(colours.accent, 2.5)
    elif key == TARGET:
        brush, pen = QBrush(colours.base), QPen(colours.accent, 2.5, Qt.PenStyle.DashLine)
    else:
        brush = QBrush(QColor(colours.fills.get(ev.tree.source[key], colours.base.name())))
        pen = QPen(colours.accent, 2.5) if key in looks.on_path else QPen(colours.plain_border, 1.0)
    if key == stop:
        pen = QPen(colours.stop, 3.5)
    return NodeStyle(brush, pen)
