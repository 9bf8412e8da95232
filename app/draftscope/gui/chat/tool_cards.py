"""Tool calls in the transcript: each call an answer made is a card under the answer's prose (the
tool, its server, its arguments, where it stands), with Approve / Deny / "Always for this tool"
while it waits for the user, and its result folded behind "show result (12 KB)".

A card is drawn from what the history keeps (an answer's ``tool_calls``, and the tool message that
holds each call's result: its ``server``, ``status``, ``chars``) and, while the calls of the answer
being answered are live, from the loop's own ``ToolCall`` (core/tool_turns.py): its state is newer
than the history's. Tool messages are not shown on their own: their result is the card's.

Links: ``tool:approve/<call id>``, ``tool:deny/<call id>``, ``tool:always/<call id>`` (the user's
decisions, handed to the loop) and ``tool:show/<message id>`` / ``tool:hide/<message id>`` /
``tool:copy/<message id>`` (a result unfolded, folded, copied: the view's own).
"""

from __future__ import annotations

import html
import json
from dataclasses import dataclass
from urllib.parse import quote

from draftscope.gui.chat.render import CHROME
from draftscope.gui.palettes import TOOL_CARD_COLOURS

TOOL_SCHEME = "tool"
DECISIONS = ("approve", "deny", "always")  # what the user may answer a call that waits
SHOWN_CHARS = 20_000  # an unfolded result shows this much: a 1 MB result laid out whole stalls the view
ARGUMENT_CHARS = 600  # a call's arguments shown up to this much (the tool receives them whole)
INLINE_CHARS = 400  # a failure's first line, said on its card

# a call's state in words
STATE_WORDS = {
    "asking": "waits for your approval",
    "approved": "approved: about to run",
    "running": "running …",
    "done": "done",
    "error": "the tool reported an error",
    "timeout": "timed out",
    "failed": "failed",
    "denied": "denied: not run",
    "stopped": "stopped",
    "over_limit": "not run: the limit of calls for one message was reached",
    "repeated": "not run again: the same call was made already",
    "unknown": "not run: the model named a tool that is not offered",
    "unanswered": "not run",
}
WARN = ("error", "timeout", "failed", "unknown")  # shown in the error colour, the words inline
QUIET = ("denied", "stopped", "over_limit", "repeated", "unanswered")
# a stored result's status (ToolOutcome.status, or the loop's own) as a card's state
STATUS_STATE = {"ok": "done", "done": "done"}


def _colour(name: str, dark: bool) -> str:
    return TOOL_CARD_COLOURS[name][1 if dark else 0]


@dataclass(frozen=True)
class CardCall:
    """One call as its card shows it."""

    id: str
    name: str  # as the model called it
    server: str = ""  # "" while unknown (a call of a tool no server offers)
    arguments: dict | str | None = None  # an object, or the text the model wrote when it is none
    state: str = "unanswered"
    result: str = ""  # the result the model read (or the failure's words)
    chars: int = 0  # the result's whole size
    seconds: float = 0.0
    message_id: int | None = None  # the tool message holding the result

    @property
    def key(self) -> tuple:
        """What the card shows depends on (a change redraws it)."""
        return self.id, self.state, self.message_id, self.chars, round(self.seconds, 1)


def answer_calls(message) -> list[dict]:
    """An assistant message's calls as the history keeps them (OpenAI's template shape)."""
    calls = (message.tool_fields or {}).get("tool_calls") if message.role == "assistant" else None
    return [c for c in calls or [] if isinstance(c, dict)]


def results_by_call(messages) -> dict[str, object]:
    """The conversation's tool messages by the id of the call each answers."""
    return {
        m.tool_fields["tool_call_id"]: m
        for m in messages
        if m.role == "tool" and isinstance((m.tool_fields or {}).get("tool_call_id"), str)
    }


def card_calls(message, results: dict, live: dict) -> list[CardCall]:
    """The cards of an assistant ``message``: its calls, each with its result (``results``: the
    conversation's tool messages by call id) or its live state (``live``: call id -> ToolCall)."""
    out = []
    for call in answer_calls(message):
        function = call.get("function") or {}
        call_id = str(call.get("id", ""))
        card = CardCall(call_id, str(function.get("name", "?")), arguments=function.get("arguments"))
        stored = results.get(call_id)
        if stored is not None:
            card = _with_result(card, stored)
        if (now := live.get(call_id)) is not None:
            card = _with_live(card, now, stored)
        out.append(card)
    return out


def _with_result(card: CardCall, message) -> CardCall:
    fields = message.tool_fields or {}
    status = str(fields.get("status") or "done")
    return CardCall(
        card.id,
        card.name,
        str(fields.get("server") or ""),
        card.arguments,
        STATUS_STATE.get(status, status),
        message.content,
        int(fields.get("chars") or len(message.content)),
        float(fields.get("seconds") or 0.0),
        message.id,
    )


def _with_live(card: CardCall, call, stored) -> CardCall:
    """The loop's ToolCall over what is stored: its state is the newest; the result the model read
    is the stored one, once it is kept."""
    result = stored.content if stored is not None else call.result
    chars = card.chars if stored is not None else len(call.result)
    arguments = call.arguments if call.arguments is not None else card.arguments
    return CardCall(
        card.id,
        card.name,
        call.server or card.server,
        arguments,
        call.state,
        result,
        chars,
        call.seconds or card.seconds,
        call.message_id if call.message_id is not None else card.message_id,
    )


