"""The draft-tree view: one decoding step's draft tree as an interactive diagram.

The tree is laid out left to right (root at the left, depth growing to the right): draft trees are
wide and shallow, so sibling tokens stack vertically and their text stays readable. The accepted
path is drawn strong, rejected branches dimmed, the node where verification stopped outlined, and
the token the target wrote itself (the correction or bonus token) hangs under that node as a
dashed node. Node fill follows the token's source with the chat's provenance colours.

Feeding mirrors the other inspection panels: ``add_steps`` while streaming (only the newest step
is drawn, and only while the view is on screen), ``set_steps`` for a stored answer,
``select_step`` when another panel picked a step (never emits), ``step_selected`` when the user
picks one here.
"""

from __future__ import annotations

from collections.abc import Callable

from PySide6.QtCore import QPointF, QRectF, Qt, Signal
from PySide6.QtGui import (
    QAction,
    QBrush,
    QColor,
    QFont,
    QKeySequence,
    QPainter,
    QPainterPath,
    QPalette,
    QPen,
    QTransform,
)
from PySide6.QtWidgets import (
    QGraphicsPathItem,
    QGraphicsScene,
    QGraphicsSimpleTextItem,
    QGraphicsView,
    QHBoxLayout,
    QLabel,
    QPushButton,
    QVBoxLayout,
    QWidget,
)

from draftscope.engine.events import StepEvent, step_from_dict
from draftscope.gui.chat.render import provenance_words
from draftscope.gui.form_widgets import ElidedLabel
from draftscope.gui.palettes import PROVENANCE_COLOURS, TREE_STOP_COLOURS, drafter_colours
from draftscope.gui.panels.trie_layout import (
    H_GAP,
    ROOT,
    TARGET,
    NodeTexts,
    TreeShape,
    format_support,
    layout_nodes,
    node_fonts,
    node_texts,
    tree_shape,
)
from draftscope.gui.panels.trie_style import NodeLooks, TreeColours, node_style

MIN_SCALE = 0.5  # zooming out further shows nothing legible, not even the tree's shape
FIT_MIN_SCALE = 0.8  # below this the node text is hard to read: "fit" stops here and the view scrolls
MAX_SCALE = 3.0
FIT_MAX_SCALE = 1.0  # "fit" never enlarges a small tree beyond its natural size
ZOOM_STEP = 1.25
DIMMED = 0.45  # opacity of rejected branches
STOP_COLOURS = TREE_STOP_COLOURS  # where verification stopped (palettes.py)


class NodeItem(QGraphicsPathItem):
    """One token of the tree: a rounded box with the token text and, smaller, its support.

    Built from Qt's own items (a path and two simple text items), with no Python ``paint`` or
    ``boundingRect``: painting then never calls into Python, so it never waits for the GIL
    while the decoding thread holds it (a Python paint per node stalled the UI by 100s of ms)."""

    def __init__(
        self,
        key,
        rect: QRectF,
        label: str,
        note: str,
        *,
        brush: QBrush,
        pen: QPen,
        text: QColor,
        font: QFont,
        note_font: QFont,
    ) -> None:
        outline = QPainterPath()
        outline.addRoundedRect(rect, 5, 5)
        super().__init__(outline)
        self.key, self.rect, self.label, self.note = key, rect, label, note
        self.brush, self.pen, self.text_colour = brush, pen, text
        self.font, self.note_font = font, note_font
        self.setPen(pen)
        self.setBrush(brush)
        self.setZValue(1)
        inner = rect.adjusted(8, 0, -7, 0)
        label_item = QGraphicsSimpleTextItem(label, self)
        label_item.setFont(font)
        label_item.setBrush(text)
        box = label_item.boundingRect()
        label_item.setPos(inner.left(), rect.center().y() - box.height() / 2)
        if note:
            faint = QColor(text)
            faint.setAlphaF(0.65)
            note_item = QGraphicsSimpleTextItem(note, self)
            note_item.setFont(note_font)
            note_item.setBrush(faint)
            box = note_item.boundingRect()
            note_item.setPos(inner.right() - box.width(), rect.center().y() - box.height() / 2)


