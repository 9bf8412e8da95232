"""One chat session for every face: the window, ``draftscope chat`` and ``draftscope serve``.

A :class:`ChatSession` owns a conversation's turn cycle, with no Qt in it: a user message (or an
edit of one, which replaces it and what followed), the request built from the settings, the
engine's events, and the answer stored with its statistics and steps (or kept in memory when
there is no history store). :meth:`ChatSession.stream` is the answer loop of the window's worker
thread and the terminal; :meth:`ChatSession.stream_async` the server's, awaited on its event loop; both
tell the session's events and record the answer through ``core/answering.py``.

What happens to the conversation's answers is the session's to tell (as napari's Qt-free models
tell their ``_qt`` views): ``session.events`` (psygnal signals) announces each answer's start, its
steps and its end, on the thread that runs the answer. Views observe them — the window through
``gui/session_qt.py``, which carries them to the UI thread; the terminal directly.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncGenerator, Iterator, Sequence
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING

from psygnal import Signal, SignalGroup

from draftscope.core import continuation
from draftscope.core.answering import NO_FINAL, Answering
from draftscope.core.sampling_defaults import sampling_from
from draftscope.core.tools import message_tool_fields
from draftscope.documents.extract import Attachment
from draftscope.documents.prompt import HEADING_TOKENS, SentFile, from_documents, prepare, render
from draftscope.engine.engine import Engine, GenerationRequest
from draftscope.engine.events import FinalEvent, ReadingEvent, StepEvent
from draftscope.engine.sampling import SamplingParams
from draftscope.storage.import_check import ANSWER_FIGURES
from draftscope.storage.settings import Settings

if TYPE_CHECKING:
    from draftscope.core.runtime import Runtime
    from draftscope.documents.folder import FolderIndex

TITLE_CHARS = 48
# kept with each answer beside ANSWER_FIGURES: the one tokens/s (the writing rate), plain decoding's at
# its context, and whether the computer was busy and drafting off (words.answer_stats shows them)
SPEED_FIGURES = ("decode_tokens_per_second", "plain_tokens_per_second", "busy", "drafting")
# a tool result's fields the history keeps for the views (which server, how it went, its whole
# size, how long it ran), dropped from what the chat template reads
OWN_TOOL_FIELDS = ("server", "status", "chars", "seconds")
DOCUMENT_TOKENS = 1500  # at most this much of the prompt for a documents folder's passages
ANSWER_ROOM_MIN = 64  # tokens kept free for the answer at least when attachments fill the context


def _template_fields(fields: dict) -> dict:
    """A turn's tool fields as the chat template reads them (the history's own left out)."""
    return {k: v for k, v in fields.items() if k not in OWN_TOOL_FIELDS}


def title_from(text: str) -> str:
    """A conversation's title from its first message: its words on one line, shortened."""
    line = " ".join(text.split())
    return line if len(line) <= TITLE_CHARS else line[: TITLE_CHARS - 1].rstrip() + "…"


def answer_record(final: FinalEvent, baseline_tokens_per_second: float | None) -> tuple[dict, dict]:
    """(stats, drafters) as the history keeps them for an answer."""
    s = final.stats
    stats = {k: getattr(s, k) for k in (*ANSWER_FIGURES, *SPEED_FIGURES, "seed")}
    stats["finish_reason"] = final.finish_reason
    stats["baseline_tokens_per_second"] = baseline_tokens_per_second
    return stats, {"drafters": s.drafters, "accepted_by_source": s.accepted_by_source}


class SessionEvents(SignalGroup):
    """What a session's answers do, for the views that show them (emitted on the answering thread)."""

    answer_started = Signal(object)  # the GenerationRequest about to be answered
    step = Signal(object)  # a StepEvent of the answer being written
    reading = Signal(object)  # a ReadingEvent: how far the prompt's reading is (requests that ask for them)
    answer_ended = Signal(object, object)  # its FinalEvent, and the message id it was kept as (None: not kept)
    answer_failed = Signal(str)  # the engine refused the request (a prompt too long for the context)


