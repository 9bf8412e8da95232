"""How the server sends an answer: in one response once it is over, or as server-sent events step
by step (a chat's or a plain completion's chunks, the stop sequences held back, the statistics and
the usage at the end), noticing a client that went away. Split from ``asgi`` so that module keeps
the app, its routes and the answerer (slots, queue, history)."""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import Sequence
from dataclasses import dataclass

from starlette.requests import Request
from starlette.responses import JSONResponse, StreamingResponse

import draftscope.server.protocol as p
import draftscope.server.responses as responses
from draftscope.core.tool_calls import CallReader, called
from draftscope.engine.engine import PromptTooLongError
from draftscope.engine.events import FinalEvent, StepEvent
from draftscope.server.logprob_fields import LogprobsWriter


def _engine_error(exc: Exception) -> p.ApiError:
    if isinstance(exc, PromptTooLongError):
        return p.ApiError(400, str(exc), param="messages", code="context_length_exceeded")
    if isinstance(exc, ValueError):
        return p.ApiError(400, str(exc))
    return p.ApiError(500, f"{type(exc).__name__}: {exc}", type="server_error")


def _sse(obj) -> str:
    return f"data: {json.dumps(obj, ensure_ascii=False)}\n\n"


@dataclass
class Reply:
    """One answer as the client sees it: its id, when it began and the model, in the shape of a chat
    or of a plain completion."""

    rid: str
    created: int
    model_id: str
    chat: bool
    prompt_tokens: int
    usage_chunk: bool  # a last chunk with the usage (stream_options.include_usage)
    index: int = 0  # which of the request's n answers (server/choices.py): its choice's index
    logprobs: LogprobsWriter | None = None  # where the request asks for logprobs
    calls: CallReader | None = None  # the answer's text read as tool calls (core/tool_calls.py)

    def whole(self, final: FinalEvent) -> dict:
        make = responses.chat_response if self.chat else responses.completion_response
        body = make(self.rid, self.model_id, final, self.prompt_tokens)
        if self.logprobs is not None:
            body["choices"][0]["logprobs"] = self.logprobs.whole(final)
        if self.calls is not None:
            called(self.calls, final.text, body["choices"][0])
        return body

    def opening(self) -> list[str]:
        """A chat stream starts by naming the speaker."""
        if not self.chat:
            return []
        return [
            _sse(
                responses.chat_chunk(
                    self.rid, self.model_id, self.created, delta={"role": "assistant", "content": ""}, index=self.index
                )
            )
        ]

    def step(self, text: str, extension: dict, event: StepEvent | None = None) -> str:
        if self.chat and self.calls is not None:  # content and calls as deltas, the step's figures on the first
            deltas = self.calls.push(text) or [{}]
            first = self._delta(deltas[0], extension)
            if self.logprobs is not None and event is not None:  # the step's tokens' logprobs, on its first chunk
                first["choices"][0]["logprobs"] = self.logprobs.step(event)
            return _sse(first) + "".join(_sse(self._delta(d)) for d in deltas[1:])
        if self.chat:
            chunk = responses.chat_chunk(
                self.rid, self.model_id, self.created, delta={"content": text}, extension=extension, index=self.index
            )
        else:
            chunk = responses.completion_chunk(
                self.rid, self.model_id, self.created, text=text, extension=extension, index=self.index
            )
        if self.logprobs is not None and event is not None:  # the step's tokens' logprobs
            chunk["choices"][0]["logprobs"] = self.logprobs.step(event)
        return _sse(chunk)

    def closing(self, final: FinalEvent, rest: str) -> list[str]:
        """The held-back text with the finish reason and the answer's statistics, then the usage
        when it was asked for."""
        ext = {"stats": responses.stats_extension(final)}
        reason = responses.finish_reason(final.finish_reason)
        calls = []
        if self.chat and self.calls is not None:  # what the text held back still says, then "tool_calls"
            calls = [_sse(self._delta(d)) for d in self.calls.push(rest) + self.calls.finish()]
            rest, reason = "", self.calls.finish_reason or reason
        if self.chat:
            out = calls + [
                _sse(
                    responses.chat_chunk(
                        self.rid,
                        self.model_id,
                        self.created,
                        delta={"content": rest} if rest else {},
                        finish=reason,
                        extension=ext,
                        index=self.index,
                    )
                )
            ]
        else:
            out = [
                _sse(
                    responses.completion_chunk(
                        self.rid, self.model_id, self.created, text=rest, finish=reason, extension=ext, index=self.index
                    )
                )
            ]
        if self.usage_chunk:
            out.append(self.usage_event(responses.usage(self.prompt_tokens, final.stats)))
        return out

    def usage_event(self, usage: dict) -> str:
        """The last chunk, where the usage was asked for: no choice, the usage."""
        return _sse(
            {
                "id": self.rid,
                "object": "chat.completion.chunk" if self.chat else "text_completion",
                "created": self.created,
                "model": self.model_id,
                "choices": [],
                "usage": usage,
            }
        )

    def _delta(self, delta: dict, extension: dict | None = None) -> dict:
        return responses.chat_chunk(
            self.rid, self.model_id, self.created, delta=delta, extension=extension, index=self.index
        )