class TreeGraphicsView(QGraphicsView):
    """Ctrl+wheel zooms (clamped), dragging pans; "fit" is kept across resizes until the user zooms."""

    def __init__(self, scene: QGraphicsScene, parent=None) -> None:
        super().__init__(scene, parent)
        self.auto_fit = True
        self.focus_rect: QRectF | None = None  # what fit() scrolls to when the tree cannot fit
        self.setDragMode(QGraphicsView.DragMode.ScrollHandDrag)
        self.setRenderHints(QPainter.RenderHint.Antialiasing | QPainter.RenderHint.TextAntialiasing)
        self.setTransformationAnchor(QGraphicsView.ViewportAnchor.AnchorUnderMouse)
        self.setAlignment(Qt.AlignmentFlag.AlignLeft | Qt.AlignmentFlag.AlignVCenter)

    def scale_factor(self) -> float:
        return self.transform().m11()

    def zoom(self, factor: float) -> None:
        self.auto_fit = False
        target = min(MAX_SCALE, max(MIN_SCALE, self.scale_factor() * factor))
        self.setTransform(QTransform.fromScale(target, target))

    def fit(self) -> None:
        self.auto_fit = True
        rect = self.sceneRect()
        if rect.isEmpty():
            self.setTransform(QTransform())
            return
        view = self.viewport().rect()
        scale = min(view.width() / rect.width(), view.height() / rect.height(), FIT_MAX_SCALE)
        scale = max(FIT_MIN_SCALE, scale)
        self.setTransform(QTransform.fromScale(scale, scale))
        if self.focus_rect is not None:  # too big to fit readably: keep the accepted path's end in view
            self.ensureVisible(self.focus_rect, 30, 30)

    def wheelEvent(self, event) -> None:
        if event.modifiers() & Qt.KeyboardModifier.ControlModifier:
            self.zoom(ZOOM_STEP if event.angleDelta().y() > 0 else 1 / ZOOM_STEP)
            event.accept()
        else:
            super().wheelEvent(event)

    def resizeEvent(self, event) -> None:
        super().resizeEvent(event)
        if self.auto_fit:
            self.fit()


