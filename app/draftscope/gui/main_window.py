"""The main window, a shell around its parts: the conversations (left), the model switcher, chat
and composer (centre), the inspection docks and the status line. It turns the parts' signals into
the turn cycle (``ChatSession``, Qt-free), runs answers on the worker's thread and opens the
dialogs. The parts observe the session's and the runtime's events through ``answer_signals``."""

from __future__ import annotations

import time

from PySide6.QtCore import Qt, Signal
from PySide6.QtWidgets import (
    QApplication,
    QLabel,
    QMainWindow,
    QMessageBox,
    QSplitter,
    QVBoxLayout,
    QWidget,
)

from draftscope.core.session import ChatSession
from draftscope.core.words import speedup_stale
from draftscope.documents.extract import Attachment
from draftscope.drafter_kinds import switched_on
from draftscope.engine.events import step_from_dict
from draftscope.engine.sampling import fresh_seed
from draftscope.gui.chat.composer import Composer
from draftscope.gui.chat.continuing import continue_answer
from draftscope.gui.chat.conversation_list import ConversationList
from draftscope.gui.chat.read_ahead import ReadAhead
from draftscope.gui.chat.reading import ReadingIndicator
from draftscope.gui.chat.render import provenance_legend
from draftscope.gui.chat.tool_turns_qt import ToolLoop
from draftscope.gui.chat.versions import page_to
from draftscope.gui.chat.view import ChatTranscript
from draftscope.gui.chat.welcome import use_example
from draftscope.gui.dialogs.help import add_help_menu
from draftscope.gui.dialogs.race import RaceDialog
from draftscope.gui.dialogs.train_head_start import open_for_window
from draftscope.gui.generation_worker import GenerationWorker, WorkerThread
from draftscope.gui.model_switcher import ModelSwitcher
from draftscope.gui.panels.docks import build_docks
from draftscope.gui.session_qt import SessionSignals
from draftscope.gui.status_bar import StatusLine
from draftscope.gui.window_menus import build_menus
from draftscope.gui.wizard.wizard import DatastoreWizard

# Plain decoding speed drifts with the machine's load and clocks: measure it again when the last
# figure is older than this, after an answer (never during one).
BASELINE_MAX_AGE_S = 600


