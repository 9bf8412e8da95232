"""The calling loop, for the window and the terminal: the model answers, its answer's tool calls are
read (core/tool_calls.py), each is approved or denied by the user (or allowed ahead), the approved run,
every result kept as a ``role: tool`` message, and the model answers again until it answers without a
call, the user stops it, or the calls for one message pass their limit.

:class:`ToolTurns` holds no Qt and runs nothing on its own: the face drives it and observes
``turns.events`` (psygnal, emitted on the thread that made the change), as it observes a session's.
One answer's cycle::

    turns.prepare(request)          # the tools shown (always the same list: read ahead, prompt caching)
    ... session.stream(request) ... turns.said(text) / turns.finish()   # prose shown, calls held back
    turns.after_answer()            # the calls, kept on the answer; "approved" or "asking" the user
    turns.approve(id) / deny(id) / stop()          # from the UI thread
    turns.run_approved()            # a worker thread: runs them, keeps their results
    if turns.wants_answer(): answer again

A call is run by ``run(server, tool, arguments, cancel)``, which returns a ToolOutcome (toolbox/: ``status``
"ok" | "error" | "timeout" | "failed" | "stopped", ``text``, ``seconds``); without a ``run`` (the
terminal's ``--tools FILE``) the face gives each result itself (:meth:`ToolTurns.give`).
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any, Protocol

from psygnal import Signal, SignalGroup

from draftscope.core.tool_calls import Call, CallReader
from draftscope.core.tools import CHOICES, ToolError, ToolPlan, message_tool_fields, plan, tool_request

DENIED = "(the user denied this call)"
STOPPED = "(not run: the user stopped the tool calls)"
BAD_ARGUMENTS = "(not run: the call's arguments are not a JSON object; the answer may have been cut inside it)"
RESULT_TOKENS_MIN = 256  # the default share of a result: never less, however small the context
SLACK_TOKENS = 8  # a result read inside its message may take a few tokens more than read alone
# what a finished call's state is for each ToolOutcome status
STATE_OF = {"ok": "done", "error": "error", "timeout": "timeout", "failed": "failed", "stopped": "stopped"}
UNDONE = ("asking", "approved", "running")


class Outcome(Protocol):
    """What running a call gives back (toolbox/host.py's ToolOutcome)."""

    status: str
    text: str
    seconds: float


Run = Callable[[str, str, dict, threading.Event], Outcome]


@dataclass
class ToolCall:
    """One call the model made, as the user sees it."""

    id: str
    name: str  # as the model called it (the tool's name shown to the model)
    server: str  # "" where no server runs it (the terminal's --tools FILE)
    tool: str  # the tool's own name on its server
    arguments: dict | None  # None: not a JSON object (cut by the length limit, or written badly)
    # "asking" | "approved" | "running" | "done" | "error" | "timeout" | "failed" | "denied" | "stopped" |
    # "over_limit" | "repeated" (made already for this message) | "unknown" (no such tool)
    state: str = "asking"
    result: str = ""  # the whole result (or the error's words); the model may read less: result_tokens
    seconds: float = 0.0
    message_id: int | None = None  # the tool message it was kept as (None: in memory, or not kept yet)

    @property
    def label(self) -> str:
        """``server.tool`` (or the name alone without a server), as prompts and cards name the call."""
        return f"{self.server}.{self.tool}" if self.server else self.name

    @property
    def arguments_text(self) -> str:
        return json.dumps(self.arguments, ensure_ascii=False) if self.arguments is not None else "(not JSON)"


class ToolEvents(SignalGroup):
    """What the loop does, for the views that show it (emitted on the thread that made the change)."""

    changed = Signal(object)  # a ToolCall whose state (or result) changed
    waiting = Signal(object)  # list[ToolCall]: an answer's calls that need the user's word
    always = Signal(str, str)  # (server, tool) the user allowed for good: the face keeps it in its settings
    done = Signal()  # the loop for the user's message is over: nothing more will be asked or run


class ToolTurns:
    """One conversation's calling loop (see the module's docstring for the cycle)."""

    def __init__(
        self,
        session,
        tools: list[dict],
        route: dict[str, tuple[str, str]] | None,
        run: Run | None,
        *,
        allowed: Callable[[str, str], bool] = lambda server, tool: False,
        limit: int = 10,
        result_tokens: int | None = None,
        choice: str = "auto",
    ) -> None:
        """``tools`` in OpenAI's shape, shown to the model with every answer; ``route``: a tool's name
        -> (server, tool) (None: no servers, a call's server is "" and its tool its name); ``run``
        runs one (None: nothing is run, a face supplies results with :meth:`give`); ``allowed(server,
        tool)``: run without asking; ``limit``: calls for one user message; ``result_tokens``: the most
        of a result the model reads (None: a quarter of its context; less when the context left is
        shared among the results still to keep: ``session.room_left``); ``choice``: "auto", "required",
        "none" or a tool's name (the first answer to each message held to it). ValueError in words when
        the tools or the choice are malformed, or the model's template cannot show it tools."""
        self.session, self.route, self.run, self.allowed = session, route, run, allowed
        self.limit, self.choice = limit, choice
        self.events = ToolEvents()
        self.first, self.after = _plans(tools, choice, session.engine.tokenizer)
        context = session.engine.max_context
        self.result_tokens = result_tokens if result_tokens is not None else max(RESULT_TOKENS_MIN, context // 4)
        self.calls: list[ToolCall] = []  # the last answer's
        self.reader: CallReader | None = None
        self._lock = threading.RLock()  # the UI thread decides while a worker runs
        self._keep_lock = threading.Lock()  # results written one at a time, in call order, by either thread
        self._cancel = threading.Event()
        self._always: set[tuple[str, str]] = set()
        self._kept: set[str] = set()  # the ids of the calls whose results are kept
        self._made = 0  # calls the model made for the user's message
        self._ran: set[tuple[str, str]] = set()  # (tool, arguments) called for it and answered (done or error)
        self._asked: set[tuple[str, str]] = set()  # (tool, arguments) of the last answer's calls
        self._plain_next = False  # the next answer is shown no tools: a repeat or the limit said enough
        self._over = 0  # answers to it whose calls passed the limit
        self._stopped = self._running = self._over_now = self._ended = False
        self._finished = True

    @property
    def tools(self) -> list[dict]:
        """The tools every answer is shown ([]: none): the read ahead's request shows the same."""
        return list(self.first.request.tools) if self.first is not None else []

    @property
    def holds_first(self) -> bool:
        """Whether the first answer to a message is held to a call's grammar (a required call)."""
        return self.first is not None and self.first.grammar is not None

    # ------------------------------------------------------------------ one answer

    def prepare(self, request) -> None:
        """``request`` shows the tools; the first answer to a user message (its last message is the
        user's, not a tool's result) starts the loop afresh and is held to a required call's grammar.
        Every piece of the answer's text then goes through :meth:`said` (the calls are read from it).
        ValueError when that grammar and the request's own would both hold the answer."""
        follow_up = bool(request.messages) and request.messages[-1].get("role") == "tool"
        fitted: ToolPlan | None = self.after if follow_up else self.first
        if not follow_up:
            self._start_message()
        elif self._plain_next:  # small models call again and again: this answer can only be words
            fitted = None
        if fitted is None:
            self.reader = None
            return
        request.tools = fitted.request.tools
        if fitted.grammar is not None:
            if request.grammar is not None:
                raise ValueError("a JSON schema and a required tool call cannot both hold the answer")
            request.grammar = fitted.grammar
        self.reader, self._finished, self.calls = fitted.reader(), False, []

    def _start_message(self) -> None:
        with self._lock:
            self._made = self._over = 0
            self._stopped = self._ended = self._plain_next = False
            self._ran = set()
            self._cancel = threading.Event()
            self._kept, self.calls = set(), []

    def said(self, text: str) -> str:
        """Of the answer's new ``text``, what is prose (calls are held back: they show as calls)."""
        return _content(self.reader.push(text)) if self.reader is not None else text

    def finish(self) -> str:
        """The prose the answer's end lets out (held back while it might have opened a call)."""
        self._finished = True
        return _content(self.reader.finish()) if self.reader is not None else ""

    def after_answer(self) -> list[ToolCall]:
        """The finished answer's calls (none: the loop is over, ``done``). The answer is kept as its
        prose and its calls (``session.keep_calls``); each call is "approved" (allowed, or always
        allowed), "asking" (``waiting`` tells the face), or already settled: "unknown" (no such
        tool), "error" (arguments not JSON), "over_limit", "stopped" (Stop came first)."""
        if not self._finished:
            self.finish()
        made = self.reader.calls if self.reader is not None else []
        if not made:
            self.calls = []
            self._end()
            return []
        self.session.keep_calls(self.reader.content if self.reader else "", _template_calls(made))
        with self._lock:
            self._asked = set()
            self.calls = [self._first_state(self._call(c), i) for i, c in enumerate(made)]
            self._made += len(made)
            self._over_now = any(c.state == "over_limit" for c in self.calls)
            self._over += self._over_now
            self._plain_next = any(c.state in ("over_limit", "repeated") for c in self.calls)
        for call in self.calls:
            self.events.changed.emit(call)
        asking = [c for c in self.calls if c.state == "asking"]
        if asking:
            self.events.waiting.emit(asking)
        elif self.run is None or not any(c.state == "approved" for c in self.calls):
            self._keep_settled()  # nothing to run: what is settled is kept now
        return list(self.calls)

    def _call(self, made: Call) -> ToolCall:
        server, tool = ("", made.name) if self.route is None else self.route.get(made.name, ("", made.name))
        return ToolCall(made.id, made.name, server, tool, _arguments(made.arguments))

    def _first_state(self, call: ToolCall, i: int) -> ToolCall:
        if self._stopped:
            return _settle(call, "stopped", STOPPED)
        if self._made + i >= self.limit:
            words = f"(not run: the limit of {self.limit} tool calls for one message was reached; answer without it)"
            return _settle(call, "over_limit", words)
        if self.route is not None and call.name not in self.route:
            return _settle(call, "unknown", f"(not run: there is no tool named {call.name!r})")
        if call.arguments is None:
            return _settle(call, "error", BAD_ARGUMENTS)
        key = _key(call)
        if key in self._ran or key in self._asked:  # a failed, timed out or denied call may be made again
            return _settle(call, "repeated", REPEATED)
        self._asked.add(key)
        if (call.server, call.tool) in self._always or self.allowed(call.server, call.tool):
            call.state = "approved"
        return call

    # ------------------------------------------------------------------ the user's word

    def approve(self, call_id: str, *, always: bool = False) -> None:
        """The user lets the call run; ``always``: every call of this tool too, this answer's and the
        later ones (``always`` tells the face, to keep it)."""
        with self._lock:
            call = self._asking(call_id)
            if call is None:
                return
            key = (call.server, call.tool)
            if always:
                self._always.add(key)
            approved = [
                c for c in self.calls if c.state == "asking" and (c is call or always and (c.server, c.tool) == key)
            ]
            for each in approved:
                each.state = "approved"
        if always:
            self.events.always.emit(*key)
        for each in approved:
            self.events.changed.emit(each)

    def deny(self, call_id: str) -> None:
        """The call is not run; the model reads that the user denied it."""
        with self._lock:
            call = self._asking(call_id)
            if call is None:
                return
            _settle(call, "denied", DENIED)
        self.events.changed.emit(call)
        if self.ready() and not any(c.state == "approved" for c in self.calls):
            self._keep_settled()  # nothing left to run: the denials are kept at once

    def _asking(self, call_id: str) -> ToolCall | None:
        return next((c for c in self.calls if c.id == call_id and c.state == "asking"), None)

    def give(self, call_id: str, text: str) -> None:
        """A result the face supplies itself (no ``run``: the terminal's ``--tools FILE``), kept."""
        with self._lock:
            call = next((c for c in self.calls if c.id == call_id and c.state in UNDONE), None)
            if call is None:
                return
            _settle(call, "done", text)
            self._ran.add(_key(call))
        self.events.changed.emit(call)
        self._keep_settled()

    def stop(self) -> None:
        """Stop the loop: the call running is cancelled, every call not yet run is "stopped" (the model
        reads so when it next answers), and no answer follows."""
        with self._lock:
            self._stopped = True
            self._cancel.set()
            stopped = [_settle(c, "stopped", STOPPED) for c in self.calls if c.state in ("asking", "approved")]
            running = self._running
        for call in stopped:
            self.events.changed.emit(call)
        if not running:  # else run_approved keeps them when its call returns
            self._keep_settled()

    # ------------------------------------------------------------------ running

    def ready(self) -> bool:
        """Whether no call waits for the user and some result is still to be run or kept."""
        with self._lock:
            return not any(c.state == "asking" for c in self.calls) and any(c.id not in self._kept for c in self.calls)

    def run_approved(self) -> None:
        """Run the approved calls in order (blocking: a worker thread, never the UI's), each result kept
        as a tool message as it comes; stops at a call still asking (run again once it is decided)."""
        with self._lock:
            self._running = True
        try:
            for call in list(self.calls):
                with self._lock:
                    if call.state == "asking":
                        break
                    runs = call.state == "approved" and self.run is not None
                    if runs:
                        call.state = "running"
                if runs:
                    self.events.changed.emit(call)
                    self._run_one(call)
                if call.state in UNDONE:  # approved, with nothing to run it: the face gives its result
                    break
                self._keep(call)
        finally:
            with self._lock:
                self._running = False
            if self._stopped:
                self._keep_settled()
        self._end_if_over()

    def _run_one(self, call: ToolCall) -> None:
        assert self.run is not None and call.arguments is not None
        try:
            outcome = self.run(call.server, call.tool, call.arguments, self._cancel)
            state, text, seconds = STATE_OF.get(outcome.status, "failed"), outcome.text, outcome.seconds
        except Exception as exc:  # a run that raises is a failed call, never a broken loop
            state, text, seconds = "failed", f"{call.label} failed: {exc}", 0.0
        with self._lock:
            if self._stopped and state != "done":
                state, text = "stopped", STOPPED + (f" {text}" if text else "")
            call.state, call.result, call.seconds = state, text, seconds
            if state in ("done", "error"):  # answered: the same call again would read the same
                self._ran.add(_key(call))
        self.events.changed.emit(call)

    def _keep_settled(self) -> None:
        """Keep, in call order, the results settled and not yet kept, up to the first call undone;
        ``done`` when that was the last and no answer follows."""
        for call in list(self.calls):
            with self._lock:
                if call.state in UNDONE:
                    return
            self._keep(call)
        self._end_if_over()

    def _end_if_over(self) -> None:
        with self._lock:
            over = all(c.id in self._kept for c in self.calls) and not self.wants_answer()
        if over:
            self._end()

    def _keep(self, call: ToolCall) -> None:
        """A settled call's result as a tool message (and those of the settled calls before it not kept
        yet: the UI thread and the worker may both keep, the results stay in call order)."""
        kept: list[ToolCall] = []
        with self._keep_lock:
            for each in list(self.calls):
                with self._lock:
                    if each.state in UNDONE:
                        break
                    if each.id in self._kept:
                        continue
                    self._kept.add(each.id)
                self._write(each)
                kept.append(each)
                if each is call:
                    break
        for each in kept:
            self.events.changed.emit(each)

    def _write(self, call: ToolCall) -> None:
        """The result said as a tool message; the model reads its share of the context left."""
        fields: dict[str, Any] = {"tool_call_id": call.id, "name": call.name, "server": call.server}
        fields.update(status=_status(call.state), chars=len(call.result), seconds=round(call.seconds, 3))
        with self._lock:  # this result and those after it share the room (their marks counted)
            waiting = [call] + [c for c in self.calls if c.id not in self._kept]
        then = [{"role": "tool", "content": "", "tool_call_id": c.id, "name": c.name} for c in waiting]
        room = self.session.room_left(self.tools or None, then) // len(then)
        kept = self.session.say(self.model_text(call.result, room=room), role="tool", tool_fields=fields)
        call.message_id = kept if isinstance(kept, int) else _last_id(self.session)

    def model_text(self, text: str, *, room: int | None = None) -> str:
        """``text`` as the model reads it, with a note of what was cut: at most ``result_tokens``
        tokens, and at most ``room`` (its share of the context left)."""
        most = self.result_tokens if room is None else max(0, min(self.result_tokens, room - SLACK_TOKENS))
        return cut_to_tokens(text, most, self.session.count_tokens)

    def wants_answer(self) -> bool:
        """Whether the model answers again: every call of its last answer settled and kept, no Stop, and
        the limit not passed twice (once past it, the model answers once more without the calls)."""
        with self._lock:
            if self._stopped or not self.calls or self._over > 1:
                return False
            return all(c.id in self._kept for c in self.calls)

    def _end(self) -> None:
        with self._lock:
            ended, self._ended = self._ended, True
        if not ended:
            self.events.done.emit()


def _plans(tools: list[dict], choice: str, tokenizer: Any) -> tuple[ToolPlan | None, ToolPlan | None]:
    """The plan for the first answer to a message (``choice``) and for the answers after results
    (the model free: held to a call each time, it would call for ever); (None, None): no tools."""
    named = None if choice in CHOICES else {"type": "function", "function": {"name": choice}}
    try:
        request = tool_request({"tools": tools, "tool_choice": named or choice}) if tools else None
        first = plan(request, tokenizer)
        if request is None or first is None:
            return None, None
        return first, plan(replace(request, choice="auto", named=None), tokenizer)
    except ToolError as exc:
        raise ValueError(str(exc)) from exc


def cut_to_tokens(text: str, tokens: int, count: Callable[[str], int]) -> str:
    """``text`` cut to about ``tokens`` tokens (by ``count``), its note saying how much was left out
    within them; whole when it fits. A long text is measured on a sample, not tokenized whole (a 1 MB
    result)."""
    sample = text[: tokens * 8]  # a token is rarely more than 8 characters: enough to measure by
    used = count(sample)
    if used <= tokens and len(sample) == len(text):
        return text
    room = max(0, tokens - count(_cut_note(len(text), len(text))))
    keep = int(len(sample) * room / max(used, 1) * 0.95)
    while keep > 0 and count(text[:keep]) > room:
        keep = int(keep * 0.9)
    return text[:keep] + _cut_note(len(text), keep)


def _cut_note(size: int, keep: int) -> str:
    return f"\n\n[cut: the result is {size:,} characters; the first {keep:,} are shown, {size - keep:,} left out]"


REPEATED = "(not run again: this call was made already with these arguments; its result is above)"


def _key(call: ToolCall) -> tuple[str, str]:
    """What makes two calls the same call: the tool and its arguments."""
    return call.name, json.dumps(call.arguments, sort_keys=True)


def _settle(call: ToolCall, state: str, text: str) -> ToolCall:
    call.state, call.result = state, text
    return call


def _status(state: str) -> str:
    """A settled call's status as the history keeps it (ToolOutcome's words, or the loop's)."""
    return "ok" if state == "done" else state


def _content(deltas: list[dict]) -> str:
    return "".join(d.get("content", "") for d in deltas)


def _arguments(text: str) -> dict | None:
    try:
        value = json.loads(text or "{}")
    except ValueError:
        return None
    return value if isinstance(value, dict) else None


def _template_calls(calls: list[Call]) -> list[dict]:
    """The calls as the chat template reads an answer's ``tool_calls`` (arguments as objects)."""
    return message_tool_fields({"tool_calls": [c.as_dict() for c in calls]}, 0, "assistant")["tool_calls"]


def _last_id(session) -> int | None:
    turns = session.turns()
    return turns[-1].id if turns else None