class TrieView(QWidget):
    step_selected = Signal(int)  # the user picked a step here (prev/next): index into the step list

    def __init__(self, token_text: Callable[[int], str], parent=None) -> None:
        super().__init__(parent, objectName="trieView")
        self.token_text = token_text
        self.steps: list = []
        self._index: int | None = None
        self._following = True
        self._drawn = None  # the StepEvent whose tree is in the scene (drawing waits until it is on screen)
        self._nodes: dict = {}
        self._accepted: list[int] = []
        self._stop = ROOT

        self.scene = QGraphicsScene(self)
        self.scene.setItemIndexMethod(QGraphicsScene.ItemIndexMethod.NoIndex)  # rebuilt every step: no index to keep
        self.view = TreeGraphicsView(self.scene, self)
        self.view.setObjectName("trieGraphicsView")

        self._build_buttons()
        self.legend = QLabel(objectName="trieLegend")
        self.legend.setWordWrap(True)
        self._connect_buttons()
        self._add_zoom_shortcuts()
        self._lay_out()
        self._update_legend()
        self._update_controls()

    def _build_buttons(self) -> None:
        """Previous and next step, the step's label, zoom out and in, fit, and following live."""
        self.prev_button = QPushButton("◀", objectName="prevStepButton", toolTip="Previous step")
        self.next_button = QPushButton("▶", objectName="nextStepButton", toolTip="Next step")
        self.step_label = ElidedLabel(objectName="stepLabel", shortest=0)  # gives way to the buttons in a narrow dock
        self.zoom_out_button = QPushButton("−", objectName="zoomOutButton", toolTip="Zoom out (Ctrl+-)")
        self.zoom_in_button = QPushButton("+", objectName="zoomInButton", toolTip="Zoom in (Ctrl+=)")
        self.fit_button = QPushButton("Fit", objectName="fitButton", toolTip="Fit the tree in the view")
        self.follow_button = QPushButton(
            "Live",
            objectName="followLiveButton",
            checkable=True,
            checked=True,
            toolTip="Show each new step as it is decoded",
        )
        for button in (self.prev_button, self.next_button, self.zoom_out_button, self.zoom_in_button):
            button.setFixedWidth(button.fontMetrics().horizontalAdvance("◀") * 3 + 12)

    def _connect_buttons(self) -> None:
        self.prev_button.clicked.connect(lambda: self._user_step(-1))
        self.next_button.clicked.connect(lambda: self._user_step(+1))
        self.zoom_in_button.clicked.connect(lambda: self.view.zoom(ZOOM_STEP))
        self.zoom_out_button.clicked.connect(lambda: self.view.zoom(1 / ZOOM_STEP))
        self.fit_button.clicked.connect(self.view.fit)
        self.follow_button.clicked.connect(self._on_follow_clicked)  # clicked: only the user's presses

    def _add_zoom_shortcuts(self) -> None:
        for keys, slot in (
            (("Ctrl+=", "Ctrl++", QKeySequence.StandardKey.ZoomIn), lambda: self.view.zoom(ZOOM_STEP)),
            (("Ctrl+-", QKeySequence.StandardKey.ZoomOut), lambda: self.view.zoom(1 / ZOOM_STEP)),
        ):
            action = QAction(self)
            action.setShortcuts([QKeySequence(k) for k in keys])
            action.setShortcutContext(Qt.ShortcutContext.WidgetWithChildrenShortcut)  # the chat has its own
            action.triggered.connect(slot)
            self.addAction(action)

    def _lay_out(self) -> None:
        """The buttons over the tree, the legend under it."""
        bar = QHBoxLayout()
        bar.setContentsMargins(0, 0, 0, 0)
        bar.addWidget(self.prev_button)
        bar.addWidget(self.next_button)
        bar.addWidget(self.step_label, 1)
        for button in (self.zoom_out_button, self.zoom_in_button, self.fit_button, self.follow_button):
            bar.addWidget(button)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(4, 4, 4, 4)
        layout.addLayout(bar)
        layout.addWidget(self.view, 1)
        layout.addWidget(self.legend)

    # ------------------------------------------------------------------ feeding

    def reset(self) -> None:
        self.steps, self._index, self._following = [], None, True
        self._clear_scene()
        self._update_controls()

    def add_steps(self, events: list) -> None:
        self.steps.extend(_as_event(e) for e in events)
        if self._following and self.steps:
            self._show(len(self.steps) - 1)  # only the newest step of the batch is drawn
        else:
            self._update_controls()

    def set_steps(self, events: list) -> None:
        self.steps = [_as_event(e) for e in events]
        self._following = False
        self._index = None
        self._clear_scene()
        if self.steps:
            self._show(len(self.steps) - 1)
        else:
            self._update_controls()

    def select_step(self, index: int) -> None:
        """Show step ``index`` without emitting step_selected (another panel picked it)."""
        if not 0 <= index < len(self.steps):
            return
        self._following = False
        self._show(index)

    def current_index(self) -> int | None:
        return self._index

    def follow_live(self) -> bool:
        return self._following

    # ------------------------------------------------------------------ what is drawn (for tests)

    def node_items(self) -> dict:
        self._sync()
        return dict(self._nodes)

    def accepted_nodes(self) -> list[int]:
        self._sync()
        return list(self._accepted)

    def stop_node(self) -> int:
        self._sync()
        return self._stop

    # ------------------------------------------------------------------ user actions

    def _user_step(self, delta: int) -> None:
        if self._index is None:
            return
        index = self._index + delta
        if not 0 <= index < len(self.steps):
            return
        self._following = False
        self._show(index)
        self.step_selected.emit(index)

    def _on_follow_clicked(self, checked: bool) -> None:
        self._following = checked
        if checked and self.steps:
            self._show(len(self.steps) - 1)
        else:
            self._update_controls()

    # ------------------------------------------------------------------ internals

    def _show(self, index: int) -> None:
        self._index = index
        self._update_controls()
        if self.isVisible():
            self._sync()

    def _sync(self) -> None:
        """Draw the current step if the scene shows another one."""
        if self._index is None:
            return
        event = self.steps[self._index]
        if event is not self._drawn:
            self._draw(event, self._previous_token(self._index))

    def _previous_token(self, index: int) -> int | None:
        # the root of a step is the last token emitted by the step before (the prompt's last for the first)
        if index > 0 and self.steps[index - 1].token_ids:
            return self.steps[index - 1].token_ids[-1]
        return None

    def _update_controls(self) -> None:
        count = len(self.steps)
        if self._index is None:
            self.step_label.setText("No steps yet" if not count else f"{count} steps")
        else:
            ev = self.steps[self._index]
            self.step_label.setText(f"Step {ev.step} of {count} · {ev.proposed} drafted · {ev.accepted} accepted")
        self.prev_button.setEnabled(self._index is not None and self._index > 0)
        self.next_button.setEnabled(self._index is not None and self._index < count - 1)
        self.follow_button.setChecked(self._following)

    def _clear_scene(self) -> None:
        self.scene.clear()
        self.scene.setSceneRect(QRectF())
        self._drawn, self._nodes, self._accepted, self._stop = None, {}, [], ROOT
        self.view.focus_rect = None

    def _dark(self) -> bool:
        return self.palette().color(QPalette.ColorRole.Base).lightness() < 128

    def _draw(self, ev: StepEvent, previous: int | None) -> None:
        self._clear_scene()
        shape = tree_shape(ev)
        texts = node_texts(ev, previous, shape, self.token_text)
        fonts = node_fonts(self.font())
        rects = layout_nodes(texts, shape, fonts)
        on_path = set(shape.accepted) | {ROOT, TARGET}
        colours = self._colours()
        self.scene.setBackgroundBrush(colours.base)
        self._add_nodes(ev, shape, texts, rects, NodeLooks(fonts, colours, on_path))
        self._add_edges(shape.children, rects, colours, on_path)

        bounds = self.scene.itemsBoundingRect().adjusted(-12, -12, 12, 12)
        self.scene.setSceneRect(bounds)  # the scene's own rect only grows: set it, or old steps leave blank room
        focus = rects[TARGET if shape.target_token is not None else shape.stop]
        self.view.focus_rect = focus.united(rects[shape.stop])
        self._drawn, self._accepted, self._stop = ev, shape.accepted, shape.stop
        if self.view.auto_fit:
            self.view.fit()

    def _colours(self) -> TreeColours:
        """The palette's colours, plus the chat's provenance colours for sources."""
        palette = self.palette()
        theme = "dark" if self._dark() else "light"
        plain_border = QColor(palette.color(QPalette.ColorRole.Text))
        plain_border.setAlphaF(0.45)
        return TreeColours(
            text=palette.color(QPalette.ColorRole.Text),
            base=palette.color(QPalette.ColorRole.Base),
            button=palette.color(QPalette.ColorRole.Button),
            accent=palette.color(QPalette.ColorRole.Highlight),
            plain_border=plain_border,
            stop=QColor(STOP_COLOURS[theme]),
            fills=PROVENANCE_COLOURS[theme],
        )

    def _add_nodes(self, ev: StepEvent, shape: TreeShape, texts: NodeTexts, rects: dict, looks: NodeLooks) -> None:
        fonts, on_path = looks.fonts, looks.on_path
        for key in texts.labels:
            brush, pen = node_style(key, ev, shape.stop, looks)
            item = NodeItem(
                key,
                rects[key],
                texts.labels[key],
                texts.notes[key],
                brush=brush,
                pen=pen,
                text=looks.colours.text,
                font=fonts.bold if key in on_path else fonts.plain,
                note_font=fonts.note,
            )
            item.setToolTip(self._tooltip(key, ev, texts.texts, shape.depth, shape.stop, shape.accepted))
            if key not in on_path:
                item.setOpacity(DIMMED)
            self.scene.addItem(item)
            self._nodes[key] = item

    def _add_edges(self, children: dict, rects: dict, colours: TreeColours, on_path: set) -> None:
        for parent, kids in children.items():
            start = rects[parent]
            for kid in kids:
                end = rects[kid]
                a = QPointF(start.right(), start.center().y())
                b = QPointF(end.left(), end.center().y())
                path = QPainterPath(a)
                path.cubicTo(QPointF(a.x() + H_GAP / 2, a.y()), QPointF(b.x() - H_GAP / 2, b.y()), b)
                edge = QGraphicsPathItem(path)
                edge.setData(0, (parent, kid))
                if kid == TARGET:
                    edge.setPen(QPen(colours.accent, 2.0, Qt.PenStyle.DashLine))
                elif kid in on_path:
                    edge.setPen(QPen(colours.accent, 2.5))
                else:
                    edge.setPen(QPen(colours.plain_border, 1.0))
                    edge.setOpacity(DIMMED)
                self.scene.addItem(edge)

    def _tooltip(self, key, ev: StepEvent, texts: dict, depth: dict, stop, accepted: list[int]) -> str:
        if key == ROOT:
            lines = ["Root: the last token accepted before this step"]
            if stop == ROOT:
                lines.append("Verification stopped here: no drafted token was accepted")
            return "\n".join(lines)
        if key == TARGET:
            token = ev.token_ids[len(accepted)]
            if any(p == stop for p in ev.tree.parents):
                drafted = "instead of the drafted tokens"
            else:
                drafted = "after the whole drafted branch" if accepted else "(nothing was drafted)"
            return f"Written by the target model {drafted}\ntoken {token} · {texts[key]!r}\ndepth {depth[key]}"
        tree = ev.tree
        source = tree.source[key]
        status = "accepted" if key in accepted else "rejected"
        lines = [
            f"token {tree.tokens[key]} · {texts[key]!r}",
            f"support {format_support(tree.support[key])} · {provenance_words(source)}",
            f"depth {depth[key]} · {status}",
        ]
        if key == stop:
            lines.append("Verification stopped here")
        return "\n".join(lines)

    def _update_legend(self) -> None:
        theme = "dark" if self._dark() else "light"
        accent = self.palette().color(QPalette.ColorRole.Highlight).name()
        swatches = " ".join(
            f'<span style="background-color:{colour};">&nbsp;{name}&nbsp;</span>'
            for name, colour in drafter_colours(theme).items()
        )
        self.legend.setText(
            f'<small><b style="color:{accent};">━━</b> accepted path · '
            f'<b style="color:{STOP_COLOURS[theme]};">■</b> verification stopped here · '
            f'<b style="color:{accent};">┅┅</b> written by the target · faint: rejected · {swatches}</small>'
        )

    # ------------------------------------------------------------------ Qt events

    def showEvent(self, event) -> None:  # drawing waited while hidden
        super().showEvent(event)
        self._sync()

    def changeEvent(self, event) -> None:  # a theme switch redraws with the new colours
        if event.type() in (event.Type.PaletteChange, event.Type.FontChange):
            self._update_legend()
            self._drawn = None
            if self.isVisible():
                self._sync()
        super().changeEvent(event)


def _as_event(event) -> StepEvent:
    """Stored answers may hand over their steps as plain dicts."""
    return step_from_dict(event) if isinstance(event, dict) else event
