"""The tool loop in the window: a message's answer may call the MCP servers' tools, each call a card in
the transcript (gui/chat/tool_cards.py) that waits for the user's Approve / Deny / Always unless its
tool is always allowed; approved calls run on the worker's thread (never the UI's), their results are
kept in the conversation, and the model answers again after them, until it answers without a call,
the user presses Stop, or the calls for the message pass Settings ▸ Tools' limit.

:class:`ToolLoop` drives the Qt-free ``ToolTurns`` (core/tool_turns.py) for the window: it makes one
per message sent (Send, Regenerate), with the tools of the window's ``ToolHostQt``; the loop's
events, told on whichever thread made the change, reach the UI thread through one queued relay. While
a loop is under way the window is busy (Send waits, Stop stops the loop). What Send shows the model of
the tools is ``offered()``, which the read ahead reads too."""

from __future__ import annotations

import json
import logging

from PySide6.QtCore import QObject, QTimer, Signal, Slot

from draftscope.core.tool_turns import ToolTurns
from draftscope.gui.tool_host_qt import ToolHostQt
from draftscope.storage.settings import allow_always, tool_servers

log = logging.getLogger(__name__)

SAY_MS = 20_000  # how long a tool's news stays in the status bar
WAITING = "Waiting for your approval:"
STARTING = "MCP servers starting… the answer follows once their tools are ready"


def opened_call(reader) -> bool:
    """Whether the answer read so far is inside a call (cut there, it is neither a call nor text): a
    call's block opened, or an answer that so far is only the start of a bare call's JSON."""
    if reader is None:
        return False
    if reader._in_block:
        return True
    held = reader._text.lstrip()
    return not reader._started and not reader.calls and held.startswith(("{", "`"))


def whole_arguments(arguments: str) -> bool:
    try:
        json.loads(arguments)
    except ValueError:
        return False
    return True