def size_words(chars: int) -> str:
    """A result's size as a person reads it: "840 characters", "12 KB", "1.0 MB"."""
    if chars < 1000:
        return f"{chars:,} character{'s' if chars != 1 else ''}"
    if chars < 1_000_000:
        return f"{chars / 1000:.0f} KB"
    return f"{chars / 1e6:.1f} MB"


def arguments_text(arguments) -> str:
    """A call's arguments as one line of JSON, cut at ARGUMENT_CHARS."""
    if arguments is None:
        return "(no arguments the tool can read)"
    if arguments == {}:
        return "(no arguments)"
    text = arguments if isinstance(arguments, str) else json.dumps(arguments, ensure_ascii=False)
    return text if len(text) <= ARGUMENT_CHARS else text[: ARGUMENT_CHARS - 1] + "…"


def state_words(card: CardCall) -> str:
    words = STATE_WORDS.get(card.state, card.state)
    if card.state in ("done", "error", "timeout") and card.seconds:
        words += f" in {card.seconds:.1f} s" if card.state != "timeout" else f" after {card.seconds:.0f} s"
    return words


def _link(verb: str, target: str, text: str, *, bold: bool = False) -> str:
    inner = f"<b>{text}</b>" if bold else text
    return f'<a href="{TOOL_SCHEME}:{verb}/{quote(target, safe="")}">{inner}</a>'


def _decisions(card: CardCall) -> str:
    return " &nbsp;·&nbsp; ".join(
        (
            _link("approve", card.id, "Approve", bold=True),
            _link("deny", card.id, "Deny"),
            _link("always", card.id, "Always for this tool"),
        )
    )


def _result_html(card: CardCall, unfolded: bool, dark: bool) -> str:
    """The result: folded behind its size, or shown (its first SHOWN_CHARS) with links to fold and copy it."""
    if card.message_id is None or card.state in QUIET or (card.state in WARN and _said_inline(card)):
        return ""
    target = str(card.message_id)
    if not unfolded:
        return "<br>" + _link("show", target, f"show result ({size_words(card.chars)})")
    shown = card.result[:SHOWN_CHARS]
    note = ""
    if len(card.result) > SHOWN_CHARS or card.chars > len(card.result):
        note = (
            f'<br><small style="color:{_colour("muted", dark)};">the first {size_words(len(shown))} of '
            f"{size_words(max(card.chars, len(card.result)))} shown</small>"
        )
    return (
        "<br>"
        + _link("hide", target, "hide result")
        + " &nbsp;·&nbsp; "
        + _link("copy", target, "copy what the model read" if card.chars > len(card.result) else "copy result")
        + note
        + f'<p style="white-space:pre-wrap; font-family:monospace; margin-top:4px;">{html.escape(shown)}</p>'
    )


def _said_inline(card: CardCall) -> bool:
    """Whether a failure's words are all on its card's line (nothing more to unfold)."""
    text = card.result.strip()
    return "\n" not in text and len(text) <= INLINE_CHARS


def card_html(card: CardCall, *, unfolded: bool = False, dark: bool = False) -> str:
    """One call's card: a one-cell table (QTextDocument draws its background and border)."""
    colour = "waiting" if card.state in ("asking", "approved", "running") else "bad" if card.state in WARN else "good"
    colour = "muted" if card.state in QUIET else colour
    where = (
        f' <span style="color:{_colour("muted", dark)};">on {html.escape(card.server)}</span>' if card.server else ""
    )
    line = f'<span style="color:{_colour(colour, dark)};">● {html.escape(state_words(card))}</span>'
    if card.state == "asking":
        line += " &nbsp; " + _decisions(card)
    elif card.state in WARN and card.result:  # the failure's words, naming the server, where they are seen
        first = card.result.strip().splitlines()[0] if card.result.strip() else ""
        line += f'<br><span style="color:{_colour("bad", dark)};">{html.escape(first[:INLINE_CHARS])}</span>'
    arguments = html.escape(arguments_text(card.arguments))
    background, muted = _colour("card", dark), _colour("muted", dark)
    return (
        f'<table width="100%" cellspacing="0" cellpadding="8" border="1" bgcolor="{background}" '
        f'style="border-style:solid; border-collapse:collapse; border-color:{_colour("border", dark)}; '
        f'margin-top:4px; margin-bottom:6px;"><tr><td bgcolor="{background}">'
        f'<span class="{CHROME}"><small style="color:{muted};">Tool call</small> '
        f'<b style="font-family:monospace;">{html.escape(card.name)}</b>{where}</span><br>'
        f'<span style="font-family:monospace;">{arguments}</span><br>{line}'
        f"{_result_html(card, unfolded, dark)}</td></tr></table>"
    )


def cards_html(cards: list[CardCall], unfolded: set[int], *, dark: bool = False) -> str:
    return "".join(card_html(c, unfolded=c.message_id in unfolded, dark=dark) for c in cards)
