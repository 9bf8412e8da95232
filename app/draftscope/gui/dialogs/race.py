"""Race mode: one prompt answered twice, plain decoding against speculative decoding, then both
replayed side by side at the pace they were really produced — so the speedup is seen.

One device runs one model at a time, so the two answers are generated one after the other (each
streams live into its pane while it runs); every step's moment is recorded from the engine's own
figures, and "Replay" plays both timelines together in real time.
"""

from __future__ import annotations

import dataclasses
import html
import time
from dataclasses import dataclass, field

from PySide6.QtCore import QSize, Qt, QTimer, Signal
from PySide6.QtWidgets import (
    QDialog,
    QGridLayout,
    QHBoxLayout,
    QLabel,
    QPlainTextEdit,
    QPushButton,
    QTextBrowser,
    QVBoxLayout,
)

from draftscope.core.session import ChatSession
from draftscope.engine.sampling import fresh_seed
from draftscope.gui.fit_screen import fit_dialog
from draftscope.gui.generation_worker import GenerationWorker, WorkerThread
from draftscope.gui.session_qt import SessionSignals

REPLAY_HZ = 30


@dataclass
class Lane:
    """One side of the race: what it wrote and when, in seconds after its first token. The race is
    the writing: the lane that runs second finds the prompt already read (the kept cache), so the
    prompt's reading would hand it a head start that has nothing to do with drafting."""

    name: str
    moments: list[tuple[float, str]] = field(default_factory=list)  # (writing seconds, text so far)
    tokens: int = 0
    elapsed_s: float = 0.0  # writing: from the first token to the last
    first_token_s: float = 0.0  # the wait for the first token (reading the prompt), shown apart

    def add(self, events) -> None:
        text = self.moments[-1][1] if self.moments else ""
        for e in events:
            text += "".join(e.pieces)
            # the engine's running rate covers prompt processing too: tokens / rate = time so far
            at = e.tokens_total / e.tokens_per_second if e.tokens_per_second else 0.0
            self.moments.append((at, text))
            self.tokens = e.tokens_total

    def finish(self, final) -> None:
        self.first_token_s = min(final.stats.time_to_first_token_ms / 1000, final.stats.elapsed_s)
        self.elapsed_s = final.stats.elapsed_s - self.first_token_s
        self.tokens = final.stats.tokens
        self.moments = [(max(0.0, at - self.first_token_s), text) for at, text in self.moments]
        if not self.moments or self.moments[-1][1] != final.text:
            self.moments.append((self.elapsed_s, final.text))

    def text_at(self, t: float) -> str:
        shown = ""
        for at, text in self.moments:
            if at > t:
                break
            shown = text
        return shown

    @property
    def tokens_per_second(self) -> float:
        """The writing rate: tokens after the first over the time they took (as every face counts it)."""
        return (self.tokens - 1) / self.elapsed_s if self.elapsed_s and self.tokens > 1 else 0.0