async def whole_reply(request: Request, reply: Reply, events):
    """The answer in one response, once it is over."""
    try:
        final = await _unless_gone(request, _last(events))
    except p.ApiError:
        raise
    except _Gone:
        return None
    except Exception as exc:
        raise _engine_error(exc) from exc
    request.state.completion_tokens = final.stats.tokens
    if final.finish_reason == "error":
        raise p.ApiError(500, final.error or "generation failed", type="server_error")
    return JSONResponse(reply.whole(final))


async def streamed_reply(request: Request, reply: Reply, events, stop_strings: Sequence[str]):
    """The answer as server-sent events. The first event is awaited here, so a queue-full or a bad
    prompt is an HTTP error (and a client that leaves while its request waits its turn is noticed)."""
    try:
        first = await _unless_gone(request, events.__anext__())
    except p.ApiError:
        raise
    except _Gone:
        return None
    except Exception as exc:
        await events.aclose()
        raise _engine_error(exc) from exc
    return StreamingResponse(
        _chunks(request, reply, first, events, stop_strings),
        media_type="text/event-stream",
        headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"},
    )


async def _chunks(request: Request, reply: Reply, first, events, stop_strings: Sequence[str]):
    """The answer's chunks, then [DONE]."""
    async with contextlib.aclosing(answer_chunks(request, reply, first, events, stop_strings)) as chunks:
        async for chunk in chunks:
            yield chunk
    yield "data: [DONE]\n\n"


async def answer_chunks(request: Request, reply: Reply, first, events, stop_strings: Sequence[str]):
    """Each step's text (less what may still turn out to be a stop sequence), then the closing
    chunks; an answer that fails ends with the error's body instead of the closing. (n answers'
    are merged by server/choices.py.)"""
    hold = responses.StopHoldback(stop_strings)
    try:
        for chunk in reply.opening():
            yield chunk
        ev = first
        while not isinstance(ev, FinalEvent):
            yield reply.step(hold.push("".join(ev.pieces)), responses.step_extension(ev), ev)
            ev = await events.__anext__()
        request.state.completion_tokens = ev.stats.tokens
        if ev.finish_reason == "error":
            yield _sse(p.ApiError(500, ev.error or "generation failed", type="server_error").body())
        else:
            for chunk in reply.closing(ev, hold.finish(ev.text)):
                yield chunk
    finally:
        await events.aclose()


class _Gone(Exception):
    """The client disconnected before the answer could be sent."""


async def _unless_gone(request: Request, awaitable):
    """Await ``awaitable`` (a step of the answer's event stream), checking every 100 ms that the
    client is still there; when it is not, cancel it (which cancels the answer) and raise _Gone."""
    task = asyncio.ensure_future(awaitable)
    while not task.done():
        await asyncio.wait({task}, timeout=0.1)
        if not task.done() and await request.is_disconnected():
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
            raise _Gone
    return task.result()


async def _last(events):
    last = None
    async for ev in events:
        last = ev
    return last
