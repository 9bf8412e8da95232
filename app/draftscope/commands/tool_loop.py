"""The calling loop at the terminal (core/tool_turns.py's ToolTurns, driven by ``draftscope chat`` and
``draftscope generate``): after an answer that called tools, each call is decided — its result typed by
the user (``--tools FILE``), approved at a prompt (``chat --mcp``: "Run files.read_note {...}? [y]es /
[n]o / [a]lways"), or run when approved ahead and else refused in words (``generate --mcp``) — the
approved run (Ctrl-C stops them), each outcome said on stderr, and the model answers again."""

from __future__ import annotations

import signal
import sys
import threading
from collections.abc import Callable

from draftscope.core.tool_turns import ToolCall, ToolTurns

NO_RESULT = "(no result)"
ASK = "Run {label} {arguments}? [y]es / [n]o / [a]lways "
REFUSED = "draftscope: {label} {arguments} not run: add --approve-tools to run the --mcp servers' tools"
RESULT_LINE_CHARS = 100  # of a result's first line, said on stderr
# how a call's end is said (the call's own words follow for those that were not run)
ENDS = {"done": "done", "error": "error", "timeout": "timed out", "failed": "failed", "stopped": "stopped"}


def converse(turns: ToolTurns, final, answer_again: Callable[[], object], *, how: str) -> None:
    """After the answer ``final``: while its answers call tools, each call decided as ``how`` says
    ("type": the user types its result; "ask": the user approves it; "refuse": calls not approved ahead
    are denied), the approved run, and ``answer_again()`` (its FinalEvent, None when it failed) asked
    for the model's next answer. An answer Ctrl-C stopped ends the loop, its calls not run."""
    said = _Said(how)
    turns.events.changed.connect(said.changed)
    try:
        while final is not None:
            if final.finish_reason == "cancel":
                turns.stop()  # its calls kept on the answer, as stopped
            calls = turns.after_answer()
            if not calls or not _decided(turns, calls, how):
                return
            _run_until_ctrl_c(turns)
            if not turns.wants_answer():
                return
            final = answer_again()
    finally:
        turns.events.changed.disconnect(said.changed)


def _decided(turns: ToolTurns, calls: list[ToolCall], how: str) -> bool:
    """The user's word on each call (False: they stopped, Ctrl-C or Ctrl-D, and the calls are not run)."""
    try:
        for call in calls:
            if how == "type" and call.state == "approved":
                print(f"[call] {call.name} {call.arguments_text}", flush=True)
        for call in calls:
            if call.state == "asking" and how == "refuse":
                print(REFUSED.format(label=call.label, arguments=call.arguments_text), file=sys.stderr)
                turns.deny(call.id)
            elif call.state == "asking":
                _ask(turns, call)
            elif how == "type" and call.state == "approved":
                turns.give(call.id, input(f"{call.name} result> ").strip() or NO_RESULT)
    except (EOFError, KeyboardInterrupt):
        print()
        turns.stop()
        return False
    return True


def _ask(turns: ToolTurns, call: ToolCall) -> None:
    """The approval prompt, asked again until it is answered y, n or a."""
    while call.state == "asking":
        word = input(ASK.format(label=call.label, arguments=call.arguments_text)).strip().lower()
        if word in ("y", "yes"):
            turns.approve(call.id)
        elif word in ("n", "no"):
            turns.deny(call.id)
        elif word in ("a", "always"):
            turns.approve(call.id, always=True)


def _run_until_ctrl_c(turns: ToolTurns) -> None:
    """The approved calls run here; Ctrl-C stops them (the running one cancelled, the rest not run)."""
    if threading.current_thread() is not threading.main_thread():
        turns.run_approved()
        return
    previous = signal.signal(signal.SIGINT, lambda *_: turns.stop())
    try:
        turns.run_approved()
    finally:
        signal.signal(signal.SIGINT, previous)


class _Said:
    """Each call's end said once on stderr: how it went, how long, its size and its first line (a
    typed result is not said again; a denial the user typed neither)."""

    def __init__(self, how: str) -> None:
        self.how, self.told = how, set()

    def changed(self, call: ToolCall) -> None:
        if call.id in self.told or call.state in ("asking", "approved", "running"):
            return
        self.told.add(call.id)
        if call.state == "denied" or (self.how == "type" and call.state == "done"):
            return
        print(ended(call), file=sys.stderr, flush=True)


def ended(call: ToolCall) -> str:
    """``[fixture.add {"a": 1, "b": 2}] done in 0.02 s, 1 character: 3``; a call not run, its words."""
    head = f"[{call.label} {call.arguments_text}]"
    lines = call.result.strip().splitlines()
    first = lines[0] if lines else ""
    first = first if len(first) <= RESULT_LINE_CHARS else first[: RESULT_LINE_CHARS - 1] + "…"
    if call.state not in ENDS or not call.seconds:  # not run: its words say why
        return f"{head} {first}"
    size = f"{len(call.result):,} character{'s' if len(call.result) != 1 else ''}"
    return f"{head} {ENDS[call.state]} in {call.seconds:.2f} s, {size}: {first}"