class MainWindow(QMainWindow):
    request_generation = Signal(object)
    request_baseline = Signal()  # measure plain decoding speed again (on the worker thread)
    settings_requested = Signal()
    model_chosen = Signal(str)  # another model from the switcher: load it (the launcher reloads)
    datastore_chosen = Signal(str)  # a datastore built in the wizard, to be used from now on
    answer_selected = Signal(int, list)  # a stored answer picked for inspection: (message id, its StepEvents)

    def __init__(self, runtime, history, *, code_style: str = "default", dark: bool = False, tool_host=None) -> None:
        """``runtime``: the model and what drafts (core/runtime.py); ``tool_host``: gui/tool_host_qt.py's."""
        super().__init__()
        self.runtime = runtime
        engine = self.engine = runtime.engine
        self.history = history
        # The conversation's turn cycle (Qt-free, shared with the terminal and the server); the
        # window's settings and drafters are the runtime's, its conversation the session's.
        self.session = ChatSession(runtime, history=history)
        self.answer_signals = SessionSignals(self.session, runtime, self)
        self.error_box: QMessageBox | None = None
        self.setWindowTitle("Draftscope")
        self.resize(1100, 720)

        self.conversations = ConversationList(history)
        self.conversation_list = self.conversations.list
        self.conversations.chosen.connect(self._on_conversation_chosen)
        self.conversations.new_requested.connect(self.new_conversation)
        self.conversations.deleted.connect(self._on_conversation_deleted)
        self.chat_view = ChatTranscript(self.session, code_style=code_style, dark=dark)
        self.chat_view.action_requested.connect(self._on_action)
        self.chat_view.step_clicked.connect(self.select_step)
        self.reading = ReadingIndicator(self.chat_view, self.answer_signals)  # a long message's reading
        self.composer = self._build_composer()
        self.chat_input = self.composer.chat_input
        self.read_ahead = ReadAhead(self.session, self.composer, self.chat_view, self)  # the prompt read before Send
        self.provenance_legend = QLabel(objectName="provenanceLegend", visible=False, wordWrap=True)
        self.model_switcher = ModelSwitcher(runtime.settings.model, runtime.settings.recent_models)
        self.model_switcher.chosen.connect(self.model_chosen)
        self.model_switcher.other_requested.connect(self.settings_requested)
        self._lay_out()

        build_menus(self)  # File, Chat and View
        add_help_menu(self)  # shortcuts (read off the actions) and About
        self.conversations.menu_actions = [self.rename_action, self.export_action, None, self.delete_action]
        build_docks(self, engine)  # the inspection panels and the documents
        self.status = StatusLine(self.statusBar(), engine)
        self.status.show_baseline(engine.baseline_tokens_per_second)
        self._connect_views()

        self.worker = GenerationWorker(self.session)
        self.worker_thread = WorkerThread(self.worker)
        self.request_generation.connect(self.worker.generate)  # queued: runs on the worker thread
        self.worker.baseline_measured.connect(self._on_baseline)
        self.worker.baseline_progress.connect(self.status.show_measuring)
        self.request_baseline.connect(self.worker.measure_baseline)
        self.tool_loop = ToolLoop(self, tool_host)  # an answer's tool calls: cards, approval, the calls run
        # Quitting the app without closing the window (Ctrl+Q, a session logout) must still end the
        # worker thread before Qt destroys it. A method, never a lambda: a lambda's closure would
        # keep the runtime (the model) alive after a reload replaced the window (tested).
        QApplication.instance().aboutToQuit.connect(self._end_threads)

        # The model's own answers feed its learned datastore, indexed on the runtime's background
        # thread; its news reaches this thread through answer_signals.
        runtime.start_learning()
        self.answer_signals.learned.connect(lambda _stats: self.drafters_changed())  # the first index adds a drafter
        self.drafters_changed()
        self.conversations.reload()
        self._update_actions()

    def _lay_out(self) -> None:
        """The conversations on the left; the switcher, legend, chat and composer in the centre."""
        centre = QWidget()
        centre_layout = QVBoxLayout(centre)
        for part in (self.model_switcher, self.provenance_legend, self.chat_view, self.composer):
            centre_layout.addWidget(part, 1 if part is self.chat_view else 0)
        splitter = QSplitter()
        for part in (self.conversations, centre):
            splitter.addWidget(part)
        splitter.setStretchFactor(1, 1)
        splitter.setSizes([240, 860])
        self.setCentralWidget(splitter)

    def _connect_views(self) -> None:
        """What the parts say reaches the status line; the answers' events reach the views."""
        self.chat_view.said.connect(lambda text: self.status.say(text, 3000))
        self.conversations.said.connect(lambda text: self.status.say(text, 8000))
        signals = self.answer_signals
        signals.notice.connect(lambda text: self.status.say(text, 20000))
        signals.answer_started.connect(lambda: self.inspection.begin_live(self.engine.baseline_tokens_per_second))
        signals.steps.connect(self._on_steps)
        signals.answer_ended.connect(self._on_answer_ended)
        signals.answer_failed.connect(self._on_failed)

    def _build_composer(self) -> Composer:
        composer = Composer()
        composer.send_requested.connect(self.send)
        composer.stop_requested.connect(self.stop)
        composer.regenerate_requested.connect(lambda: self.regenerate())
        composer.edit_last_requested.connect(self.edit_last)
        composer.attach_failed.connect(lambda text: self.warn(text, "attachErrorDialog"))
        composer.chips.count_tokens = self.session.count_tokens  # chips say their size in the model's tokens
        composer.drops.install(self.chat_view)  # files dropped on the chat attach too
        return composer

    # ------------------------------------------------------------------ state

    @property
    def settings(self):
        return self.runtime.settings

    @property
    def conversation_id(self) -> int | None:
        return self.session.conversation_id

    @property
    def streaming(self) -> bool:  # an answer being written, or a tool loop under way
        return self.chat_view.streaming or self.tool_loop.busy

    @property
    def editing_message_id(self) -> int | None:
        return self.composer.editing_message_id

    def _update_actions(self) -> None:
        streaming = self.streaming
        has_messages = self.conversation_id is not None and not streaming
        self.composer.set_state(streaming=streaming, has_messages=has_messages)
        self.stop_action.setEnabled(streaming)
        for act in (
            self.regenerate_action,
            self.edit_action,
            self.rename_action,
            self.delete_action,
            self.export_action,
        ):
            act.setEnabled(has_messages)

    # ------------------------------------------------------------------ conversations

    def show_conversation(self, conversation_id: int | None) -> None:
        """Open a conversation (None, or one that no longer exists: a new one)."""
        if conversation_id is not None and not self.history.conversation(conversation_id):
            conversation_id = None
        self.session.conversation_id = conversation_id
        self.documents_panel.show_conversation(conversation_id)
        self.inspection.show_latest(self.history, conversation_id, self.engine.baseline_tokens_per_second)
        self.composer.end_edit()
        self.conversations.select(conversation_id)
        self.chat_view.refresh()
        self._update_actions()
        self.read_ahead.schedule(fresh=True)

    def new_conversation(self) -> None:
        if not self.streaming:
            self.show_conversation(None)

    def _on_conversation_chosen(self, conversation_id: int) -> None:
        if self.streaming:  # the answer being written belongs to the open conversation
            self.conversations.select(self.conversation_id)
            return
        self.show_conversation(conversation_id)

    def _on_conversation_deleted(self, conversation_id: int) -> None:
        if conversation_id == self.conversation_id:
            self.show_conversation(None)

    def served_answer_stored(self, conversation_id: int) -> None:
        """A served answer was kept: it appears in the conversation list (the open one stays)."""
        self.conversations.reload()

    # ------------------------------------------------------------------ sending, regenerate, edit

    def send(self) -> None:
        text, files = self.composer.text(), self.composer.attachments
        if not (text or files) or self.streaming or self.documents_panel.holds_send():  # folder: wait for it
            return
        try:  # how the model reads the files: whole, or the passages for the question
            sent = self.session.outgoing(text, files, replacing=self.editing_message_id).sent
        except ValueError as exc:  # they cannot fit: the message and its files stay in the box
            self.warn(str(exc), "attachErrorDialog")
            return
        if self.editing_message_id is not None:  # edit-and-resend: drop the old message and its answer
            self.session.rewind(self.editing_message_id)
            self.composer.end_edit()
        self.session.say(text, files=sent)
        self.documents_panel.conversation_started(self.conversation_id)
        self.composer.clear()
        self.conversations.select(self.conversation_id)
        self._generate()

    def regenerate(self, message_id: int | None = None) -> None:
        """Answer again from an assistant message (default: the last one); it stays as a version
        of the answer, with what followed it (paged with the answer's "‹ ›")."""
        if self.streaming or self.conversation_id is None or not self.session.rewind(message_id):
            return
        self.composer.end_edit()
        self._generate(new_seed=True)

    def edit_last(self) -> None:
        messages = self.history.messages(self.conversation_id) if self.conversation_id is not None else []
        users = [m for m in messages if m.role == "user"]
        if users:
            self.edit(users[-1].id)

    def edit(self, message_id: int) -> None:
        """Put a user message back in the input; sending replaces it and everything after it."""
        if self.streaming or self.conversation_id is None:
            return
        message = next((m for m in self.history.messages(self.conversation_id) if m.id == message_id), None)
        if message is not None and message.role == "user":
            self.composer.begin_edit(
                message_id, message.content, [Attachment(f["name"], f["text"], f["kind"]) for f in message.files]
            )

    def _on_action(self, verb: str, message_id: int) -> None:
        act = {
            "regenerate": self.regenerate,
            "edit": self.edit,
            "inspect": self.inspect,
            "version": lambda i: page_to(self, i),
            "continue": lambda i: continue_answer(self, i),  # a cut answer written on (gui/chat/continuing.py)
            "example": lambda i: use_example(self, i),  # the welcome page's example prompts
        }.get(verb)
        if act is not None:  # an answer's own Markdown may hold links of any verb: only ours act
            act(message_id)

    def _generate(self, *, new_seed: bool = False, request=None) -> None:
        """``new_seed``: not the settings' fixed seed (Regenerate); ``request``: made already (Continue's)."""
        if request is None and self.tool_loop.hold(lambda: self._generate(new_seed=new_seed)):
            return  # the MCP servers are starting: the answer waits for their tools
        if request is None:  # a message's first answer: its tool loop begins (gui/chat/tool_turns_qt.py)
            request = self.session.request(sampling=self.session.sampling(seed=fresh_seed()) if new_seed else None)
            self.tool_loop.prepare(request)
        self.read_ahead.cancel()  # never queued behind it: it ends at its next chunk
        self.chat_view.begin_stream()
        self._update_actions()
        self.request_generation.emit(request)

    def stop(self) -> None:
        self.worker.stop()
        self.tool_loop.stop()

    def _on_steps(self, events: list) -> None:
        self.inspection.add_live(events)
        self.status.show_step(events[-1])
        self.chat_view.add_steps(events)

    def _on_answer_ended(self, final, message_id: int | None = None) -> None:
        # kept in the history by the worker's answer loop (ChatSession.stream)
        if final.finish_reason == "error":
            self._on_failed(final.error or "generation failed")
            return
        if message_id is not None:
            self.inspection.finish_live(message_id)
        self._end_stream()
        if self.tool_loop.answer_ended(final):  # it called tools: they run, or wait for the user
            return
        measured = self.engine.baseline_measured_at
        if measured is not None and (
            time.monotonic() - measured > BASELINE_MAX_AGE_S
            or speedup_stale(final.stats.speedup_estimate, final.stats.tau)
            or not self.engine.plain_rate.knows((final.stats.prompt_tokens or 0) + final.stats.tokens)
        ):  # plain decoding measured again: old, or never at this conversation's length
            self.measure_baseline()

    def _on_failed(self, message: str) -> None:
        self._end_stream()
        self.tool_loop.stop()  # after the stream's end: a loop waits for the answer's end while it streams
        if (question := self.session.take_back_unanswered()) is not None:  # back in the box, files and all:
            self.composer.restore(question.content, question.attachments())  # nothing typed is lost, and
            self.chat_view.refresh()  # the next message is not refused for it again
        self.warn(f"The answer failed: {message}", "answerErrorDialog")

    def warn(self, text: str, name: str = "warningDialog") -> None:
        # window-modal and opened, not exec'd: the error never stalls the event loop
        box = QMessageBox(QMessageBox.Icon.Warning, "Draftscope", text, QMessageBox.StandardButton.Ok, self)
        box.setObjectName(name)
        box.setAttribute(Qt.WidgetAttribute.WA_DeleteOnClose)
        box.open()
        self.error_box = box

    def _end_stream(self) -> None:
        self.inspection.flush()
        self.chat_view.end_stream()
        self._update_actions()
        self.read_ahead.schedule()

    # ------------------------------------------------------------------ inspection

    def inspect(self, message_id: int) -> None:
        """Show a stored answer's steps in the inspection panels (and open them)."""
        steps = [step_from_dict(d) for d in self.history.steps(message_id)]
        if not steps:
            self.status.say("No drafting steps were kept for this answer")
            return
        self.show_panels()
        self.answer_selected.emit(message_id, steps)

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

    def show_panels(self) -> None:
        for dock in self.docks.values():
            dock.show()
        # the chat keeps the most room: side panels a third of the width, the table a quarter of the height
        self.centralWidget().setSizes([180, max(1, self.centralWidget().width() - 180)])
        self.resizeDocks([self.docks["trieDock"]], [self.width() // 3], Qt.Orientation.Horizontal)
        self.resizeDocks([self.docks["draftsDock"]], [self.height() // 4], Qt.Orientation.Vertical)

    def set_show_provenance(self, on: bool) -> None:
        """Answers with each token coloured by its source (still rendered as Markdown), hover for
        its step, click to select it in the panels."""
        self.provenance_legend.setText(provenance_legend(dark=self.chat_view.renderer.dark))
        self.provenance_legend.setVisible(on)
        self.chat_view.set_show_provenance(on)

    def set_code_style(self, code_style: str, *, dark: bool) -> None:  # and the drafter legend's colours
        self.chat_view.set_code_style(code_style, dark=dark)
        self.provenance_legend.setText(provenance_legend(dark=dark))

    def _baseline_of(self, message_id: int) -> float | None:  # a stored answer's plain figure (older: today's)
        messages = self.history.messages(self.conversation_id) if self.conversation_id is not None else []
        kept = next((m.stats for m in messages if m.id == message_id and m.stats), {})
        return kept.get("baseline_tokens_per_second") or self.engine.baseline_tokens_per_second

    def measure_baseline(self) -> None:
        self.status.show_baseline(None, measuring=True)
        self.request_baseline.emit()

    def _on_baseline(self, rate: float) -> None:
        self.status.show_baseline(rate)
        self.inspection.set_baseline(rate)

    # ------------------------------------------------------------------ drafters and what they learn

    def make_drafters(self) -> list:
        return self.runtime.make_drafters()

    def drafters_changed(self) -> None:
        """The runtime's drafters changed (settings, a new head, the learned answers): show them."""
        self.status.show_datastore(self.runtime.datastore_label)
        self.status.show_drafters([d.name for d in self.make_drafters()])
        self.status.show_learned(self.runtime.learned_text(brief=True), self.runtime.learned_text())
        self.forget_action.setEnabled(self.learner is not None and self.learner.store.stats().answers > 0)

    @property
    def learner(self):
        return self.runtime.learner

    def forget_learned(self, *, confirm: bool = True) -> None:
        if self.learner is None:
            return
        if confirm:
            answer = QMessageBox.question(
                self,
                "Draftscope",
                f"Forget the {self.learner.store.stats().answers:,} answers this model has "
                "learned from? Drafts then come from the datastore and the conversation only.",
            )
            if answer != QMessageBox.StandardButton.Yes:
                return
        self.learner.clear()

    def show_server(self, url: str | None) -> None:
        """The local server's address in the status bar while it runs (Settings ▸ Server), and how
        many answers its forwards hold."""
        self.status.show_server(url, self.runtime.engine.stepper if self.runtime.engine.stepper.size > 1 else None)

    # ------------------------------------------------------------------ dialogs

    def open_datastore_wizard(self) -> None:
        """Build a datastore from the user's files with the current model's tokenizer, or from the
        model's own answers (the loaded model is handed over for that)."""
        tokenizer = self.engine.tokenizer
        self.datastore_wizard = DatastoreWizard(
            self.settings.model,
            tokenizer_loader=lambda _spec: tokenizer,
            model=getattr(self.engine, "model", None),
            parent=self,
        )
        self.datastore_wizard.datastore_built.connect(
            lambda path, use_now: self.datastore_chosen.emit(path) if use_now else None
        )
        self.datastore_wizard.open()

    def open_train_dialog(self, *, options_overrides: dict | None = None) -> None:
        """Train a recurrent head for the loaded model (train_head_start.open_for_window)."""
        open_for_window(self, options_overrides)

    def use_trained_head(self, path: str) -> None:
        """Draft with the head just trained from the next answer on."""
        problem = self.runtime.use_head(path)
        if problem:
            self.status.say(problem, 15000)
            return
        self.drafters_changed()
        notes = list(self.runtime.drafter_setup.notes)
        on = switched_on(self.settings.drafters, "recurrent")
        self.status.say(
            " · ".join(
                notes
                + [
                    "The recurrent drafter drafts from the next answer on"
                    if on
                    else "A recurrent head was trained; Settings ▸ Drafting switches the recurrent drafter on"
                ]
            ),
            15000,
        )

    def open_race(self) -> None:
        """The prompt in the input (or the last question) answered plain and speculatively."""
        if self.streaming:
            return
        prompt = self.composer.text()
        if not prompt and self.conversation_id is not None:
            users = [m for m in self.history.messages(self.conversation_id) if m.role == "user"]
            prompt = users[-1].content if users else ""
        self.race_dialog = RaceDialog(self.runtime, self)
        self.race_dialog.setWindowModality(Qt.WindowModality.WindowModal)  # one model, one answer at a time
        self.race_dialog.prompt.setPlainText(prompt)
        self.race_dialog.open()

    def closeEvent(self, event) -> None:
        if getattr(self, "train_dialog", None) is not None:
            self.train_dialog.done(0)  # cancels training (a checkpoint is kept) and ends its thread
        self._end_threads()
        super().closeEvent(event)

    def _end_threads(self) -> None:
        self.read_ahead.close()
        self.tool_loop.close()  # a call running is cancelled; the window's own tool servers end
        self.documents_panel.close_jobs()
        self.composer.reader.close()  # a file being read: its reader is ended
        self.worker_thread.shutdown()
        self.answer_signals.disconnect_all()
        self.runtime.close()
        self.runtime.engine.save_caches()  # quitting: the next start restores the conversations