@dataclass
class Turn:
    role: str
    content: str
    id: int | None = None
    files: tuple[SentFile, ...] = ()  # a user message's attachments as the model read them
    # its part in tool calling (an answer's tool_calls, a result's tool_call_id and name, and the
    # history's own server, status and chars, which the chat template never reads)
    tool_fields: dict = field(default_factory=dict)

    def attachments(self) -> list[Attachment]:
        """The files as the model read them, to go back in a composer."""
        return [Attachment(f.name, f.text, f.kind) for f in self.files]

    @property
    def model_text(self) -> str:
        """What the model reads of the turn: its files, then its text."""
        return render(self.content, self.files)


@dataclass(frozen=True)
class Outgoing:
    """A message as Send would send it (:meth:`ChatSession.outgoing`)."""

    sent: list[SentFile]  # its files as the model reads them (whole, or passages), a documents folder's first
    messages: list[dict]  # the conversation the model would read, the message last


class ChatSession:
    """A conversation over a :class:`~draftscope.core.runtime.Runtime` (its engine, settings and drafters)."""

    def __init__(
        self,
        runtime: Runtime,
        *,
        history=None,
        conversation_id: int | None = None,
        defer: bool = False,
        title_prefix: str = "",
    ) -> None:
        """``history``: a HistoryStore (answers are stored with their steps) or None (the
        conversation lives in memory). ``defer``: the conversation reaches the history with its
        first kept answer, titled ``title_prefix`` + its first message (a served request that fails
        leaves nothing behind). Finished answers are learned by the runtime."""
        self.runtime = runtime
        self.history, self.conversation_id = history, conversation_id
        self.defer, self.title_prefix = defer, title_prefix
        self.last_kept: int | None = None  # the message id of the last answer kept in the history
        self.documents: FolderIndex | None = None  # this conversation's documents folder; else the runtime's
        self._replaced: int | None = None  # the version a regenerate hid, shown again if no new one is kept
        self._memory: list[Turn] = []
        self.events = SessionEvents()
        self.continuing: continuation.Continuation | None = None  # the cut answer the last request writes on

    @property
    def engine(self) -> Engine:
        return self.runtime.engine

    @property
    def settings(self) -> Settings:
        return self.runtime.settings

    def make_drafters(self) -> list:
        return self.runtime.make_drafters()

    # ------------------------------------------------------------------ the conversation

    def _stored(self) -> bool:
        """Whether the turns live in the history (else in memory)."""
        return self.history is not None and (self.conversation_id is not None or not self.defer)

    def turns(self) -> list[Turn]:
        if not self._stored():
            return list(self._memory)
        if self.conversation_id is None:
            return []
        return [
            Turn(m.role, m.content, m.id, tuple(SentFile.from_dict(f) for f in m.files), dict(m.tool_fields))
            for m in self.history.messages(self.conversation_id)
        ]

    def messages(self) -> list[dict]:
        """What the model sees: the system prompt (from the settings) and the turns, their files in them."""
        return self._model_messages(self.turns())

    def _model_messages(self, turns: Sequence[Turn]) -> list[dict]:
        out = [{"role": t.role, "content": t.model_text, **_template_fields(t.tool_fields)} for t in turns]
        if self.settings.system_prompt:
            out.insert(0, {"role": "system", "content": self.settings.system_prompt})
        return out

    def _turns_before(self, replacing: int | None) -> list[Turn]:
        """The turns a message replacing ``replacing`` (None: a new message) would follow."""
        return [t for t in self.turns() if replacing is None or t.id is None or t.id < replacing]

    def outgoing(self, text: str, files: Sequence[Attachment], *, replacing: int | None = None) -> Outgoing:
        """What Send would send, recording nothing: ``files`` as the model would read them with
        ``text`` (:meth:`attach`), and the conversation the model would then read. Send and the
        window's read ahead both build their prompt here, so what is read ahead is what Send sends.
        Raises ValueError (in words) when the files cannot fit."""
        sent = self.attach(text, files, replacing=replacing)
        return Outgoing(sent, self.messages_with(text, sent, replacing=replacing))

    def messages_with(self, text: str, sent: Sequence[SentFile], *, replacing: int | None = None) -> list[dict]:
        """The conversation as the model would read it with ``text`` and its ``sent`` files said next
        (replacing ``replacing`` and what followed it), recording nothing."""
        return self._model_messages([*self._turns_before(replacing), Turn("user", text, None, tuple(sent))])

    def say(
        self,
        text: str,
        *,
        replacing: int | None = None,
        role: str = "user",
        files: Sequence[SentFile] = (),
        tool_fields: dict | None = None,
    ) -> int | None:
        """A message (the user's, or, replaying a conversation given whole, an earlier answer);
        ``replacing`` (a user message's id) edits and resends: it and everything after it go. A
        first message starts a conversation titled from it. ``files``: its attachments as
        :meth:`attach` prepared them. ``tool_fields``: an answer's calls or a tool's result
        (``role="tool"``: its tool_call_id, name, and the history's server, status, chars). Returns
        its message id in the history (None: the conversation lives in memory)."""
        if replacing is not None:
            self.rewind(replacing)
        files = tuple(files)
        if not self._stored():
            self._memory.append(Turn(role, text, None, files, dict(tool_fields or {})))
            return None
        if self.conversation_id is None:
            title = text if text.strip() or not files else files[0].name
            self.conversation_id = self.history.create_conversation(self.title_prefix + title_from(title))
        return self.history.add_message(
            self.conversation_id, role, text, files=[f.as_dict() for f in files], tool_fields=tool_fields
        )

    def keep_calls(self, content: str, calls: list[dict]) -> None:
        """The last answer, which called tools, kept as the template reads such an answer: its prose
        ``content`` and its ``calls`` (OpenAI's shape; arguments as JSON text or an object), its
        figures and steps as they were. The answer is the history's last kept one (``last_kept``),
        else the conversation's last message when it is an answer (never an earlier one); with
        neither, the calls are said as a new answer."""
        fields = message_tool_fields({"tool_calls": list(calls)}, 0, "assistant")
        if not self._stored():
            last = self._memory[-1] if self._memory else None
            if last is not None and last.role == "assistant":
                last.content, last.tool_fields = content, fields
            else:
                self.say(content, role="assistant", tool_fields=fields)
            return
        target = self.last_kept
        if target is None and (turns := self.turns()) and turns[-1].role == "assistant":
            target = turns[-1].id
        if target is None:
            self.say(content, role="assistant", tool_fields=fields)
        else:
            self.history.set_tool_fields(target, fields, content=content)

    def attach(
        self, text: str, files: Sequence[Attachment], *, replacing: int | None = None, documents: bool = True
    ) -> list[SentFile]:
        """How the model will read ``files`` sent with ``text``: whole while they fit the context left
        after the conversation so far (up to ``replacing``) and the answer's room, else the passages
        that best answer ``text``; and, when the runtime has a documents folder, its passages for
        ``text`` first. Raises ValueError (in words) when the files cannot fit at all."""
        folder = (self.documents or self.runtime.documents) if documents else None
        if not files and folder is None:
            return []
        turns = self._model_messages(self._turns_before(replacing))
        used = len(self.engine.encode_chat(turns + [{"role": "user", "content": text}]))
        room = self.engine.max_context - used - self.answer_room()
        found = None
        if folder is not None:  # the folder's passages for the question, in up to half the room
            found = from_documents(folder, text, min(DOCUMENT_TOKENS, room // 2), self.count_tokens)
        sent = prepare(list(files), text, room - (found.tokens + HEADING_TOKENS if found else 0), self.count_tokens)
        return ([found] if found else []) + sent

    def answer_room(self) -> int:
        """Tokens kept free for the next answer when the prompt is filled (files, tool results)."""
        return max(ANSWER_ROOM_MIN, min(self.answer_limit(), self.engine.max_context // 4))

    def room_left(self, tools: Sequence[dict] | None = None, then: Sequence[dict] = ()) -> int:
        """Tokens left for the text of the messages ``then`` said next (their marks counted, their
        text not): the context less the conversation as the model reads it (shown ``tools``) and the
        answer's room; 0 or less when there is none."""
        used = len(self.engine.encode_chat([*self.messages(), *then], tools))
        return self.engine.max_context - used - self.answer_room()

    def count_tokens(self, text: str) -> int:
        return len(self.engine.tokenizer(text, add_special_tokens=False)["input_ids"])

    def rewind(self, message_id: int | None = None) -> bool:
        """Answer again from before ``message_id`` (default: the last answer). A stored answer is
        kept as a version (the next answer is another; what followed it stays on its branch); a
        user message (edit-and-resend) goes, with all that followed it. True when there is
        something left to answer."""
        turns = self.turns()
        if message_id is None:  # the last answer, also when tool results follow it (a stopped tool loop)
            last = next((i for i in range(len(turns) - 1, -1, -1) if turns[i].role == "assistant"), None)
            message_id = turns[last].id if last is not None else None
            if not self._stored() and last is not None:
                del self._memory[last:]
        if message_id is not None and self._stored():
            if any(t.id == message_id and t.role == "assistant" for t in turns):
                self.history.hide_version(message_id)
                self._replaced = message_id
            else:
                self.history.delete_messages_from(message_id)
        return bool(self.turns())

    def show_version(self, message_id: int) -> None:
        """Page an answer to another of its versions: the conversation continues from that one."""
        if self._stored():
            self.history.show_version(message_id)

    def settle_versions(self) -> None:
        """After an answer: if a regenerate hid a version and no new one was kept, show it again."""
        replaced, self._replaced = self._replaced, None
        if replaced is not None and self.last_kept is None:
            self.history.show_version(replaced)

    def take_back_unanswered(self) -> Turn | None:
        """The last message when it is a question left without an answer (its answer failed),
        taken out of the conversation, so the next message is not refused for it again."""
        turns = self.turns()
        if not turns or turns[-1].role != "user":
            return None
        self.drop_last()
        return turns[-1]

    def drop_last(self) -> None:
        """Take back the last message (a question that could not be answered)."""
        turns = self.turns()
        if not turns:
            return
        if not self._stored():
            self._memory.pop()
        elif turns[-1].id is not None:
            self.history.delete_messages_from(turns[-1].id)

    def reset(self) -> None:
        """Start a new conversation (the old one stays in the history)."""
        self.conversation_id, self._memory = None, []

    # ------------------------------------------------------------------ answering

    def answer_limit(self) -> int:
        """The settings' length limit in tokens; 0 (until the model stops) is the context's room,
        which the engine cuts to what the prompt leaves (a request's 0 is a read ahead instead)."""
        return self.settings.max_new_tokens or self.engine.max_context

    def sampling(self, **overrides) -> SamplingParams:
        """The answer's sampling: the settings', the model's recommendation where it is used
        (core/sampling_defaults.py), and ``overrides`` (a request's own fields, a new seed)."""
        return sampling_from(self.settings, getattr(self.runtime, "recommended", None), **overrides)

    def request(
        self,
        *,
        messages: Sequence[dict] | None = None,
        prompt_ids: Sequence[int] | None = None,
        max_new_tokens: int | None = None,
        sampling: SamplingParams | None = None,
        budget: int | None = None,
        cancel=None,
        stop: Sequence[str] = (),
        drafters: Sequence | None = None,
    ) -> GenerationRequest:
        """The next answer's request: the conversation (or ``messages``, or a prompt already in
        tokens), the settings' limits and sampling unless given, fresh drafters unless given
        (``[]``: plain decoding)."""
        self.continuing = None  # a continue_request's own request says so after this
        prompt = list(prompt_ids) if prompt_ids is not None else None
        conversation = None if prompt is not None else list(messages) if messages is not None else self.messages()
        return GenerationRequest(
            prompt_ids=prompt,
            messages=conversation,
            max_new_tokens=self.answer_limit() if max_new_tokens is None else max_new_tokens,
            sampling=sampling or self.sampling(),
            drafters=self.make_drafters() if drafters is None else list(drafters),
            budget=budget,
            cancel=cancel,
            stop_strings=list(stop),
            stop_loops=self.settings.stop_loops,
        )

    def continue_request(self, message_id: int, *, tools: list[dict] | None = None) -> GenerationRequest:
        """The request that writes on the conversation's last answer, cut at the length limit or
        stopped (core/continuation.py): as the uncut answer would have gone on (its tokens, its
        seed); kept in the same message. ``tools``: those the answer was shown (its prompt showed
        them, and so does the continuation's). ValueError, in words, when it cannot be continued."""
        before = self._model_messages([t for t in self.turns() if t.id != message_id])  # what the model read
        continuing = continuation.prepare(self, message_id, before, tools)
        request = self.request(prompt_ids=continuing.prompt)
        request.tools = list(tools) if tools else None
        if continuing.stats.get("seed") is not None:
            request.sampling = replace(request.sampling, seed=continuing.stats["seed"])
        continuing.request, self.continuing = request, continuing
        return request

    def record(self, final: FinalEvent, steps: list[StepEvent] | bytes | None = None, request=None) -> int | None:
        """Keep a finished answer (a cancelled one, or one cut short by an error, only if it has
        text: the answer so far stays); returns its message id (None when nothing was kept or there
        is no history store). The answer to a ``continue_request`` extends its message."""
        if final.finish_reason in ("eos", "length", "stop"):
            self.runtime.learn(final.prompt_tail, final.token_ids)
        if not final.text.strip() and final.finish_reason in ("cancel", "error"):
            return None
        if self.history is None:
            self._memory.append(Turn("assistant", final.text))
            return None
        if self.conversation_id is None:  # deferred: the conversation is written with its first answer
            first = next((t.content for t in self._memory if t.role == "user"), "request")
            self.conversation_id = self.history.create_conversation(self.title_prefix + title_from(first))
            for turn in self._memory:
                self.history.add_message(
                    self.conversation_id,
                    turn.role,
                    turn.content,
                    files=[f.as_dict() for f in turn.files],
                    tool_fields=turn.tool_fields,
                )
            self._memory = []
        stats, drafters = answer_record(final, self.engine.baseline_tokens_per_second)
        if (going_on := self.continuing) is not None and going_on.request is request:
            return continuation.extend(self.history, self.engine.tokenizer, going_on, final, steps, (stats, drafters))
        return self.history.add_message(
            self.conversation_id, "assistant", final.text, stats=stats, drafters=drafters, steps=steps
        )

    def stream(
        self, request: GenerationRequest, *, keep: bool = True
    ) -> Iterator[ReadingEvent | StepEvent | FinalEvent]:
        """The one answer loop (window, terminal; the server's is ``stream_async``): the engine's
        StepEvents as they come (after its ReadingEvents, for a request that asks for them:
        ``events.reading`` hears them), then its FinalEvent, once the answer is recorded (unless
        ``keep`` is False; its message id is then ``last_kept``). ``events`` hears of each as it is
        yielded (core/answering.py). A request the engine refuses (a prompt too long) raises here,
        after ``events.answer_failed``."""
        answering = Answering(self, request, keep=keep)
        try:
            for ev in self.engine.generate(request):
                if isinstance(ev, FinalEvent):
                    yield answering.end(ev)
                    return
                yield answering.passing(ev)
        except Exception as exc:
            answering.failed(exc)
            raise
        answering.failed(RuntimeError(NO_FINAL))
        raise RuntimeError(NO_FINAL)

    async def stream_async(
        self, request: GenerationRequest, *, write=None
    ) -> AsyncGenerator[ReadingEvent | StepEvent | FinalEvent, None]:
        """``stream`` awaited on an asyncio event loop (the server): no thread of the answer's own.
        ``write(fn, final)``, awaited, runs the answer's recording (``fn(final)``) where the face
        records (the server: one writer thread); without it, the recording runs here."""
        answering = Answering(self, request, keep=True)
        try:
            async with contextlib.aclosing(self.engine.generate_async(request)) as events:
                async for ev in events:
                    if isinstance(ev, FinalEvent):
                        final = await write(answering.end, ev) if write is not None else answering.end(ev)
                        yield final
                        return
                    yield answering.passing(ev)
        except Exception as exc:
            answering.failed(exc)
            raise
        answering.failed(RuntimeError(NO_FINAL))
        raise RuntimeError(NO_FINAL)

    def run(self, request: GenerationRequest, *, keep: bool = True) -> FinalEvent:
        """Answer ``request`` to the end (its steps reach ``events``)."""
        for ev in self.stream(request, keep=keep):
            if isinstance(ev, FinalEvent):
                return ev
        raise RuntimeError(NO_FINAL)