class ToolLoop(QObject):
    """The window's calling loop (see the module's docstring)."""

    run_requested = Signal(object)  # ToolTurns whose approved calls the worker runs (queued to its thread)
    settings_changed = Signal()  # a tool was allowed for good: the settings (changed in place) want saving
    _relay = Signal(str, object)  # (what, its argument): the loop's events carried to the UI thread

    def __init__(self, window, host: ToolHostQt | None = None) -> None:
        """``window``: the MainWindow (its session, worker, transcript, status line and read ahead);
        ``host``: the app's ToolHostQt (the launcher's, which outlives a reload's windows); None: the
        window's own, started once its event loop runs and closed with it."""
        super().__init__(window)
        self.window, self.own_host = window, host is None
        self.host = host = host if host is not None else ToolHostQt(self)
        self.turns: ToolTurns | None = None  # the loop of the message being answered
        self.choice = "auto"  # the first answer's tool choice ("required": a call held to the grammar)
        self.busy = False  # a loop is under way: an answer written, a call asking or running
        self._running = False  # the worker runs calls
        self._offer: tuple | None = None  # (what it was made of, the tools Send shows or None)
        self._said_unusable = False
        self._stop_asked = False  # Stop pressed while an answer is written: its end settles the loop
        self._held = None  # a message's answer waiting for the servers' start (its resume)
        self._plan = None  # the first answer's plan for the tools offered (its reader reads Continue's answers)
        view = window.chat_view
        view._continuing.opens_call = self.opens_call
        view.tool_decision.connect(self.decide)
        view.live_calls = self.live_calls
        window.read_ahead.offered = self.offered  # what is read ahead is what Send sends: the tools too
        window.read_ahead.busy = self.is_busy
        self.run_requested.connect(window.worker.run_tools)
        window.worker.tools_ran.connect(self._on_ran)
        self._relay.connect(self._deliver)  # direct on the UI thread, queued from the worker's
        host.ready.connect(self._on_host_ready)
        if self.own_host:  # once the event loop runs (a timer of its own: a closed window holds nothing)
            self._start = QTimer(self, singleShot=True, interval=0)
            self._start.timeout.connect(self._start_own_host)
            self._start.start()

    def _start_own_host(self) -> None:
        self.host.apply(self.window.settings)

    # ------------------------------------------------------------------ what the model is shown

    def is_busy(self) -> bool:
        return self.busy

    def offered(self) -> list[dict] | None:
        """The tools Send shows the model now (None: none, or the model's template cannot show them):
        the same list every answer of a loop shows, so a read ahead reads the prompt Send sends."""
        tools, tokenizer = self.host.tools, self.window.session.engine.tokenizer
        made_of = (id(tools), len(tools), id(tokenizer))
        if self._offer is None or self._offer[0] != made_of:
            self._offer = (made_of, self._fitted(tools))
        return self._offer[1]

    def _fitted(self, tools: list[dict]) -> list[dict] | None:
        if not tools:
            return None
        try:
            turns = ToolTurns(self.window.session, tools, self.host.route, None)
            self._plan = turns.first
            return turns.tools or None
        except ValueError as exc:  # the model's template shows no tools: said once, answers go on without
            if not self._said_unusable:
                self._said_unusable = True
                self.window.status.say(f"The tools are not offered: {exc}", SAY_MS)
            return None

    def opens_call(self, text: str) -> bool:
        """Whether an answer's ``text`` calls a tool, or opened a call (Continue is not offered for it)."""
        if self.offered() is None or self._plan is None:
            return False
        reader = self._plan.reader()
        reader.push(text)
        return bool(reader.calls) or opened_call(reader)

    def _on_host_ready(self) -> None:
        self._offer, self._said_unusable = None, False
        if problems := self.host.problem_words():
            self.window.status.say(problems, SAY_MS)
        elif self.window.statusBar().currentMessage() == STARTING:
            self.window.statusBar().clearMessage()
        self.window.read_ahead.schedule()  # the prompt read ahead shows the tools as they are now
        if self._held is not None:  # the message sent meanwhile is answered now, with the tools
            resume, self._held, self.busy = self._held, None, False
            resume()

    def hold(self, resume) -> bool:
        """Whether a message's answer waits for the servers' start (``resume`` writes it once they are
        up, with their tools): the message is in the transcript, Stop takes it back."""
        if not self.host.starting:
            return False
        self._held, self.busy = resume, True
        self.window.status.say(STARTING, SAY_MS * 3)
        self.window._update_actions()
        return True

    def prepare(self, request) -> None:
        """A message's first request (Send, Regenerate): its loop begins with the tools offered (none:
        no loop, the answer is plain)."""
        self.turns = None
        self.window.chat_view.stream_text = None
        tools = self.offered()
        if not tools:
            return
        settings = self.window.settings
        try:
            turns = ToolTurns(
                self.window.session,
                tools,
                self.host.route,
                self._run,
                allowed=self._allowed,
                limit=settings.tool_calls_per_answer,
                choice=self.choice,
            )
            turns.prepare(request)
        except ValueError as exc:  # a grammar the tools cannot make: the answer goes on without them
            self.window.status.say(f"The tools are not offered: {exc}", SAY_MS)
            return
        for name in ("changed", "always", "done"):
            getattr(turns.events, name).connect(getattr(self, f"_heard_{name}"))
        self.turns, self.busy, self._stop_asked = turns, True, False
        self.window.chat_view.stream_text = turns.said  # calls show as cards, not as the text they are

    def _run(self, server: str, tool: str, arguments: dict, cancel) -> object:
        """One call, within Settings ▸ Tools' call timeout as it is now (read at each call)."""
        return self.host.call(server, tool, arguments, cancel, timeout_s=float(self.window.settings.tool_timeout_s))

    def _allowed(self, server: str, tool: str) -> bool:
        """Whether the settings run this tool without asking ("Always for this tool")."""
        return any(s.name == server and tool in s.always_allowed for s in tool_servers(self.window.settings))

    def live_calls(self) -> dict:
        """The calls of the loop's last answer by id (their state is newer than the history's)."""
        return {c.id: c for c in self.turns.calls} if self.turns is not None else {}

    # ------------------------------------------------------------------ the loop

    def answer_ended(self, final) -> bool:
        """An answer ended (UI thread): its calls become cards, run or wait for the user. True while
        the loop goes on (another answer is to come, or may be)."""
        turns = self.turns
        if turns is None:
            return False
        self.window.chat_view.stream_text = None
        cut = final.finish_reason in ("cancel", "error") or self._stop_asked
        if cut or final.finish_reason == "length" and opened_call(turns.reader):
            self._settle_cut(turns)  # stopped, failed, or cut inside a call: the loop ends
            self._finish()
            self.window.chat_view.render()  # what it kept (the loop's end may have come before it)
            return False
        turns.after_answer()
        self.advance()
        return self.busy

    def _settle_cut(self, turns) -> None:
        """An answer cut while written: its prose is kept, its whole calls as calls, "stopped" (never
        run); a call it was cut inside is neither a call nor text."""
        reader = turns.reader
        if reader is None:
            turns.stop()
            return
        opened = opened_call(reader)
        prose, whole = reader.content, [c for c in reader.calls if whole_arguments(c.arguments)]
        turns.finish()
        if opened:  # what finish let out of the cut call is no prose
            reader.content, reader.calls = prose.rstrip(), whole
        turns.stop()
        if opened and not whole:  # the prose alone, marked as having called (no Continue, no steps shown)
            self.window.session.keep_calls(reader.content, [])
        turns.after_answer()  # its whole calls kept "stopped"; the loop's end renders the transcript

    def advance(self) -> None:
        """What comes next: wait for the user, run the approved calls, answer again, or end."""
        turns = self.turns
        if turns is None or self._running:
            return
        states = {c.state for c in turns.calls}
        self._unsay_waiting()
        if "asking" in states:
            self.window.chat_view.render()
            waiting = ", ".join(c.label for c in turns.calls if c.state == "asking")
            self.window.status.say(f"{WAITING} {waiting}", SAY_MS)
        elif "approved" in states:
            self._running = True
            self.window.chat_view.render()
            self.run_requested.emit(turns)
        elif turns.wants_answer():
            request = self.window.session.request()
            turns.prepare(request)
            self.window.chat_view.stream_text = turns.said
            self.window._generate(request=request)
        else:
            self._finish()

    def _unsay_waiting(self) -> None:
        """The status bar no longer says a call waits once none does."""
        bar = self.window.statusBar()
        if bar.currentMessage().startswith(WAITING):
            bar.clearMessage()

    def decide(self, verb: str, call_id: str) -> None:
        """A card's link: Approve, Deny or Always for this tool."""
        turns = self.turns
        if turns is None or self._running:
            return
        if verb == "deny":
            turns.deny(call_id)
        else:
            turns.approve(call_id, always=verb == "always")
        self.advance()

    def stop(self) -> None:
        """Stop: the call running is cancelled, the calls not run are kept as stopped, no answer follows."""
        if self._held is not None:  # the answer waited for the servers: none is written, the message
            self._held, self.busy = None, False  # goes back in the box
            self.window.statusBar().clearMessage()
            if (question := self.window.session.take_back_unanswered()) is not None:
                self.window.composer.restore(question.content, question.attachments())
            self.window.chat_view.refresh()
            self.window._update_actions()
            return
        if self.turns is None:
            return
        if self.window.chat_view.streaming:  # the answer's end (cancelled) settles it, its calls too
            self._stop_asked = True
            return
        self.turns.stop()
        self.advance()  # while calls run, their end finishes the loop

    @Slot(object)
    def _on_ran(self, turns) -> None:
        if turns is not self.turns:
            return
        self._running = False
        self.advance()

    def _finish(self) -> None:
        if self.turns is None:
            return
        self.turns, self.busy, self._running, self._stop_asked = None, False, False, False
        self.window.chat_view.stream_text = None
        self.window.chat_view.render()
        self.window._update_actions()
        self.window.read_ahead.schedule()

    def close(self) -> None:
        """The window goes: a running call is cancelled (its thread ends with the worker's); the
        window's own servers end."""
        self._held = None
        if self.turns is not None:
            self.turns.stop()
        if self.own_host:
            self.host.close()

    # ------------------------------------------------------------------ the loop's events

    def _heard_changed(self, call) -> None:
        self._tell("changed", call)

    def _heard_always(self, server: str, tool: str) -> None:
        self._tell("always", (server, tool))

    def _heard_done(self) -> None:
        self._tell("done", None)

    def _tell(self, what: str, arg) -> None:
        try:
            self._relay.emit(what, arg)
        except RuntimeError:  # the window is gone
            pass

    @Slot(str, object)
    def _deliver(self, what: str, arg) -> None:
        if what == "changed":
            if arg.state in ("failed", "timeout") and arg.result:  # the server's failure, in its words
                self.window.status.say(arg.result, SAY_MS)
            if not self.window.chat_view.streaming:
                self.window.chat_view.render()
        elif what == "always":
            kept = allow_always(self.window.settings, *arg)
            self.window.settings.mcp_servers = kept.mcp_servers  # in place: the launcher's settings too
            self.settings_changed.emit()
        elif what == "done" and not self._running:
            self._finish()
