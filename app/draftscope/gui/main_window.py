"""The main window: conversations (left), chat (centre), inspection docks, status bar."""

from __future__ import annotations

import functools
import html
import time
from pathlib import Path

from PySide6.QtCore import QEvent, QObject, Qt, QTimer, QUrl, Signal
from PySide6.QtGui import QAction, QDesktopServices, QKeySequence, QPalette, QTextCursor
from PySide6.QtWidgets import (
    QApplication, QDockWidget, QFileDialog, QHBoxLayout, QInputDialog, QLabel, QLineEdit, QListWidget,
    QListWidgetItem, QMainWindow, QMenu, QMessageBox, QPlainTextEdit, QPushButton, QSplitter, QTextBrowser,
    QTextEdit, QVBoxLayout, QWidget,
)

from draftscope.engine.events import step_from_dict
from draftscope.gui.chat_render import (
    ACTION_SCHEME, COPY_SCHEME, STEP_SCHEME, ChatRenderer, provenance_legend,
)
from draftscope.gui.drafts_panel import DraftsPanel
from draftscope.gui.inspection import InspectionController
from draftscope.gui.speedup_panel import SpeedupPanel
from draftscope.gui.trie_view import TrieView
from draftscope.gui.worker import GenerationWorker, WorkerThread
from draftscope.engine.sampling import fresh_seed
from draftscope.session import ChatSession, sampling_from


STREAM_RENDER_SHARE_WAIT = 4  # waits this many times a render's duration before the next (a fifth of the time)

class _EnterSends(QObject):
    """Enter sends, Shift+Enter breaks the line."""

    def __init__(self, on_send, on_escape) -> None:
        super().__init__()
        self.on_send, self.on_escape = on_send, on_escape

    def eventFilter(self, obj, event) -> bool:
        if event.type() != QEvent.Type.KeyPress:
            return False
        if event.key() in (Qt.Key.Key_Return, Qt.Key.Key_Enter):
            if not event.modifiers() & Qt.KeyboardModifier.ShiftModifier:
                self.on_send()
                return True
        elif event.key() == Qt.Key.Key_Escape:
            return self.on_escape()
        return False


# Plain decoding speed drifts with the machine's load and clocks: measure it again when the last
# figure is older than this, after an answer (never during one).
BASELINE_MAX_AGE_S = 600


def stats_line(stats: dict) -> str:
    parts = [f"{stats['tokens']} tokens", f"τ {stats['tau']:.2f}", f"{stats['tokens_per_second']:.1f} tokens/s",
             f"first token {stats['time_to_first_token_ms']:.0f} ms"]
    if stats.get("speedup_estimate"):
        parts.append(f"{stats['speedup_estimate']:.2f}x plain")
    if stats.get("seed") is not None:  # sampled: this seed (Settings ▸ Generation) writes this answer again
        parts.append(f"seed {stats['seed']}")
    return " · ".join(parts)


