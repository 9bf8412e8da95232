"""An answer's text read as tool calls in its model's format (core/tool_formats.py), as it streams:
text stays ``content`` (less what may be the start of a call, held back until the next text decides
it), each call becomes OpenAI's ``tool_calls`` delta: its id, type and name once, then its arguments.
A whole reply is the same reading run over the whole text at once, so a stream's deltas join into the
whole reply's message.

Where a grammar holds the answer to calls (tool_choice "required" or a named function), the arguments
stream as they are written: the grammar lets nothing else through. Where the model is free ("auto"),
a call is sent once it is complete, and a call it writes badly (not JSON, a tool it was not given, no
name) stays text content, as llama-server and vLLM leave it: the client sees what the model said. An
answer that is nothing but a call's JSON, without the format's tags, is that call (small Qwen models
write calls so after a tool's result), and so is an answer that opens with that JSON in a ```json fence
(Qwen2.5-Coder-1.5B's way of calling when it is free to): what follows the fence is content.
"""

from __future__ import annotations

import json
import re
import uuid
from dataclasses import dataclass, field

from draftscope.core.tool_formats import CallFormat

_DECODER = json.JSONDecoder()
_FENCE_OPEN = re.compile(r"```(?:json)?[ \t]*\n")
_FENCE_STARTS = ("```json\n", "```\n")  # what an answer that is one fenced call may begin with


@dataclass
class Call:
    id: str
    name: str
    arguments: str = ""  # JSON text, as OpenAI sends it

    def as_dict(self) -> dict:
        return {"id": self.id, "type": "function", "function": {"name": self.name, "arguments": self.arguments}}


def new_call_id(fmt: CallFormat | None = None) -> str:
    """A call's id; Mistral's templates take only nine letters and digits."""
    if fmt is not None and fmt.name == "mistral":
        return uuid.uuid4().hex[:9]
    return f"call_{uuid.uuid4().hex[:24]}"


def _held(text: str, openers: tuple[str, ...]) -> int:
    """How many characters at the end of ``text`` may be the start of an opener."""
    return max((n for o in openers if o for n in range(1, len(o)) if text.endswith(o[:n])), default=0)


