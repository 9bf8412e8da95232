"""The main window: conversations (left), chat (centre), inspection docks, status bar."""

from __future__ import annotations

import html

from PySide6.QtCore import QEvent, QObject, Qt, Signal
from PySide6.QtWidgets import (
    QApplication, QDockWidget, QHBoxLayout, QLabel, QListWidget, QListWidgetItem, QMainWindow, QMessageBox, QPlainTextEdit,
    QPushButton, QSplitter, QTextBrowser, QVBoxLayout, QWidget,
)

from draftscope.engine.engine import GenerationRequest
from draftscope.engine.sampling import SamplingParams
from draftscope.gui.worker import GenerationWorker, WorkerThread


class _EnterSends(QObject):
    """Enter sends, Shift+Enter breaks the line."""

    def __init__(self, on_send) -> None:
        super().__init__()
        self.on_send = on_send

    def eventFilter(self, obj, event) -> bool:
        if event.type() == QEvent.Type.KeyPress and event.key() in (Qt.Key.Key_Return, Qt.Key.Key_Enter):
            if not event.modifiers() & Qt.KeyboardModifier.ShiftModifier:
                self.on_send()
                return True
        return False


def stats_line(stats: dict) -> str:
    parts = [f"{stats['tokens']} tokens", f"τ {stats['tau']:.2f}", f"{stats['tokens_per_second']:.1f} tokens/s",
             f"first token {stats['time_to_first_token_ms']:.0f} ms"]
    if stats.get("speedup_estimate"):
        parts.append(f"{stats['speedup_estimate']:.2f}x plain")
    return " · ".join(parts)