class MainWindow(QMainWindow):
    request_generation = Signal(object)
    request_baseline = Signal()  # measure plain decoding speed again (on the worker thread)
    datastore_chosen = Signal(str)  # a datastore built in the wizard, to be used from now on
    answer_started = Signal()  # a new answer begins streaming (panels reset)
    steps_arrived = Signal(list)  # [StepEvent, ...] of the answer being streamed
    answer_selected = Signal(int, list)  # a stored answer picked for inspection: (message id, its StepEvents)
    learned_changed = Signal(object)  # LearnedStats, after the learned answers were re-indexed (any thread)
    notice = Signal(str)  # something the user should know, from any thread (a datastore changed on disk)

    def __init__(self, runtime, history, *, code_style: str = "default", dark: bool = False) -> None:
        """``runtime``: the model and what it drafts with (draftscope.runtime)."""
        super().__init__()
        self.runtime = runtime
        engine = self.engine = runtime.engine
        self.history = history
        runtime.on_notice = self.notice.emit
        # The conversation's turn cycle (Qt-free, shared with the terminal and the server); the
        # window's settings and drafters are the runtime's, its conversation the session's.
        self.session = ChatSession(runtime, history=history)
        # the draft tree labels each node with its token's text; decoding is cached per window
        self._token_text = functools.lru_cache(maxsize=65536)(lambda token_id: engine.tokenizer.decode([token_id]))
        self.editing_message_id: int | None = None
        self.error_box: QMessageBox | None = None
        self.renderer = ChatRenderer(code_style, dark=dark)
        self._shown: list[int] = []  # ids of the messages in the chat view, in order
        self._html_cache: dict[int, str] = {}  # message id -> rendered body (messages never change)
        self._stream_start: int | None = None  # where the answer being streamed begins in the chat
        self.code_blocks: dict[str, list[str]] = {}  # "<message id>" or "stream" -> code of each block
        self.streaming_text = ""
        self.streaming = False
        self.current_steps: list = []  # StepEvents of the answer being streamed
        self._stream_render_at, self._stream_render_s = 0.0, 0.0  # when the streamed answer last rendered, and how long it took
        self._stream_timer = QTimer(self, singleShot=True)
        self._stream_timer.timeout.connect(lambda: self.streaming and self._render(stream_only=True))
        self.show_provenance = False
        self.setWindowTitle("Draftscope")
        self.resize(1100, 720)

        self.search_box = QLineEdit(objectName="conversationSearch")
        self.search_box.setPlaceholderText("Search conversations")
        self.search_box.setClearButtonEnabled(True)
        self.search_box.textChanged.connect(lambda _: self._reload_conversations(select=self.conversation_id))
        self.conversation_list = QListWidget(objectName="conversationList")
        self.conversation_list.currentItemChanged.connect(self._on_conversation_selected)
        self.conversation_list.setTextElideMode(Qt.TextElideMode.ElideRight)
        self.conversation_list.setHorizontalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAlwaysOff)
        self.conversation_list.setContextMenuPolicy(Qt.ContextMenuPolicy.CustomContextMenu)
        self.conversation_list.customContextMenuRequested.connect(self._conversation_menu)
        self.conversation_list.itemChanged.connect(self._on_item_renamed)
        new_button = QPushButton("New conversation", objectName="newConversationButton")
        new_button.clicked.connect(self.new_conversation)
        left = QWidget()
        left_layout = QVBoxLayout(left)
        left_layout.setContentsMargins(0, 0, 0, 0)
        left_layout.addWidget(new_button)
        left_layout.addWidget(self.search_box)
        left_layout.addWidget(self.conversation_list)

        self.chat_view = QTextBrowser(objectName="chatView")
        self.chat_view.setOpenLinks(False)  # our links (copy, edit, regenerate) are handled here
        self.chat_view.anchorClicked.connect(self._on_link)
        self.edit_banner = QLabel("Editing a message: Enter sends it in place of the old one and what followed, "
                                  "Esc cancels.",
                                  objectName="editBanner")
        self.edit_banner.hide()
        self.chat_input = QPlainTextEdit(objectName="chatInput")
        self.chat_input.setPlaceholderText("Message (Enter sends, Shift+Enter breaks the line)")
        self.chat_input.setMaximumHeight(110)
        self._enter = _EnterSends(self.send, self._escape)
        self.chat_input.installEventFilter(self._enter)
        self.regenerate_button = QPushButton("Regenerate", objectName="regenerateButton")
        self.regenerate_button.setToolTip("Answer the last message again (Ctrl+R)")
        self.regenerate_button.clicked.connect(lambda: self.regenerate())
        self.edit_button = QPushButton("Edit last message", objectName="editButton")
        self.edit_button.setToolTip("Edit your last message and send it again (Ctrl+E)")
        self.edit_button.clicked.connect(self.edit_last)
        self.send_button = QPushButton("Send", objectName="sendButton")
        self.send_button.clicked.connect(self.send)
        self.stop_button = QPushButton("Stop", objectName="stopButton")
        self.stop_button.clicked.connect(self.stop)
        self.stop_button.setEnabled(False)
        buttons = QHBoxLayout()
        buttons.addWidget(self.regenerate_button)
        buttons.addWidget(self.edit_button)
        buttons.addStretch(1)
        buttons.addWidget(self.stop_button)
        buttons.addWidget(self.send_button)
        centre = QWidget()
        centre_layout = QVBoxLayout(centre)
        self.provenance_legend = QLabel(objectName="provenanceLegend")
        self.provenance_legend.hide()
        centre_layout.addWidget(self.provenance_legend)
        centre_layout.addWidget(self.chat_view, 1)
        centre_layout.addWidget(self.edit_banner)
        centre_layout.addWidget(self.chat_input)
        centre_layout.addLayout(buttons)

        splitter = QSplitter()
        splitter.addWidget(left)
        splitter.addWidget(centre)
        splitter.setStretchFactor(1, 1)
        splitter.setSizes([240, 860])
        self.setCentralWidget(splitter)

        self._build_menus()
        self.docks = {}
        self.drafts_panel = DraftsPanel()
        self.trie_view = TrieView(self._token_text)
        self.speedup_panel = SpeedupPanel()
        self.inspection = InspectionController(self.drafts_panel, self.trie_view, self.speedup_panel, self)
        self.inspection.step_selected.connect(self._highlight_step)
        for name, title, widget, area in (
            ("trieDock", "Draft tree", self.trie_view, Qt.DockWidgetArea.RightDockWidgetArea),
            ("speedupDock", "Speedup", self.speedup_panel, Qt.DockWidgetArea.RightDockWidgetArea),
            ("draftsDock", "Accepted drafts", self.drafts_panel, Qt.DockWidgetArea.BottomDockWidgetArea),
        ):
            dock = QDockWidget(title, self, objectName=name)
            dock.setWidget(widget)
            self.addDockWidget(area, dock)
            dock.hide()
            self.view_menu.addAction(dock.toggleViewAction())
            self.docks[name] = dock
        self.show_panels_action = QAction("Show all inspection &panels", self, objectName="showPanelsAction")
        self.show_panels_action.setShortcut(QKeySequence("Ctrl+I"))
        self.show_panels_action.triggered.connect(self.show_panels)
        self.view_menu.addAction(self.show_panels_action)
        self.answer_started.connect(lambda: self.inspection.begin_live(self.engine.baseline_tokens_per_second))
        self.steps_arrived.connect(self.inspection.add_live)
        self.answer_selected.connect(
            lambda message_id, steps: self.inspection.show_answer(message_id, steps, self._baseline_of(message_id)))

        status = self.statusBar()
        self.status_model = QLabel(f"model: {engine.name}", objectName="statusModel")
        self.status_model.setToolTip(engine.name)
        backend = engine.backend
        self.status_device = QLabel(backend.describe(), objectName="statusDevice")
        self.status_device.setToolTip(f"{backend.kind} runs the model on {engine.device}, in {engine.precision}"
                                      + (f": {engine.dtype_reason}" if engine.dtype_reason else "")
                                      + ". Settings ▸ Model ▸ Backend and Precision change it.")
        self.status_datastore = QLabel(objectName="statusDatastore")
        self._show_datastore(runtime.datastore_label)
        self.status_drafters = QLabel(objectName="statusDrafters")
        self.status_tps = QLabel("– tokens/s", objectName="statusTokensPerSecond")
        self.status_baseline = QLabel(objectName="statusBaseline")
        self.status_baseline.setToolTip("Plain decoding speed of this model on this device (measured at load, "
                                        "and again when older than 10 minutes)")
        self._show_baseline(engine.baseline_tokens_per_second)
        self.status_learned = QLabel(objectName="statusLearned")
        for w in (self.status_model, self.status_device, self.status_datastore, self.status_drafters,
                  self.status_learned, self.status_baseline):
            status.addWidget(w)
        self.status_server = QLabel(objectName="statusServer")
        self.status_server.hide()
        status.addPermanentWidget(self.status_server)
        status.addPermanentWidget(self.status_tps)
        self._show_drafters()

        self.notice.connect(lambda text: self.statusBar().showMessage(text, 20000))
        self.worker = GenerationWorker(self.session)
        self.worker_thread = WorkerThread(self.worker)
        self.request_generation.connect(self.worker.generate)  # queued: runs on the worker thread
        self.worker.steps.connect(self._on_steps)
        self.worker.finished.connect(self._on_finished)
        self.worker.cancelled.connect(self._on_finished)
        self.worker.failed.connect(self._on_failed)
        self.worker.baseline_measured.connect(self._on_baseline)
        self.request_baseline.connect(self.worker.measure_baseline)
        # Quitting the app without closing the window (Ctrl+Q, a session logout) must still end the
        # worker thread before Qt destroys it.
        QApplication.instance().aboutToQuit.connect(self.worker_thread.shutdown)

        # The model's own answers feed its learned datastore, indexed on a background thread.
        self.learner = None
        store = runtime.learned
        if store is not None:
            from draftscope.datastore.learned import Learner

            self.learner = Learner(store, on_change=self.learned_changed.emit)
            self.session.learner = self.learner
            self.learned_changed.connect(self._show_learned)
            QApplication.instance().aboutToQuit.connect(self.learner.close)
        self._show_learned()

        self._reload_conversations()
        self._update_actions()

    def _build_menus(self) -> None:
        def action(menu, text, slot, shortcut=None, name=None) -> QAction:
            act = QAction(text, self)
            if shortcut:
                act.setShortcut(QKeySequence(shortcut))
            if name:
                act.setObjectName(name)
            act.triggered.connect(slot)
            menu.addAction(act)
            return act

        file_menu = self.menuBar().addMenu("&File")
        action(file_menu, "&New conversation", self.new_conversation, "Ctrl+N", "newConversationAction")
        self.export_action = action(file_menu, "&Export conversation as Markdown…", self.export_current,
                                    "Ctrl+Shift+E", "exportAction")
        self.wizard_action = action(file_menu, "&Build a datastore…", self.open_datastore_wizard, "Ctrl+Shift+B",
                                    "datastoreWizardAction")
        self.forget_action = action(file_menu, "&Forget the learned answers…", self.forget_learned, None,
                                    "forgetLearnedAction")
        self.train_action = action(file_menu, "&Train the recurrent drafter…", self.open_train_dialog, None,
                                   "trainHeadAction")
        file_menu.addSeparator()
        self.settings_action = action(file_menu, "&Settings…", lambda: self.settings_requested.emit(),
                                      QKeySequence.StandardKey.Preferences, "settingsAction")
        file_menu.addSeparator()
        action(file_menu, "&Quit", QApplication.quit, QKeySequence.StandardKey.Quit, "quitAction")

        chat_menu = self.menuBar().addMenu("&Chat")
        self.regenerate_action = action(chat_menu, "&Regenerate answer", lambda: self.regenerate(), "Ctrl+R", "regenerateAction")
        self.edit_action = action(chat_menu, "&Edit last message", self.edit_last, "Ctrl+E", "editAction")
        self.stop_action = action(chat_menu, "&Stop", self.stop, "Ctrl+.", "stopAction")
        self.race_action = action(chat_menu, "R&ace plain vs speculative…", self.open_race, "Ctrl+Shift+R", "raceAction")
        self.baseline_action = action(chat_menu, "&Measure plain decoding speed", self.measure_baseline, None,
                                      "measureBaselineAction")
        chat_menu.addSeparator()
        self.rename_action = action(chat_menu, "Re&name conversation…", self.rename_current, "F2", "renameAction")
        self.delete_action = action(chat_menu, "&Delete conversation…", self.delete_current, None, "deleteAction")
        self.view_menu = self.menuBar().addMenu("&View")
        self.provenance_action = QAction("&Colour drafted tokens", self, objectName="provenanceAction", checkable=True)
        self.provenance_action.setShortcut(QKeySequence("Ctrl+D"))
        self.provenance_action.setToolTip("Colour each token of the answers by where it came from; hover for its step")
        self.provenance_action.toggled.connect(self.set_show_provenance)
        self.view_menu.addAction(self.provenance_action)
        self.view_menu.addSeparator()

    settings_requested = Signal()

    # ------------------------------------------------------------------ conversations

    def _reload_conversations(self, select: int | None = None) -> None:
        query = self.search_box.text().strip()
        found = self.history.search(query) if query else self.history.conversations()
        self.conversation_list.blockSignals(True)
        self.conversation_list.clear()
        for conv in found:
            item = QListWidgetItem(conv.title)
            item.setData(Qt.ItemDataRole.UserRole, conv.id)
            item.setFlags(item.flags() | Qt.ItemFlag.ItemIsEditable)  # F2 / double-click renames
            self.conversation_list.addItem(item)
            if conv.id == select:
                self.conversation_list.setCurrentItem(item)
        self.conversation_list.blockSignals(False)

    def new_conversation(self) -> None:
        if self.streaming:
            return
        self.conversation_id = None
        self._cancel_edit()
        self.conversation_list.clearSelection()
        self.conversation_list.setCurrentItem(None)
        self._invalidate()
        self._update_actions()
        self._render()

    def _on_conversation_selected(self, item, _previous=None) -> None:
        if item is None or self.streaming:
            return
        self.conversation_id = item.data(Qt.ItemDataRole.UserRole)
        self._cancel_edit()
        self._invalidate()
        self._update_actions()
        self._render()

    def _on_item_renamed(self, item) -> None:
        title = item.text().strip()
        conv_id = item.data(Qt.ItemDataRole.UserRole)
        if title:
            self.history.rename(conv_id, title)
        else:  # an empty title is not a title: put the old one back
            old = self.history.conversation(conv_id)
            self.conversation_list.blockSignals(True)
            item.setText(old.title if old else "")
            self.conversation_list.blockSignals(False)

    def _conversation_menu(self, pos) -> None:
        item = self.conversation_list.itemAt(pos)
        if item is None:
            return
        self.conversation_list.setCurrentItem(item)
        menu = QMenu(self)
        menu.addAction(self.rename_action)
        menu.addAction(self.export_action)
        menu.addSeparator()
        menu.addAction(self.delete_action)
        menu.exec(self.conversation_list.viewport().mapToGlobal(pos))

    def rename_current(self) -> None:
        if self.conversation_id is None:
            return
        conv = self.history.conversation(self.conversation_id)
        title, ok = QInputDialog.getText(self, "Rename conversation", "Title:", text=conv.title if conv else "")
        if ok and title.strip():
            self.rename_conversation(self.conversation_id, title.strip())

    def rename_conversation(self, conversation_id: int, title: str) -> None:
        self.history.rename(conversation_id, title)
        self._reload_conversations(select=self.conversation_id)

    def delete_current(self) -> None:
        if self.conversation_id is None or self.streaming:
            return
        conv = self.history.conversation(self.conversation_id)
        answer = QMessageBox.question(self, "Delete conversation",
                                      f"Delete \u201c{conv.title if conv else ''}\u201d and all its messages? "
                                      "This cannot be undone.")
        if answer == QMessageBox.StandardButton.Yes:
            self.delete_conversation(self.conversation_id)

    def delete_conversation(self, conversation_id: int) -> None:
        self.history.delete(conversation_id)
        if conversation_id == self.conversation_id:
            self.conversation_id = None
            self._invalidate()
        self._reload_conversations(select=self.conversation_id)
        self._update_actions()
        self._render()

    def export_current(self) -> None:
        if self.conversation_id is None:
            return
        conv = self.history.conversation(self.conversation_id)
        safe = "".join(c if c.isalnum() or c in " -_" else "_" for c in (conv.title if conv else "conversation"))
        path, _ = QFileDialog.getSaveFileName(self, "Export conversation", f"{safe.strip() or 'conversation'}.md",
                                              "Markdown (*.md)")
        if path:
            self.export_conversation(self.conversation_id, Path(path))

    def export_conversation(self, conversation_id: int, path: Path) -> None:
        try:
            path.write_text(self.history.export_markdown(conversation_id), encoding="utf-8")
        except OSError as exc:
            QMessageBox.warning(self, "Draftscope", f"The conversation could not be exported to {path}: {exc}")
            return
        self.statusBar().showMessage(f"Exported to {path}", 8000)

    # ------------------------------------------------------------------ sending, regenerate, edit

    def send(self) -> None:
        text = self.chat_input.toPlainText().strip()
        if not text or self.streaming:
            return
        if self.editing_message_id is not None:  # edit-and-resend: drop the old message and its answer
            self.session.rewind(self.editing_message_id)
            self._cancel_edit()
        self.session.say(text)
        self.chat_input.clear()
        self._reload_conversations(select=self.conversation_id)
        self._generate()

    def regenerate(self, message_id: int | None = None) -> None:
        """Answer again from an assistant message (default: the last one); it and what follows
        it are replaced."""
        if self.streaming or self.conversation_id is None:
            return
        if not self.session.rewind(message_id):
            return
        self._cancel_edit()
        self._generate(new_seed=True)

    def edit_last(self) -> None:
        users = [m for m in self.history.messages(self.conversation_id)
                 if m.role == "user"] if self.conversation_id is not None else []
        if users:
            self.edit(users[-1].id)

    def edit(self, message_id: int) -> None:
        """Put a user message back in the input; sending replaces it and everything after it."""
        if self.streaming or self.conversation_id is None:
            return
        message = next((m for m in self.history.messages(self.conversation_id) if m.id == message_id), None)
        if message is None or message.role != "user":
            return
        self.editing_message_id = message_id
        self.chat_input.setPlainText(message.content)
        self.chat_input.setFocus()
        cursor = self.chat_input.textCursor()
        cursor.movePosition(cursor.MoveOperation.End)
        self.chat_input.setTextCursor(cursor)
        self.edit_banner.show()

    def _escape(self) -> bool:
        if self.editing_message_id is None:
            return False
        self._cancel_edit()
        self.chat_input.clear()
        return True

    def _cancel_edit(self) -> None:
        self.editing_message_id = None
        self.edit_banner.hide()

    def _generate(self, *, new_seed: bool = False) -> None:
        """``new_seed``: another answer, not the settings' fixed seed's again (Regenerate)."""
        request = self.session.request(sampling=sampling_from(self.session.settings, seed=fresh_seed())
                                       if new_seed else None)
        self.streaming, self.streaming_text = True, ""
        self.current_steps = []
        self.answer_started.emit()
        self._update_actions()
        self._render()
        self.request_generation.emit(request)

    def stop(self) -> None:
        self.worker.stop()

    def inspect(self, message_id: int) -> None:
        """Show a stored answer's steps in the inspection panels (and open them)."""
        steps = [step_from_dict(d) for d in self.history.steps(message_id)]
        if not steps:
            self.statusBar().showMessage("No drafting steps were kept for this answer", 5000)
            return
        self.show_panels()
        self.answer_selected.emit(message_id, steps)

    def show_panels(self) -> None:
        for dock in self.docks.values():
            dock.show()

    def _baseline_of(self, message_id: int) -> float | None:
        """The plain speed a stored answer was compared with (older answers: today's figure)."""
        if self.conversation_id is not None:
            for m in self.history.messages(self.conversation_id):
                if m.id == message_id and m.stats and m.stats.get("baseline_tokens_per_second"):
                    return m.stats["baseline_tokens_per_second"]
        return self.engine.baseline_tokens_per_second

    def measure_baseline(self) -> None:
        self.status_baseline.setText("plain: measuring …")
        self.request_baseline.emit()

    def _on_baseline(self, rate: float) -> None:
        self._show_baseline(rate)
        self.inspection.set_baseline(rate)

    def _show_baseline(self, rate: float | None) -> None:
        self.status_baseline.setText(f"plain: {rate:.1f} tokens/s" if rate else "plain: not measured")

    def open_datastore_wizard(self) -> None:
        """Build a datastore from the user's files with the current model's tokenizer, or from the
        model's own answers (the loaded model is handed over for that)."""
        from draftscope.gui.datastore_wizard import DatastoreWizard

        tokenizer = self.engine.tokenizer
        self.datastore_wizard = DatastoreWizard(self.settings.model, tokenizer_loader=lambda _spec: tokenizer,
                                                model=getattr(self.engine, "model", None), parent=self)
        self.datastore_wizard.datastore_built.connect(
            lambda path, use_now: self.datastore_chosen.emit(path) if use_now else None)
        self.datastore_wizard.open()

    def open_train_dialog(self, *, options_overrides: dict | None = None) -> None:
        """Train a recurrent head for the loaded model (window-modal: the model trains or answers,
        never both); once written, it drafts from the next answer on."""
        from draftscope.gui.train_dialog import TrainHeadDialog

        if self.streaming:
            self.statusBar().showMessage("The recurrent drafter can be trained once the answer is done", 5000)
            return
        if self.engine.model is None:  # training runs the torch model; say so rather than fail inside the dialog
            QMessageBox.information(self, "Train the recurrent drafter",
                                    f"The recurrent drafter trains on and reads the model's hidden state, which the "
                                    f"{self.engine.backend.kind} backend does not give. Choose Settings ▸ Model ▸ "
                                    "Backend ▸ torch to train and use it for this model.")
            return
        self.train_dialog = TrainHeadDialog(self.engine, self.settings.model, options_overrides=options_overrides,
                                            parent=self)
        self.train_dialog.setWindowModality(Qt.WindowModality.WindowModal)
        self.train_dialog.head_trained.connect(self.use_trained_head)
        self.train_dialog.open()

    def use_trained_head(self, path: str) -> None:
        """Draft with the head just trained from the next answer on."""
        problem = self.runtime.use_head(path)
        if problem:
            self.statusBar().showMessage(problem, 15000)
            return
        self.drafters_changed()
        notes = list(self.runtime.drafter_setup.notes)
        on = self.settings.drafters.get("recurrent", True)
        self.statusBar().showMessage(" · ".join(notes + [
            "The recurrent drafter drafts from the next answer on" if on else
            "A recurrent head was trained; Settings ▸ Drafting switches the recurrent drafter on"]), 15000)

    def open_race(self) -> None:
        """The prompt in the input (or the last question) answered plain and speculatively."""
        from draftscope.gui.race import RaceDialog

        if self.streaming:
            return
        prompt = self.chat_input.toPlainText().strip()
        if not prompt and self.conversation_id is not None:
            users = [m for m in self.history.messages(self.conversation_id) if m.role == "user"]
            prompt = users[-1].content if users else ""
        self.race_dialog = RaceDialog(self.runtime, self)
        self.race_dialog.setWindowModality(Qt.WindowModality.WindowModal)  # one model, one answer at a time
        self.race_dialog.prompt.setPlainText(prompt)
        self.race_dialog.open()

    def _on_steps(self, events: list) -> None:
        self.current_steps.extend(events)
        self.steps_arrived.emit(events)
        self.streaming_text += "".join("".join(e.pieces) for e in events)
        last = events[-1]
        self.status_tps.setText(f"{last.tokens_per_second:.1f} tokens/s · τ {last.tau:.2f}")
        self._render(stream_only=True)

    def _on_finished(self, final, message_id: int | None = None) -> None:
        # kept in the history by the worker's answer loop (ChatSession.stream)
        if message_id is not None:
            self.inspection.finish_live(message_id)
        self._end_stream()
        measured = self.engine.baseline_measured_at
        if measured is not None and time.monotonic() - measured > BASELINE_MAX_AGE_S:
            self.measure_baseline()

    def _on_failed(self, message: str) -> None:
        self._end_stream()
        # window-modal and opened, not exec'd: the error never stalls the event loop
        box = QMessageBox(QMessageBox.Icon.Warning, "Draftscope", f"The answer failed: {message}",
                          QMessageBox.StandardButton.Ok, self)
        box.setObjectName("answerErrorDialog")
        box.setAttribute(Qt.WidgetAttribute.WA_DeleteOnClose)
        box.open()
        self.error_box = box

    def _end_stream(self) -> None:
        self.inspection.flush()
        self.streaming = False
        self.streaming_text = ""
        self._update_actions()
        self._render()

    def _update_actions(self) -> None:
        has_messages = self.conversation_id is not None and not self.streaming
        self.send_button.setEnabled(not self.streaming)
        self.stop_button.setEnabled(self.streaming)
        self.stop_action.setEnabled(self.streaming)
        for widget in (self.regenerate_button, self.edit_button, self.regenerate_action, self.edit_action,
                       self.rename_action, self.delete_action, self.export_action):
            widget.setEnabled(has_messages)

    @property
    def settings(self):
        return self.runtime.settings

    @property
    def conversation_id(self) -> int | None:
        return self.session.conversation_id

    @conversation_id.setter
    def conversation_id(self, value: int | None) -> None:
        self.session.conversation_id = value

    def make_drafters(self) -> list:
        return self.runtime.make_drafters()

    def drafters_changed(self) -> None:
        """The runtime's drafters changed (settings, a new head): show them."""
        self._show_datastore(self.runtime.datastore_label)
        self._show_drafters()
        self._show_learned()

    def show_server(self, url: str | None) -> None:
        """The local server's address in the status bar while it runs (Settings ▸ Server)."""
        self.status_server.setVisible(url is not None)
        if url is not None:
            self.status_server.setText(f"server: {url.removeprefix('http://')}")
            self.status_server.setToolTip(f"OpenAI-compatible server: base URL {url}")

    def served_answer_stored(self, conversation_id: int) -> None:
        """A served answer was kept: it appears in the conversation list (the open one stays)."""
        self._reload_conversations(select=self.conversation_id)

    def _show_datastore(self, label: str) -> None:
        # the file's name in the status bar (a full path crowds out the rest), the path on hover
        self.status_datastore.setText(f"datastore: {Path(label).name if label != 'none' else label}")
        self.status_datastore.setToolTip(label if label != "none" else "No datastore: drafts come from the "
                                         "conversation (and the draft model, if one is set)")

    def set_code_style(self, code_style: str, *, dark: bool) -> None:
        """Re-highlight code for another theme."""
        self.renderer.dark = dark
        self.renderer.set_code_style(code_style)
        self._html_cache.clear()
        self._invalidate()
        self._render()

    def show_conversation(self, conversation_id: int | None) -> None:
        self._reload_conversations(select=conversation_id)
        self.conversation_id = conversation_id if self.history.conversation(conversation_id or -1) else None
        self._invalidate()
        self._update_actions()
        self._render()

    # ------------------------------------------------------------------ learned answers

    def learned_text(self) -> str:
        """What the model has learned from its answers, in words ("" when learning is unavailable)."""
        if self.learner is None:
            return ""
        stats = self.learner.store.stats()
        text = stats.describe()
        if not self.settings.drafters.get("learned", True):
            text += " (off)"
        return text

    def _show_learned(self, _stats=None) -> None:
        text = self.learned_text()
        self.status_learned.setVisible(bool(text))
        self.status_learned.setText(text)
        self.status_learned.setToolTip(
            "Drafts also come from this model's own past answers, which grow as you chat "
            "(indexed in the background). Settings ▸ Drafting turns it off; File ▸ Forget the learned "
            "answers clears them.")
        self.forget_action.setEnabled(self.learner is not None and self.learner.store.stats().answers > 0)
        if _stats is not None:
            self._show_drafters()  # the first index makes the learned drafter usable

    def forget_learned(self, *, confirm: bool = True) -> None:
        if self.learner is None:
            return
        if confirm:
            answer = QMessageBox.question(
                self, "Draftscope", f"Forget the {self.learner.store.stats().answers:,} answers this model has "
                "learned from? Drafts then come from the datastore and the conversation only.")
            if answer != QMessageBox.StandardButton.Yes:
                return
        self.learner.clear()

    def _show_drafters(self) -> None:
        names = ", ".join(d.name for d in self.make_drafters()) or "none"
        self.status_drafters.setText(f"drafters: {names}")

    # ------------------------------------------------------------------ links in the chat

    def _on_link(self, url: QUrl) -> None:
        scheme = url.scheme()
        if scheme == COPY_SCHEME:
            key, _, index = url.path().partition("/")
            blocks = self.code_blocks.get(key, [])
            if index.isdigit() and int(index) < len(blocks):
                QApplication.clipboard().setText(blocks[int(index)])
                self.statusBar().showMessage("Code copied to the clipboard", 3000)
        elif scheme == ACTION_SCHEME:
            verb, _, ident = url.path().partition("/")
            if verb == "regenerate" and ident.isdigit():
                self.regenerate(int(ident))
            elif verb == "edit" and ident.isdigit():
                self.edit(int(ident))
            elif verb == "inspect" and ident.isdigit():
                self.inspect(int(ident))
            elif verb == "copy" and ident.isdigit():
                for m in self.history.messages(self.conversation_id) if self.conversation_id else []:
                    if m.id == int(ident):
                        QApplication.clipboard().setText(m.content)
                        self.statusBar().showMessage("Message copied to the clipboard", 3000)
        elif scheme == STEP_SCHEME:
            key, _, index = url.path().partition("/")
            if index.isdigit():
                self.select_step(key, int(index))
        elif scheme in ("http", "https", "mailto"):
            QDesktopServices.openUrl(url)

    # ------------------------------------------------------------------ steps in the chat

    def select_step(self, key: str, index: int) -> None:
        """A token of the chat was clicked: its step, in every panel (``key``: message id or "live")."""
        if key == "live":
            if self.inspection.answer is not None or not self.streaming:
                return  # the streamed answer has since been stored: its tokens now link by message id
        elif not key.isdigit():
            return
        elif self.inspection.answer != int(key):
            self.inspect(int(key))
        self.show_panels()
        self.inspection.select(index)

    def _highlight_step(self, answer: int | None, index: int, *, scroll: bool = True) -> None:
        """Mark the tokens of the selected step in the chat (tokens are step links only while
        drafted tokens are coloured; otherwise nothing maps text to steps, so nothing is marked)."""
        href = f"{STEP_SCHEME}:{'live' if answer is None else answer}/{index}"
        marks = []
        colour = self.chat_view.palette().color(QPalette.ColorRole.Highlight)
        doc = self.chat_view.document()
        # the live answer is the streamed region at the end: scan only that
        start = self._stream_start if answer is None and self._stream_start is not None else 0
        block = doc.findBlock(start)
        while block.isValid():
            fragments = block.begin()
            while not fragments.atEnd():
                fragment = fragments.fragment()
                if fragment.charFormat().anchorHref() == href:
                    mark = QTextEdit.ExtraSelection()
                    mark.cursor = QTextCursor(self.chat_view.document())
                    mark.cursor.setPosition(fragment.position())
                    mark.cursor.setPosition(fragment.position() + fragment.length(), QTextCursor.MoveMode.KeepAnchor)
                    mark.format.setBackground(colour)
                    mark.format.setForeground(self.chat_view.palette().color(QPalette.ColorRole.HighlightedText))
                    marks.append(mark)
                fragments += 1
            block = block.next()
        self.chat_view.setExtraSelections(marks)
        if marks and scroll:
            cursor = QTextCursor(doc)
            cursor.setPosition(marks[0].cursor.selectionStart())
            self.chat_view.setTextCursor(cursor)
            self.chat_view.ensureCursorVisible()

    def _refresh_highlight(self) -> None:
        """After the chat was re-rendered, mark the selected step again (positions changed)."""
        if self.show_provenance and self.inspection.selected is not None:
            self._highlight_step(self.inspection.answer, self.inspection.selected, scroll=False)
        else:
            self.chat_view.setExtraSelections([])

    # ------------------------------------------------------------------ rendering

    def _invalidate(self) -> None:
        """The next render starts from an empty view (another conversation, messages deleted)."""
        self._shown = []

    def set_show_provenance(self, on: bool) -> None:
        """Answers with each token coloured by its source (still rendered as Markdown), hover for
        its step, click to select it in the panels."""
        self.show_provenance = on
        self.provenance_legend.setText(provenance_legend(dark=self.renderer.dark))
        self.provenance_legend.setVisible(on)
        self._html_cache.clear()
        self._invalidate()
        self._render()

    def _text_colour(self) -> str:
        return self.chat_view.palette().color(QPalette.ColorRole.Text).name()

    def _message_block(self, m) -> str:
        if m.id not in self._html_cache:
            steps = self.history.steps(m.id) if self.show_provenance and m.role == "assistant" else []
            blocks: list[str] = []
            if steps:
                self._html_cache[m.id] = self.renderer.markdown_with_provenance(
                    steps, blocks, key=str(m.id), text_colour=self._text_colour())
            else:
                self._html_cache[m.id] = self.renderer.markdown(m.content, blocks, key=str(m.id))
            self.code_blocks[str(m.id)] = blocks
        if m.role == "user":
            actions = [f'<a href="{ACTION_SCHEME}:copy/{m.id}">Copy</a>', f'<a href="{ACTION_SCHEME}:edit/{m.id}">Edit</a>']
        else:
            actions = [f'<a href="{ACTION_SCHEME}:copy/{m.id}">Copy</a>',
                       f'<a href="{ACTION_SCHEME}:regenerate/{m.id}">Regenerate</a>',
                       f'<a href="{ACTION_SCHEME}:inspect/{m.id}">Inspect drafts</a>']
        return self._message_html(m.role, self._html_cache[m.id], actions, m.stats)

    @staticmethod
    def _message_html(role: str, body: str, actions: list[str], stats: dict | None) -> str:
        who = "You" if role == "user" else "Assistant"
        links = " &nbsp; ".join(actions)
        out = f'<p style="margin-top:14px;"><b>{who}</b> &nbsp; <small>{links}</small></p>{body}'
        if stats:
            out += f'<p><small style="color:gray;">{html.escape(stats_line(stats))}</small></p>'
        return out

    def _render(self, *, stream_only: bool = False) -> None:
        """Bring the chat view up to date with the history and the answer being streamed.

        Work is proportional to what changed: new messages are appended, and a streaming update
        replaces only the answer being written, so an update costs the same in a long conversation.
        A full re-render happens only when messages were removed or another conversation is shown.
        """
        bar = self.chat_view.verticalScrollBar()
        follow = bar.value() >= bar.maximum() - 4  # auto-scroll pauses when the user scrolls up
        doc = self.chat_view.document()
        if not stream_only:
            self._drop_stream_region()
            messages = self.history.messages(self.conversation_id) if self.conversation_id is not None else []
            ids = [m.id for m in messages]
            if ids[:len(self._shown)] != self._shown or not self._shown:
                self.chat_view.setHtml("".join(self._message_block(m) for m in messages))
            else:
                self._append_html("".join(self._message_block(m) for m in messages[len(self._shown):]))
            self._shown = ids
            if self.streaming:
                self._stream_start = self._append_html("")
        if self.streaming and self._stream_start is not None and not self._stream_render_due(stream_only):
            pass  # a long answer re-renders less often: the UI thread keeps most of its time
        elif self.streaming and self._stream_start is not None:
            # the answer so far as Markdown (its drafters' colours when they are shown), re-rendered
            # whole: an unfinished list or code fence changes how earlier lines render
            started = time.perf_counter()
            blocks: list[str] = []
            if self.show_provenance:
                body = self.renderer.markdown_with_provenance(self.current_steps, blocks, key="live",
                                                              text_colour=self._text_colour(), suffix="▌")
            else:
                body = self.renderer.markdown(self.streaming_text + "▌", blocks, key="stream")
            self.code_blocks["live" if self.show_provenance else "stream"] = blocks
            cursor = QTextCursor(doc)
            cursor.setPosition(self._stream_start)
            cursor.movePosition(QTextCursor.MoveOperation.End, QTextCursor.MoveMode.KeepAnchor)
            cursor.insertHtml(self._message_html("assistant", body, [], None))
            self._stream_render_at, self._stream_render_s = time.perf_counter(), time.perf_counter() - started
        if not stream_only or self.inspection.answer is None:  # marks on older text track the edits
            self._refresh_highlight()
        if follow:
            bar.setValue(bar.maximum())

    def _stream_render_due(self, stream_only: bool) -> bool:
        """Whether a streaming update re-renders the answer now: at most a fifth of the time goes
        to rendering (a render that took 20 ms waits 80 ms before the next); the answer's end
        always renders."""
        if not stream_only:
            return True
        wait = STREAM_RENDER_SHARE_WAIT * self._stream_render_s - (time.perf_counter() - self._stream_render_at)
        if wait <= 0:
            return True
        if not self._stream_timer.isActive():  # what arrived meanwhile is shown when the wait is over
            self._stream_timer.start(int(wait * 1000) + 1)
        return False

    def _append_html(self, fragment: str) -> int:
        """Append HTML at the end of the chat in a new block; returns where it starts."""
        cursor = QTextCursor(self.chat_view.document())
        cursor.movePosition(QTextCursor.MoveOperation.End)
        if not self.chat_view.document().isEmpty():
            cursor.insertBlock()
        start = cursor.position()
        if fragment:
            cursor.insertHtml(fragment)
        return start

    def _drop_stream_region(self) -> None:
        if self._stream_start is None:
            return
        cursor = QTextCursor(self.chat_view.document())
        cursor.setPosition(max(0, self._stream_start - 1))  # and the block break before it
        cursor.movePosition(QTextCursor.MoveOperation.End, QTextCursor.MoveMode.KeepAnchor)
        cursor.removeSelectedText()
        self._stream_start = None

    def closeEvent(self, event) -> None:
        if getattr(self, "train_dialog", None) is not None:
            self.train_dialog.done(0)  # cancels training (a checkpoint is kept) and ends its thread
        if self.learner is not None:
            self.learner.close()
        self.worker_thread.shutdown()
        super().closeEvent(event)

