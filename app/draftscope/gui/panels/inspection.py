"""Keeps the inspection panels (drafts table, draft tree, speedup chart) on one answer and one step.

The panels know nothing of each other: each emits ``step_selected(index)`` when the user picks a
step, and this controller passes the pick to the others with ``select_step`` (which never emits,
so there is no echo) and to the chat through its own ``step_selected(answer, index)`` signal.
``answer`` is the message id of a stored answer, or None for the one being streamed.

A live answer's steps reach the panels at most every LIVE_UPDATE_MS: a table, a tree and a chart
redrawn for every batch (30 a second) starve the UI thread on a small machine, and an eye follows
ten updates a second as well.
"""

from __future__ import annotations

from PySide6.QtCore import QObject, QTimer, Signal

from draftscope.engine.events import step_from_dict

LIVE_UPDATE_MS = 100


class InspectionController(QObject):
    step_selected = Signal(object, int)  # (message id or None while streaming, step index)

    def __init__(self, drafts, trie, speedup, parent=None) -> None:
        super().__init__(parent)
        self.drafts, self.trie, self.speedup = drafts, trie, speedup
        self.panels = (drafts, trie, speedup)
        self.answer: int | None = None  # message id shown; None = the live answer
        self.steps: list = []
        self.selected: int | None = None
        self.baseline: float | None = None
        self._pending: list = []  # live steps not yet handed to the panels
        self._flush_timer = QTimer(self, singleShot=True, interval=LIVE_UPDATE_MS)
        self._flush_timer.timeout.connect(self.flush)
        for panel in self.panels:
            panel.step_selected.connect(self.select)

    def begin_live(self, baseline_tps: float | None) -> None:
        """A new answer starts streaming: every panel is cleared and follows it."""
        self.answer, self.steps, self.selected, self.baseline = None, [], None, baseline_tps
        self._pending = []
        self.drafts.reset()
        self.trie.reset()
        self.speedup.reset(baseline_tps)

    def add_live(self, events: list) -> None:
        if self.answer is not None:  # the user is looking at a stored answer: leave it on screen
            return
        self.steps.extend(events)
        self._pending.extend(events)
        if not self._flush_timer.isActive():
            self._flush_timer.start()

    def flush(self) -> None:
        """Hand the live steps that arrived since the last update to the panels."""
        self._flush_timer.stop()
        if self._pending and self.answer is None:
            events, self._pending = self._pending, []
            for panel in self.panels:
                panel.add_steps(events)

    def finish_live(self, message_id: int) -> None:
        """The streamed answer was stored as ``message_id``: the panels keep showing it."""
        if self.answer is None:
            self.flush()
            self.answer = message_id

    def show_answer(self, message_id: int, steps: list, baseline_tps: float | None) -> None:
        """A stored answer's steps in every panel, its last step selected."""
        self._pending = []
        self.answer, self.steps, self.baseline = message_id, list(steps), baseline_tps
        self.drafts.set_steps(self.steps)
        self.trie.set_steps(self.steps)
        self.speedup.set_steps(self.steps, baseline_tps)
        self.selected = None
        if self.steps:
            self.select(len(self.steps) - 1)

    def show_latest(self, history, conversation_id: int | None, baseline_tps: float | None) -> None:
        """Another conversation was opened (None: a new one): its last answer's steps, or empty panels,
        never the answer of the conversation left."""
        messages = history.messages(conversation_id) if conversation_id is not None else []
        last = next((m for m in reversed(messages) if m.role == "assistant"), None)
        if last is None:
            self.begin_live(baseline_tps)
            return
        stats = last.stats or {}  # plain decoding at its context where it was kept, else the measured figure
        kept = stats.get("plain_tokens_per_second") or stats.get("baseline_tokens_per_second") or baseline_tps
        self.show_answer(last.id, [step_from_dict(d) for d in history.steps(last.id)], kept)

    def set_baseline(self, baseline_tps: float | None) -> None:
        """The plain decoding speed was measured again (shown for the live answer only)."""
        if self.answer is None:
            self.baseline = baseline_tps
            self.speedup.set_baseline(baseline_tps)

    def select(self, index: int) -> None:
        """Step ``index`` of the shown answer, in every panel and (through the signal) the chat."""
        if not 0 <= index < len(self.steps):
            return
        self.flush()
        self.selected = index
        for panel in self.panels:
            panel.select_step(index)
        self.step_selected.emit(self.answer, index)