class RaceDialog(QDialog):
    """``RaceDialog(runtime)``; ``race(prompt)`` starts; ``finished_race`` is emitted once both
    answers are in (the replay then starts by itself). Both answers use one seed, so at T > 0 too
    they are the same answer, reached at two speeds."""

    finished_race = Signal()
    _request = Signal(object)

    def __init__(self, runtime, parent=None) -> None:
        super().__init__(parent)
        self.setObjectName("raceDialog")
        self.setWindowTitle("Race: plain decoding vs speculative decoding")
        fit_dialog(self, QSize(1000, 600))
        self.runtime = runtime
        self.session = ChatSession(runtime)  # in memory: a race is not a conversation
        self.lanes: dict[str, Lane] = {}
        self._queue: list[tuple[str, list]] = []
        self._running: str | None = None
        self._replay_start = 0.0

        top = self._build_prompt_row()
        grid = QGridLayout()
        self.views, self.stats = {}, {}
        for col, (key, title) in enumerate((("plain", "Plain decoding"), ("speculative", "Speculative decoding"))):
            heading = QLabel(f"<b>{title}</b>")
            view = QTextBrowser(objectName=f"race{key.capitalize()}View")
            stats = QLabel("–", objectName=f"race{key.capitalize()}Stats")
            stats.setTextFormat(Qt.TextFormat.RichText)
            grid.addWidget(heading, 0, col)
            grid.addWidget(view, 1, col)
            grid.addWidget(stats, 2, col)
            self.views[key], self.stats[key] = view, stats
        self.verdict = QLabel("", objectName="raceVerdict")
        self.verdict.setAlignment(Qt.AlignmentFlag.AlignCenter)
        font = self.verdict.font()
        font.setPointSizeF(font.pointSizeF() * 1.6)
        font.setBold(True)
        self.verdict.setFont(font)

        layout = QVBoxLayout(self)
        layout.addLayout(top)
        layout.addLayout(grid, 1)
        layout.addWidget(self.verdict)

        self.worker = GenerationWorker(self.session, keep=False)
        self.worker_thread = WorkerThread(self.worker)
        self._request.connect(self.worker.generate)
        self.answer_signals = SessionSignals(self.session, parent=self)  # each lane's steps, as they come
        self.answer_signals.steps.connect(self._on_steps)
        self.answer_signals.answer_ended.connect(self._on_finished)
        self.answer_signals.answer_failed.connect(self._on_failed)
        self.timer = QTimer(self)
        self.timer.setInterval(int(1000 / REPLAY_HZ))
        self.timer.timeout.connect(self._replay_tick)

    # ------------------------------------------------------------------ racing

    def _build_prompt_row(self) -> QHBoxLayout:
        """The prompt, and beside it Race, Replay and Close."""
        self.prompt = QPlainTextEdit(objectName="racePrompt")
        self.prompt.setPlaceholderText("A prompt to answer twice")
        self.prompt.setMaximumHeight(80)
        self.start_button = QPushButton("Race", objectName="raceButton")
        self.start_button.clicked.connect(lambda: self.race(self.prompt.toPlainText()))
        self.replay_button = QPushButton("Replay", objectName="replayButton")
        self.replay_button.setEnabled(False)
        self.replay_button.clicked.connect(self.replay)
        top = QHBoxLayout()
        top.addWidget(self.prompt, 1)
        buttons = QVBoxLayout()
        buttons.addWidget(self.start_button)
        buttons.addWidget(self.replay_button)
        self.close_button = QPushButton("Close", objectName="raceCloseButton")
        self.close_button.clicked.connect(self.close)
        buttons.addWidget(self.close_button)
        top.addLayout(buttons)
        return top

    def race(self, prompt: str) -> None:
        prompt = prompt.strip()
        if not prompt or self._running:
            return
        self.prompt.setPlainText(prompt)
        self.timer.stop()
        self.lanes = {"plain": Lane("plain"), "speculative": Lane("speculative")}
        self.session.reset()
        self.session.say(prompt)
        sampling = self.session.sampling()  # the model's recommendation included
        if sampling.seed is None:
            sampling = dataclasses.replace(sampling, seed=fresh_seed())  # one seed for both lanes
        self._queue = [
            ("plain", self.session.request(sampling=sampling, drafters=[])),
            ("speculative", self.session.request(sampling=sampling)),
        ]
        for key in self.views:
            self.views[key].clear()
            self.stats[key].setText("waiting…")
        self.verdict.setText("")
        self.start_button.setEnabled(False)
        self.replay_button.setEnabled(False)
        self._next()

    def _next(self) -> None:
        if not self._queue:
            self._running = None
            self.start_button.setEnabled(True)
            self.replay_button.setEnabled(True)
            self.finished_race.emit()
            self.replay()
            return
        key, request = self._queue.pop(0)
        self._running = key
        self.stats[key].setText("reading the prompt…")
        self._request.emit(request)

    def _on_steps(self, events) -> None:
        lane = self.lanes[self._running]
        lane.add(events)
        self.views[self._running].setPlainText(lane.moments[-1][1])
        self.stats[self._running].setText(
            f"writing… {lane.tokens:,} tokens (replayed side by side at their real pace once both are done)"
        )

    def _on_finished(self, final, _message_id=None) -> None:
        if final.finish_reason == "error":
            self._on_failed(final.error or "generation failed")
            return
        lane = self.lanes[self._running]
        lane.finish(final)
        self._show_stats(self._running, lane)
        self._next()

    def _on_failed(self, message: str) -> None:
        self.stats[self._running].setText(f"failed: {html.escape(message)}")
        self._queue, self._running = [], None
        self.start_button.setEnabled(True)

    # ------------------------------------------------------------------ replay at real pace

    def replay(self) -> None:
        if not self.lanes or self._running:
            return
        self._replay_start = time.monotonic()
        for view in self.views.values():
            view.clear()
        self.timer.start()

    def _replay_tick(self) -> None:
        t = time.monotonic() - self._replay_start
        done = True
        for key, lane in self.lanes.items():
            shown = lane.text_at(t)
            if shown != self.views[key].toPlainText():
                self.views[key].setPlainText(shown)
                self.views[key].verticalScrollBar().setValue(self.views[key].verticalScrollBar().maximum())
            if t < lane.elapsed_s:
                done = False
                self.stats[key].setText(f"{t:5.1f} s …")
            else:
                self._show_stats(key, lane)
        if done:
            self.timer.stop()
            plain, spec = self.lanes["plain"], self.lanes["speculative"]
            if spec.elapsed_s and plain.elapsed_s:
                self.verdict.setText(
                    f"Speculative decoding: {plain.elapsed_s / spec.elapsed_s:.2f}× the speed of plain "
                    f"decoding ({spec.elapsed_s:.1f} s vs {plain.elapsed_s:.1f} s of writing)"
                )

    def _show_stats(self, key: str, lane: Lane) -> None:
        self.stats[key].setText(
            f"<b>{lane.elapsed_s:.2f} s</b> writing · {lane.tokens} tokens · {lane.tokens_per_second:.1f} tokens/s"
            f" · first token {lane.first_token_s:.2f} s"
        )

    def closeEvent(self, event) -> None:
        self._end()
        super().closeEvent(event)

    def done(self, result: int) -> None:
        self._end()
        super().done(result)

    def _end(self) -> None:
        self.timer.stop()
        self.worker_thread.shutdown()
        self.answer_signals.disconnect_all()