@dataclass
class CallReader:
    """Text in, deltas out (``{"content": ...}`` or ``{"tool_calls": [...]}``): :meth:`push` each new
    piece of the answer, :meth:`finish` at its end. ``eager``: a grammar holds the calls."""

    fmt: CallFormat
    names: frozenset[str]
    eager: bool = False
    calls: list[Call] = field(default_factory=list)
    content: str = ""
    _text: str = ""  # what is not yet sent, content or a block of calls
    _in_block: bool = False
    _gap: str = ""  # the whitespace before the block's opener
    _started: bool = False  # text has been sent: an opener-at-start format has no call to come
    _after_call: bool = False  # whitespace after a call is no content
    _streaming: bool = False  # a call's name is sent, its arguments not yet all (eager)

    def push(self, text: str) -> list[dict]:
        self._text += text
        return self._read(final=False)

    def finish(self) -> list[dict]:
        out = self._read(final=True)
        if self._text and not self._in_block and not (self._after_call and not self._text.strip()):
            out += self._say(self._text)
        self._text = ""
        return out

    @property
    def finish_reason(self) -> str | None:
        """ "tool_calls" when the answer called a tool and every call's arguments are whole: a call the
        length limit cut is no call a client can run (the answer's own reason, "length", stands)."""
        return "tool_calls" if self.calls and all(_is_json(c.arguments) for c in self.calls) else None

    def _read(self, *, final: bool) -> list[dict]:
        out: list[dict] = []
        while True:
            before = (self._text, self._in_block)
            out += self._block(final) if self._in_block else self._prose(final)
            if (self._text, self._in_block) == before:
                return out

    def _prose(self, final: bool) -> list[dict]:
        """Text outside calls: sent up to a call's opener (or what may become one)."""
        text = self._text
        if self._after_call:  # whitespace after a call is content only where text follows it
            if not text.strip():
                return []
            text = self._text = text if self.content else text.lstrip()
            self._after_call = False
        if not self.fmt.anywhere:
            return self._prose_at_start(final)
        bare = self._bare_call(final)
        if bare is not None:
            return bare
        found = [(i, o) for o in self.fmt.openers if (i := text.find(o)) >= 0]
        if found:
            at, opener = min(found)
            self._text, self._in_block = text[at + len(opener) :], True
            said = text[:at].rstrip()
            self._gap = text[len(said) : at]  # content again if the block is no call
            return self._say(said)
        if final:
            return self._say_up_to(len(text))
        safe = text.rstrip()  # whitespace waits: before a call it is no content
        return self._say_up_to(len(safe[: len(safe) - _held(safe, self.fmt.openers)].rstrip()))

    def _bare_call(self, final: bool) -> list[dict] | None:
        """Small Qwen models often write a call without its tags: an answer that is nothing but a call's
        JSON (an offered tool's name, object arguments) is that call. Such an answer is held to its end
        (None: not this case)."""
        text = self._text
        if self.eager or self._started or self.calls or any(o in text for o in self.fmt.openers):
            return None
        head = text.lstrip()
        if not final and any(start.startswith(head) for start in _FENCE_STARTS):
            return []  # a fence being opened: what is in it decides
        body, rest = _fenced(head)
        if not body.lstrip().startswith("{") or not self._may_be_bare_call(body):
            return None
        if not final and rest is None:
            return []
        calls = _calls_in(body, self.fmt, self.names)
        if calls is None:
            return None
        self._text, self._after_call = rest or "", True
        return [self._called(name, arguments) for name, arguments in calls]

    def _may_be_bare_call(self, text: str) -> bool:
        """Whether ``text`` may still open a call's JSON (``{"name": "<an offered tool>"``): other JSON
        streams as it comes."""
        compact = re.sub(r"\s+", "", text)
        head = '{"name":"'
        if len(compact) <= len(head):
            return head.startswith(compact)
        if not compact.startswith(head):
            return False
        name = compact[len(head) :].split('"', 1)[0]  # whitespace cannot be in a tool's name
        return any(n.startswith(name) for n in self.names)

    def _prose_at_start(self, final: bool) -> list[dict]:
        """Llama 3's and Mistral's calls open the answer or not at all."""
        text = self._text
        if self._started or self.calls:
            return self._say_up_to(len(text))
        bare = text.lstrip()
        named = [o for o in self.fmt.openers if o and bare.startswith(o)]
        if named:
            self._text, self._in_block = bare[len(named[0]) :], True
            return []
        if not final and (not bare or any(o.startswith(bare) for o in self.fmt.openers if o)):
            return []  # not yet decided
        if bare.startswith(self.fmt.first or "{"):
            self._text, self._in_block = bare, True
            return []
        self._started = True
        return self._say_up_to(len(text))

    def _say_up_to(self, n: int) -> list[dict]:
        said, self._text = self._text[:n], self._text[n:]
        return self._say(said)

    def _say(self, text: str) -> list[dict]:
        if not text:
            return []
        self._started = True
        self.content += text
        return [{"content": text}]

    def _block(self, final: bool) -> list[dict]:
        return self._streamed_block(final) if self.eager else self._whole_block(final)

    def _whole_block(self, final: bool) -> list[dict]:
        """A block read once it is complete; one that is not calls goes back to the text as it was."""
        end = self._block_end(final)
        if end is None:
            return []
        body, self._text = self._text[:end], self._text[end:]
        self._in_block = False
        calls = _calls_in(body, self.fmt, self.names)
        if calls is None:
            return self._say(self._gap + self._opener_text() + body)
        self._after_call = True
        return [self._called(name, arguments) for name, arguments in calls]

    def _opener_text(self) -> str:
        return self.fmt.openers[0] if self.fmt.anywhere else ""

    def _block_end(self, final: bool) -> int | None:
        """Where the block ends, once that is known: its closing tag, its list's end, or the answer's."""
        last = self.fmt.last.strip()
        if last and self.fmt.anywhere:
            at = self._text.find(last)
            if at >= 0:
                return at + len(last)
        elif last:  # a list: complete once it parses
            start = len(self._text) - len(self._text.lstrip())
            try:
                return _DECODER.raw_decode(self._text, start)[1]
            except ValueError:
                pass
        return len(self._text) if final else None

    def _called(self, name: str, arguments: str) -> dict:
        call = Call(new_call_id(self.fmt), name, arguments)
        self.calls.append(call)
        return {"tool_calls": [{"index": len(self.calls) - 1, **call.as_dict()}]}

    def _streamed_block(self, final: bool) -> list[dict]:
        """A block the grammar holds: each call's name once it is written, then its arguments as they come."""
        text, out = self._text, []
        while True:
            if not self._streaming:
                head = _head(self.fmt).match(text)
                if head is None:
                    break
                out.append(self._called(json.loads(f'"{head.group(1)}"'), ""))
                text, self._streaming = text[head.end() :], True
            call = self.calls[-1]
            if not call.arguments:
                text = text.lstrip()
            whole, done = _arguments_so_far(call.arguments + text)
            fragment = whole[len(call.arguments) :]
            text = text[len(fragment) :]
            if fragment:
                call.arguments += fragment
                out.append({"tool_calls": [{"index": len(self.calls) - 1, "function": {"arguments": fragment}}]})
            rest = _after_call(text, self.fmt, final) if done else None
            if rest is None:
                break
            (text, closed), self._streaming = rest, False
            if closed:
                self._in_block, self._after_call = False, True
                break
        self._text = text
        if final:  # what is left (an answer cut mid-call) is text
            self._in_block, self._started = False, True
        return out


