"""Where the draft-tree view (trie_view.py) puts each node: the tree's shape from a StepEvent, what
each node says, and its box.

Nodes are keyed by their index in the step's tree, plus ``ROOT`` (the token before the step) and
``TARGET`` (the token the target model wrote itself, hung under the node where verification
stopped). The tree runs left to right: a column per depth, as wide as its widest node, and rows
from :func:`tidy_rows`, so sibling subtrees never overlap.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from PySide6.QtCore import QRectF, Qt
from PySide6.QtGui import QFont, QFontMetricsF

from draftscope.engine.events import StepEvent
from draftscope.gui.panels.drafts import visible_text

ROOT = -1
TARGET = "target"
LABEL_CHARS = 16  # longer token texts are elided (the tooltip has them whole)
H_GAP = 34  # room between columns for the edges
V_GAP = 6


def format_support(value: float) -> str:
    """Counts as integers (thousands shortened), probabilities with two decimals."""
    if value == int(value):
        count = int(value)
        return f"{count / 1000:.0f}k" if count >= 10_000 else str(count)
    return f"{value:.2f}"


def tidy_rows(children: dict) -> dict:
    """Row of each node (fractional for inner nodes) in a tidy tree: leaves take consecutive rows in
    depth-first order and a parent sits midway between its first and last child, so sibling
    subtrees never overlap. ``children`` maps each key to its children, ROOT first."""
    row: dict = {}
    next_row = 0
    stack = [(ROOT, False)]
    while stack:  # iterative: a deep chain must not hit the recursion limit
        key, done = stack.pop()
        kids = children[key]
        if done:
            row[key] = (row[kids[0]] + row[kids[-1]]) / 2
        elif not kids:
            row[key] = next_row
            next_row += 1
        else:
            stack.append((key, True))
            stack.extend((kid, False) for kid in reversed(kids))
    return row


@dataclass
class TreeShape:
    """Who hangs under whom in one step, and how the step ended."""

    children: dict  # key -> its children's keys, ROOT first, then the drafted nodes, then TARGET
    depth: dict  # key -> depth (ROOT 0)
    accepted: list[int]  # the accepted path, root-down
    stop: int  # where verification stopped: the accepted path's last node, or ROOT
    target_token: int | None  # the token the target wrote itself (None: the answer ended there)


@dataclass
class NodeTexts:
    """What each node says, by key."""

    texts: dict  # the token's text as decoded (the tooltips quote it)
    labels: dict  # the text in the box: visible whitespace, elided by layout_nodes
    notes: dict  # the small text beside it: the support, "root" or "target"


@dataclass
class NodeFonts:
    plain: QFont
    bold: QFont  # the accepted path's nodes
    note: QFont  # the support beside each token


def tree_shape(ev: StepEvent) -> TreeShape:
    parents = ev.tree.parents
    accepted = list(ev.accepted_path)
    stop = accepted[-1] if accepted else ROOT
    target_token = ev.token_ids[len(accepted)] if len(ev.token_ids) > len(accepted) else None
    children: dict = {ROOT: []}
    depth = {ROOT: 0}
    for i in range(len(ev.tree.tokens)):  # BFS order: a parent always comes before its children
        children[i] = []
        children[parents[i]].append(i)
        depth[i] = depth[parents[i]] + 1
    if target_token is not None:
        children[TARGET] = []
        children[stop].append(TARGET)  # the target's choice sits beside the drafted children it rejected
        depth[TARGET] = depth[stop] + 1
    return TreeShape(children, depth, accepted, stop, target_token)


def node_texts(ev: StepEvent, previous: int | None, shape: TreeShape, token_text: Callable[[int], str]) -> NodeTexts:
    """``previous``: the token before the step (None: the prompt's end)."""
    tree = ev.tree
    labels = {ROOT: visible_text(token_text(previous)) if previous is not None else "prompt"}
    notes = {ROOT: "root"}
    texts = {}
    for i in range(len(tree.tokens)):
        texts[i] = token_text(tree.tokens[i])
        labels[i] = visible_text(texts[i])
        notes[i] = format_support(tree.support[i])
    if shape.target_token is not None:
        texts[TARGET] = token_text(shape.target_token)
        labels[TARGET] = visible_text(texts[TARGET])
        notes[TARGET] = "target"
    return NodeTexts(texts, labels, notes)


def node_fonts(font: QFont) -> NodeFonts:
    """The widget's font, its bold, and a smaller one (80%) for the notes."""
    font = QFont(font)
    bold = QFont(font)
    bold.setBold(True)
    note_font = QFont(font)
    if font.pointSizeF() > 0:
        note_font.setPointSizeF(max(6.0, font.pointSizeF() * 0.8))
    else:
        note_font.setPixelSize(max(8, round(font.pixelSize() * 0.8)))
    return NodeFonts(font, bold, note_font)


def layout_nodes(texts: NodeTexts, shape: TreeShape, fonts: NodeFonts) -> dict:
    """Each node's box by key, in the order of ``texts.labels``; elides the labels in place."""
    metrics, bold_metrics = QFontMetricsF(fonts.plain), QFontMetricsF(fonts.bold)
    note_metrics = QFontMetricsF(fonts.note)
    max_label = bold_metrics.averageCharWidth() * LABEL_CHARS
    widths: dict[int, float] = {}  # by depth: a column is as wide as its widest node
    for key, label in texts.labels.items():
        label = bold_metrics.elidedText(label, Qt.TextElideMode.ElideRight, max_label)
        texts.labels[key] = label
        width = bold_metrics.horizontalAdvance(label) + note_metrics.horizontalAdvance(texts.notes[key]) + 26
        depth = shape.depth[key]
        widths[depth] = max(widths.get(depth, 0.0), width)
    node_h = max(metrics.height(), note_metrics.height()) + 10
    row_h = node_h + V_GAP
    row = tidy_rows(shape.children)
    column_x = [0.0]
    for d in range(1, max(widths) + 1):
        column_x.append(column_x[-1] + widths[d - 1] + H_GAP)
    return {
        key: QRectF(column_x[shape.depth[key]], row[key] * row_h, widths[shape.depth[key]], node_h)
        for key in texts.labels
    }