class MainWindow(QMainWindow):
    request_generation = Signal(object)

    def __init__(self, engine, history, settings, *, drafters=lambda: [], datastore_label: str = "none") -> None:
        super().__init__()
        self.engine, self.history, self.settings = engine, history, settings
        self.make_drafters = drafters
        self.conversation_id: int | None = None
        self._stored_cache: tuple = (None, [])
        self.streaming_text = ""
        self.streaming = False
        self.setWindowTitle("Draftscope")
        self.resize(1100, 720)

        self.conversation_list = QListWidget(objectName="conversationList")
        self.conversation_list.currentItemChanged.connect(self._on_conversation_selected)
        self.conversation_list.setTextElideMode(Qt.TextElideMode.ElideRight)
        self.conversation_list.setHorizontalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAlwaysOff)
        new_button = QPushButton("New conversation", objectName="newConversationButton")
        new_button.clicked.connect(self.new_conversation)
        left = QWidget()
        left_layout = QVBoxLayout(left)
        left_layout.setContentsMargins(0, 0, 0, 0)
        left_layout.addWidget(new_button)
        left_layout.addWidget(self.conversation_list)

        self.chat_view = QTextBrowser(objectName="chatView")
        self.chat_view.setOpenExternalLinks(True)
        self.chat_input = QPlainTextEdit(objectName="chatInput")
        self.chat_input.setPlaceholderText("Message (Enter sends, Shift+Enter breaks the line)")
        self.chat_input.setMaximumHeight(110)
        self._enter = _EnterSends(self.send)
        self.chat_input.installEventFilter(self._enter)
        self.send_button = QPushButton("Send", objectName="sendButton")
        self.send_button.clicked.connect(self.send)
        self.stop_button = QPushButton("Stop", objectName="stopButton")
        self.stop_button.clicked.connect(self.stop)
        self.stop_button.setEnabled(False)
        buttons = QHBoxLayout()
        buttons.addStretch(1)
        buttons.addWidget(self.stop_button)
        buttons.addWidget(self.send_button)
        centre = QWidget()
        centre_layout = QVBoxLayout(centre)
        centre_layout.addWidget(self.chat_view, 1)
        centre_layout.addWidget(self.chat_input)
        centre_layout.addLayout(buttons)

        splitter = QSplitter()
        splitter.addWidget(left)
        splitter.addWidget(centre)
        splitter.setStretchFactor(1, 1)
        splitter.setSizes([240, 860])
        self.setCentralWidget(splitter)

        view_menu = self.menuBar().addMenu("&View")
        for name, title, text in (
            ("draftsDock", "Accepted drafts", "The drafts of each step will be listed here."),
            ("trieDock", "Draft tree", "The draft tree of the selected step will be drawn here."),
            ("speedupDock", "Speedup", "Live tokens/s against plain decoding will be charted here."),
        ):
            dock = QDockWidget(title, self, objectName=name)
            label = QLabel(text)
            label.setWordWrap(True)
            label.setAlignment(Qt.AlignmentFlag.AlignCenter)
            dock.setWidget(label)
            self.addDockWidget(Qt.DockWidgetArea.RightDockWidgetArea, dock)
            dock.hide()
            view_menu.addAction(dock.toggleViewAction())

        status = self.statusBar()
        self.status_model = QLabel(f"model: {engine.name}", objectName="statusModel")
        self.status_device = QLabel(f"device: {engine.device}", objectName="statusDevice")
        self.status_datastore = QLabel(f"datastore: {datastore_label}", objectName="statusDatastore")
        names = ", ".join(d.name for d in self.make_drafters()) or "none"
        self.status_drafters = QLabel(f"drafters: {names}", objectName="statusDrafters")
        self.status_tps = QLabel("– tokens/s", objectName="statusTokensPerSecond")
        for w in (self.status_model, self.status_device, self.status_datastore, self.status_drafters):
            status.addWidget(w)
        status.addPermanentWidget(self.status_tps)

        self.worker = GenerationWorker(engine)
        self.worker_thread = WorkerThread(self.worker)
        self.request_generation.connect(self.worker.generate)  # queued: runs on the worker thread
        self.worker.steps.connect(self._on_steps)
        self.worker.finished.connect(self._on_finished)
        self.worker.cancelled.connect(self._on_finished)
        self.worker.failed.connect(self._on_failed)
        # Quitting the app without closing the window (Ctrl+Q, a session logout) must still end the
        # worker thread before Qt destroys it.
        QApplication.instance().aboutToQuit.connect(self.worker_thread.shutdown)

        self._reload_conversations()

    # ------------------------------------------------------------------ conversations

    def _reload_conversations(self, select: int | None = None) -> None:
        self.conversation_list.blockSignals(True)
        self.conversation_list.clear()
        for conv in self.history.conversations():
            item = QListWidgetItem(conv.title)
            item.setData(Qt.ItemDataRole.UserRole, conv.id)
            self.conversation_list.addItem(item)
            if conv.id == select:
                self.conversation_list.setCurrentItem(item)
        self.conversation_list.blockSignals(False)

    def new_conversation(self) -> None:
        self.conversation_id = None
        self._stored_cache = (object(), [])
        self.conversation_list.clearSelection()
        self._render()

    def _on_conversation_selected(self, item, _previous=None) -> None:
        if item is None or self.streaming:
            return
        self.conversation_id = item.data(Qt.ItemDataRole.UserRole)
        self._render()

    # ------------------------------------------------------------------ sending

    def send(self) -> None:
        text = self.chat_input.toPlainText().strip()
        if not text or self.streaming:
            return
        if self.conversation_id is None:
            self.conversation_id = self.history.create_conversation(text[:48])
        self.history.add_message(self.conversation_id, "user", text)
        self.chat_input.clear()
        self._reload_conversations(select=self.conversation_id)
        messages = [{"role": m.role, "content": m.content} for m in self.history.messages(self.conversation_id)]
        if self.settings.system_prompt:
            messages.insert(0, {"role": "system", "content": self.settings.system_prompt})
        s = self.settings
        request = GenerationRequest(
            messages=messages, max_new_tokens=s.max_new_tokens,
            sampling=SamplingParams(s.temperature, s.top_k, s.top_p, s.repetition_penalty),
            drafters=self.make_drafters(),
        )
        self.streaming, self.streaming_text = True, ""
        self.send_button.setEnabled(False)
        self.stop_button.setEnabled(True)
        self._render()
        self.request_generation.emit(request)

    def stop(self) -> None:
        self.worker.stop()

    def _on_steps(self, events: list) -> None:
        self.streaming_text += "".join("".join(e.pieces) for e in events)
        last = events[-1]
        self.status_tps.setText(f"{last.tokens_per_second:.1f} tokens/s · τ {last.tau:.2f}")
        self._render()

    def _on_finished(self, final) -> None:
        stats = {k: getattr(final.stats, k) for k in ("tokens", "steps", "tau", "tokens_per_second",
                                                      "time_to_first_token_ms", "elapsed_s", "speedup_estimate")}
        stats["finish_reason"] = final.finish_reason
        drafters = {"drafters": final.stats.drafters, "accepted_by_source": final.stats.accepted_by_source}
        if final.text.strip() or final.finish_reason != "cancel":
            self.history.add_message(self.conversation_id, "assistant", final.text, stats=stats, drafters=drafters)
        self._end_stream()

    def _on_failed(self, message: str) -> None:
        self._end_stream()
        QMessageBox.warning(self, "Draftscope", f"The answer failed: {message}")

    def _end_stream(self) -> None:
        self.streaming = False
        self.streaming_text = ""
        self.send_button.setEnabled(True)
        self.stop_button.setEnabled(False)
        self._render()

    # ------------------------------------------------------------------ rendering

    def _stored_markdown(self) -> list[str]:
        """The stored messages as Markdown, read from the history only when they changed (not at
        every streaming update)."""
        key = (self.conversation_id, self.streaming)
        if self._stored_cache[0] != key:
            parts = []
            if self.conversation_id is not None:
                for m in self.history.messages(self.conversation_id):
                    parts.append(f"**{'You' if m.role == 'user' else 'Assistant'}**\n\n{m.content}\n")
                    if m.stats:
                        parts.append(f"<small>{html.escape(stats_line(m.stats))}</small>\n")
            self._stored_cache = (key, parts)
        return list(self._stored_cache[1])

    def _render(self) -> None:
        bar = self.chat_view.verticalScrollBar()
        follow = bar.value() >= bar.maximum() - 4  # auto-scroll pauses when the user scrolls up
        parts = self._stored_markdown()
        if self.streaming:
            parts.append(f"**Assistant**\n\n{self.streaming_text}▌\n")
        self.chat_view.setMarkdown("\n".join(parts))
        if follow:
            bar.setValue(bar.maximum())

    def closeEvent(self, event) -> None:
        self.worker_thread.shutdown()
        super().closeEvent(event)