_HEADS: dict[str, re.Pattern] = {}


def _head(fmt: CallFormat) -> re.Pattern:
    """A call's opening up to its arguments: ``{"name": "...", "arguments": `` (the grammar's spacing or any)."""
    if fmt.name not in _HEADS:
        _HEADS[fmt.name] = re.compile(
            r"\s*(?:"
            + re.escape(fmt.first.strip())
            + r")?\s*"
            + r'\{\s*"name"\s*:\s*"((?:[^"\\]|\\.)*)"\s*,\s*'
            + f'"{re.escape(fmt.arguments)}"'
            + r"\s*:\s*"
        )
    return _HEADS[fmt.name]


def _is_json(text: str) -> bool:
    try:
        json.loads(text)
    except ValueError:
        return False
    return True


def _arguments_so_far(text: str) -> tuple[str, bool]:
    """The arguments' text written so far, and whether they are complete (one JSON value)."""
    try:
        return text[: _DECODER.raw_decode(text)[1]], True
    except ValueError:
        return text, False


def _after_call(text: str, fmt: CallFormat, final: bool) -> tuple[str, bool] | None:
    """After a call's arguments: the text past its closing brace and what follows (another call of the
    block: False; the block's end: True), or None while that is not yet written."""
    rest = text.lstrip()
    if not rest.startswith("}"):
        return None
    rest = rest[1:].lstrip()
    if fmt.between and rest.startswith(fmt.between):
        return rest[len(fmt.between) :], False
    last = fmt.last.strip()
    if last and rest.startswith(last):
        return rest[len(last) :], True
    if final or (not last and rest and not fmt.between.startswith(rest[:1])):
        return rest, True
    return None


def _fenced(text: str) -> tuple[str, str | None]:
    """``text`` as (what a ```json fence opening it holds, what follows the fence's close: None while it is
    open); a text without a fence is all body, never closed."""
    opened = _FENCE_OPEN.match(text)
    if opened is None:
        return text, None
    body = text[opened.end() :]
    end = body.find("```")
    return (body, None) if end < 0 else (body[:end], body[end + 3 :])


def _calls_in(body: str, fmt: CallFormat, names: frozenset[str]) -> list[tuple[str, str]] | None:
    """A whole block's calls as (name, arguments JSON), or None when it is not calls of these tools."""
    text, calls = body.strip(), []
    first, last = fmt.first.strip(), fmt.last.strip()
    if not text.startswith(first):
        return None
    text = text[len(first) :]
    if last and text.endswith(last):
        text = text[: -len(last)]
    elif last and not fmt.anywhere:  # a list must close; a Hermes call the answer's end left open is read
        return None
    position = 0
    while True:
        position = len(text) - len(text[position:].lstrip())
        try:
            value, position = _DECODER.raw_decode(text, position)
        except ValueError:
            return None
        call = _one_call(value, fmt, names)
        if call is None:
            return None
        calls.append(call)
        rest = text[position:].lstrip()
        if not rest:
            return calls
        if not fmt.between or not rest.startswith(fmt.between):
            return None
        position = len(text) - len(rest) + len(fmt.between)


def _one_call(value: object, fmt: CallFormat, names: frozenset[str]) -> tuple[str, str] | None:
    if not isinstance(value, dict) or not isinstance(value.get("name"), str) or value["name"] not in names:
        return None
    arguments = value.get(fmt.arguments, value.get("arguments", {}))
    if isinstance(arguments, str):  # some models write the arguments as a JSON string
        try:
            arguments = json.loads(arguments)
        except ValueError:
            return None
    if not isinstance(arguments, dict):
        return None
    return value["name"], json.dumps(arguments, ensure_ascii=False)


def called(reader: CallReader, text: str, choice: dict) -> None:
    """A whole reply's ``choice`` with the answer's calls (its text read as a stream would read it):
    ``tool_calls`` and finish_reason "tool_calls" where it called, the text around them its content."""
    reader.push(text)
    reader.finish()
    if reader.calls:
        choice["message"]["content"] = reader.content or None
        choice["message"]["tool_calls"] = [c.as_dict() for c in reader.calls]
        choice["finish_reason"] = reader.finish_reason or choice["finish_reason"]
