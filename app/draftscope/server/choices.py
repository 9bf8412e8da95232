"""``n`` answers to one request (OpenAI's ``n``): each choice an answer of its own, with its own seed (the
request's seed s gives s, s+1, ...; without one each draws its own, told in its statistics), its own
session and its own reply (server/replies.py's Reply, with its ``index``), so whatever a reply does per
answer (tool calls, logprobs) it does per choice. The engine reads the prompt once for all of them
(engine/fork.py) and steps them in one forward a round.

Here the choices are merged: a whole reply lists them by index, with the prompt's tokens once in the
usage and the completion tokens summed (as OpenAI counts); a stream interleaves their chunks as they
come, each naming its choice's index and ending with that choice's finish chunk, then the usage chunk
last. A request takes one answering place a choice, all before any begins (server/asgi.py's Ticket),
so n over the places the server has is a 400 naming the limit."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncGenerator, Sequence
from typing import Protocol

from starlette.requests import Request
from starlette.responses import JSONResponse, StreamingResponse

import draftscope.server.protocol as p
import draftscope.server.responses as responses
from draftscope.core.session import ChatSession
from draftscope.engine.engine import GenerationRequest
from draftscope.engine.events import FinalEvent
from draftscope.engine.fork import ForkedRequest
from draftscope.server.replies import Reply, _engine_error, _Gone, _last, _unless_gone, answer_chunks

_OVER = object()  # a choice's chunks have all been sent


def check_n(n: int, max_tokens: int | None, parallel: int, slots: int) -> None:
    """``n`` within what the server answers at once (its --parallel places and the model's slots): a
    400 naming the limit otherwise."""
    if n == 1:
        return
    if max_tokens == 0:
        raise _bad_n(f"n={n} asks for {n} answers, but max_tokens 0 writes none (it only reads the prompt): send n=1")
    limit = min(parallel, slots)
    if n > limit:
        why = f"--parallel {parallel}" if parallel <= slots else f"the model holds {slots} answers at once"
        raise _bad_n(f"n={n} but this server answers at most {limit} at once ({why})")


def _bad_n(message: str) -> p.ApiError:
    return p.ApiError(400, message, param="n", code="invalid_value")


class RequestTicket(Protocol):
    """What a choice's part asks of its request's place (server/asgi.py's Ticket)."""

    answers: int
    answering: bool

    async def turn(self) -> None: ...

    def answer_over(self) -> None: ...


class ChoiceTicket:
    """One choice's part of its request's place: its answer gives back its answering place at its end,
    and the last choice's end the request's."""

    def __init__(self, ticket: RequestTicket) -> None:
        self.ticket = ticket
        self.answering = False  # handed to its answer, which gives the part back when it ends
        self.held = True

    async def turn(self) -> None:
        await self.ticket.turn()  # taken for every choice before the first began: at once

    def release(self) -> None:
        if self.held:
            self.held = False
            self.ticket.answer_over()


class Answers(Protocol):
    """What the choices ask of the server's answerer (server/asgi.py's Answerer)."""

    def events(self, session: ChatSession, request: GenerationRequest, ticket: ChoiceTicket) -> AsyncGenerator: ...


async def answer_choices(
    request: Request,
    ticket: RequestTicket,
    answerer: Answers,
    replies: Sequence[Reply],
    sessions: Sequence[ChatSession],
    gens: Sequence[ForkedRequest],
    asked: p.ChatRequest | p.CompletionRequest,
):
    """The n answers (each its reply, session and forked request), whole or streamed as ``asked``;
    None when the client went away."""
    parts = await shares(request, ticket, len(gens))
    if parts is None:
        return None
    streams = [answerer.events(session, gen, part) for session, gen, part in zip(sessions, gens, parts)]
    try:
        if not asked.stream:
            return await whole_replies(request, replies, streams)
        stops = gens[0].stop_strings
        return await streamed_replies(request, replies, streams, stops, include_usage=asked.include_usage)
    finally:
        give_back_unbegun(parts)


async def shares(request: Request, ticket: RequestTicket, n: int) -> list[ChoiceTicket] | None:
    """Once the request holds an answering place for each of its ``n`` choices (in arrival order, all
    before any answer begins: two requests of several choices never wait on each other's places), a
    part of its ticket for each choice; None when the client left meanwhile."""
    ticket.answers = n
    try:
        await _unless_gone(request, ticket.turn())
    except _Gone:
        return None
    ticket.answering = True  # from here each choice gives its part back
    return [ChoiceTicket(ticket) for _ in range(n)]


def give_back_unbegun(parts: Sequence[ChoiceTicket]) -> None:
    """The parts of choices whose answer never began (the client left first) given back."""
    for part in parts:
        if not part.answering:
            part.release()


async def whole_replies(request: Request, replies: Sequence[Reply], streams: Sequence[AsyncGenerator]):
    """The n answers in one response once all are over, ``choices`` in index order; None when the
    client went away."""
    try:
        finals = await _all(request, [_last(s) for s in streams])
    except p.ApiError:
        raise
    except _Gone:
        return None
    except Exception as exc:
        raise _engine_error(exc) from exc
    finally:
        await _close(streams)
    request.state.completion_tokens = sum(f.stats.tokens for f in finals)
    failed = next((f for f in finals if f.finish_reason == "error"), None)
    if failed is not None:
        raise p.ApiError(500, failed.error or "generation failed", type="server_error")
    bodies = [reply.whole(final) for reply, final in zip(replies, finals)]
    body = bodies[0]
    body["choices"] = [
        {**b["choices"][0], "index": reply.index, "draftscope": b.pop("draftscope")}  # each choice's seed and figures
        for reply, b in sorted(zip(replies, bodies), key=lambda rb: rb[0].index)
    ]
    body["usage"] = usage(replies[0].prompt_tokens, finals)
    return JSONResponse(body)


def usage(prompt_tokens: int, finals: Sequence[FinalEvent]) -> dict:
    """OpenAI's usage of n answers: the prompt once (with what the cache held of it before, as the
    choice that read it found it), the completion tokens of every choice."""
    kept = [f for f in finals if f.stats.prompt_kept is not None]
    reader = min(kept, key=lambda f: f.stats.prompt_kept or 0) if kept else finals[0]
    out = responses.usage(prompt_tokens, reader.stats)
    completion = sum(f.stats.tokens for f in finals)
    out.update(completion_tokens=completion, total_tokens=prompt_tokens + completion)
    return out


async def streamed_replies(
    request: Request,
    replies: Sequence[Reply],
    streams: Sequence[AsyncGenerator],
    stop_strings: Sequence[str],
    *,
    include_usage: bool,
):
    """The n answers as one stream of server-sent events. Every choice's first event is awaited here,
    so a bad prompt is an HTTP error (and a client that leaves meanwhile is noticed)."""
    try:
        first = await _all(request, [s.__anext__() for s in streams])
    except BaseException as exc:
        await _close(streams)
        if isinstance(exc, _Gone):
            return None
        if isinstance(exc, Exception) and not isinstance(exc, p.ApiError):
            raise _engine_error(exc) from exc
        raise
    return StreamingResponse(
        _merged(request, replies, first, streams, stop_strings, include_usage),
        media_type="text/event-stream",
        headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"},
    )


async def _all(request: Request, awaitables: list) -> list:
    """Every one awaited (a step of each choice's event stream) unless the client goes (_Gone); on
    any failure the others are cancelled too (which cancels their answers)."""
    tasks = [asyncio.ensure_future(a) for a in awaitables]
    try:
        return await _unless_gone(request, asyncio.gather(*tasks))
    finally:
        for task in tasks:
            task.cancel()  # nothing, where it is done
        await asyncio.gather(*tasks, return_exceptions=True)


async def _merged(
    request: Request, replies: Sequence[Reply], first: list, streams: Sequence, stops: Sequence[str], with_usage: bool
):
    """Every choice's chunks as they come (each names its index), then the usage of all, then [DONE]."""
    heard: asyncio.Queue = asyncio.Queue()
    finals: list[FinalEvent | None] = [ev if isinstance(ev, FinalEvent) else None for ev in first]

    async def relay(i: int) -> None:
        try:
            noted = _noting(streams[i], finals, i)
            async with contextlib.aclosing(answer_chunks(request, replies[i], first[i], noted, stops)) as chunks:
                async for chunk in chunks:
                    heard.put_nowait(chunk)
        finally:
            heard.put_nowait(_OVER)

    relays = [asyncio.create_task(relay(i)) for i in range(len(streams))]
    try:
        over = 0
        while over < len(relays):
            chunk = await heard.get()
            if chunk is _OVER:
                over += 1
            else:
                yield chunk
        for relay_task in relays:  # a relay's own failure (not an answer's: those were sent as chunks)
            relay_task.result()
        done = [f for f in finals if f is not None]
        request.state.completion_tokens = sum(f.stats.tokens for f in done)
        if with_usage and len(done) == len(finals):
            yield replies[0].usage_event(usage(replies[0].prompt_tokens, done))
        yield "data: [DONE]\n\n"
    finally:
        for relay_task in relays:
            relay_task.cancel()
        await asyncio.gather(*relays, return_exceptions=True)
        await _close(streams)


async def _noting(events: AsyncGenerator, finals: list, i: int):
    """``events`` as they come, the FinalEvent noted as choice ``i``'s."""
    async with contextlib.aclosing(events):
        async for ev in events:
            if isinstance(ev, FinalEvent):
                finals[i] = ev
            yield ev


async def _close(streams: Sequence[AsyncGenerator]) -> None:
    """Every choice's event stream closed (a running answer is cancelled and kept so far)."""
    for stream in streams:
        with contextlib.suppress(Exception):
            await stream.aclose()
