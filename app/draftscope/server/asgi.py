"""``draftscope serve``: an OpenAI-compatible server over the engine (Starlette on uvicorn).

One model, ``parallel`` answers at once, their steps sharing forwards (the engine's slots); further
requests wait in arrival order, at most ``queue_limit`` of them, and one more gets 429 before its
body is read: a request holds its place from then until its answer is over, its body's reading and
parsing included (``intake``). An answer has no thread of its own: its events are awaited on the
event loop, fed from the model's stepper thread (engine/event_feed.py), and one writer thread
records the answers. Every error is a JSON body in OpenAI's shape, an unexpected one a 500 in that
shape. A client that goes away cancels its answer within one decoding step (the engine checks
between steps). Streamed chunks carry, in the extension field ``draftscope``, the step's tokens and
which drafter drafted each; the last chunk carries the answer's statistics (τ, speedup). Answers go
to the app's history as conversations of their own when the server is given a history store.
Sending an answer, whole or streamed: ``replies``.
"""

from __future__ import annotations

import asyncio
import contextlib
import hmac
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

import draftscope.server.protocol as p
import draftscope.server.responses as responses
from draftscope.core.session import ChatSession
from draftscope.core.tools import ToolError, ToolPlan, template_message
from draftscope.core.tools import plan as plan_tools
from draftscope.documents import extract
from draftscope.documents.prompt import render
from draftscope.engine.engine import GenerationRequest
from draftscope.engine.fork import fork
from draftscope.engine.grammar import GrammarError, vocabulary_of
from draftscope.models.fim_tokens import NoFillInTheMiddle, fim_tokens, gguf_file
from draftscope.server.choices import ChoiceTicket, answer_choices, check_n
from draftscope.server.intake import PARSING_AT_ONCE, parse_json, read_body
from draftscope.server.logprob_fields import LogprobsWriter
from draftscope.server.replies import Reply, streamed_reply, whole_reply
from draftscope.server.request_log import RequestLog

LOOPBACK = {"127.0.0.1", "localhost", "::1"}
_END = object()


def check_bind(host: str, api_key: str | None) -> None:
    """Serving beyond this machine needs an API key."""
    if host not in LOOPBACK and not api_key:
        raise ValueError(
            f"serving on {host} makes the model reachable from other machines: give an API key "
            "(--api-key, or the DRAFTSCOPE_API_KEY environment variable)"
        )


@dataclass(frozen=True)
class Prepared:
    """A request's body as the answer needs it, made on the parsing pool."""

    request: p.ChatRequest | p.CompletionRequest
    shown: list[dict]  # the messages, with their files read
    prompt_ids: list[int]
    tools: ToolPlan | None = None  # the tools shown to the model, how its calls are read (core/tools.py)


@dataclass
class ServerConfig:
    api_key: str | None = None
    queue_limit: int = 8  # requests that may wait while `parallel` are answered
    parallel: int = 1  # answers decoded at once (the engine must hold as many slots to decode them together)
    keep_history: bool = True  # store answers in the history (when a store is given)
    budget: int | None = None  # draft nodes per step (None: adaptive), as `draftscope serve --budget`
    max_body_bytes: int = p.MAX_BODY_BYTES  # larger request bodies get 413, before they are read


class Ticket:
    """A request's place within the queue limit: taken before its body is read, given back when its
    answer is over or when it ends without one (refused, or its client gone); and, once its answer
    may begin, one of the ``parallel`` answering places (a read ahead takes none)."""

    def __init__(self, answerer: Answerer) -> None:
        self.answerer = answerer
        self.answering = False  # handed to an answer, which gives the place back when it ends
        self.held = True
        self.answers = 1  # the answering places it takes: one an answer (n: server/choices.py)
        self.placed = 0  # of those, held

    async def turn(self) -> None:
        """Until it holds an answering place for each of its answers, in arrival order."""
        while self.placed < self.answers:
            await self.answerer.places.acquire()
            self.placed += 1

    def answer_over(self) -> None:
        """One of its n answers is over: that answer's place back, and the request's with the last."""
        self.answers -= 1
        if self.placed:
            self.placed -= 1
            self.answerer.places.release()
        if self.answers <= 0:
            self.release()

    def release(self) -> None:
        while self.placed:
            self.placed -= 1
            self.answerer.places.release()
        if self.held:  # once: an answer's end and its handler's may both say so
            self.held = False
            self.answerer.in_flight -= 1


class Answerer:
    """The server's one admission: requests within the queue limit (429 beyond it) wait in arrival
    order for one of ``parallel`` answering places; their bodies parsed on a small pool of workers.
    An answer has no thread of its own: a task on the event loop awaits its events from the model's
    stepper (Engine.generate_async) and hands them to its request; one writer thread records every
    answer (history, learning)."""

    def __init__(self, runtime, *, history=None, config: ServerConfig | None = None, on_stored=None) -> None:
        self.runtime = runtime
        self.history, self.on_stored = history, on_stored
        self.config = config or ServerConfig()
        # answers at once; read aheads (max_tokens 0) take no place: the stepper gives them the lowest
        # priority and ends one in an answer's way within a chunk, so an answer never queues behind them
        self.places = asyncio.Semaphore(self.config.parallel)
        # its size is the bound on bodies parsed and files read at once (intake.PARSING_AT_ONCE)
        self.parsing = ThreadPoolExecutor(max_workers=PARSING_AT_ONCE, thread_name_prefix="draftscope-parse")
        # SQLite writes and the learner's hand-off, one answer at a time, off the event loop and the stepper
        self.recording = ThreadPoolExecutor(max_workers=1, thread_name_prefix="draftscope-record")
        self.in_flight = 0  # requests admitted and not over, body reading included; on the event loop only
        # running answers and their cancels (a task is only weakly held by the loop)
        self.answers: dict[asyncio.Task, threading.Event] = {}

    async def finish(self, timeout: float = 30.0) -> None:
        """At the server's stop: every running answer cancelled and awaited (each ends within a step
        and is recorded so far, as a client's leaving records it), then the pools closed."""
        for cancel in list(self.answers.values()):
            cancel.set()
        if self.answers:
            await asyncio.wait(list(self.answers), timeout=timeout)
        await asyncio.get_running_loop().run_in_executor(self.recording, lambda: None)  # the last records written
        self.close()

    def close(self) -> None:
        self.parsing.shutdown(wait=False, cancel_futures=True)
        self.recording.shutdown(wait=False)  # an answer being recorded is kept

    def admit(self) -> Ticket:
        """A place for a request, before any of its body is read; 429 when the queue is full."""
        answering = self.config.parallel
        if self.in_flight >= answering + self.config.queue_limit:
            raise p.ApiError(
                429,
                f"the server is busy: {self.in_flight - answering} requests are waiting (limit "
                f"{self.config.queue_limit}); try again shortly",
                type="rate_limit_error",
                code="queue_full",
            )
        self.in_flight += 1
        return Ticket(self)

    async def parsed(self, work, *args):
        """``work(*args)`` on the parsing pool: off the event loop, at most PARSING_AT_ONCE at once."""
        return await asyncio.wrap_future(self.parsing.submit(work, *args))

    async def write(self, fn, *args):
        """``fn(*args)`` on the one writer thread (an answer's recording)."""
        return await asyncio.wrap_future(self.recording.submit(fn, *args))

    def session(self, shown: list[dict], *, answers: bool = True) -> ChatSession:
        """A request's conversation: kept in the app's history as one of its own ("API · …") once
        it is answered, when the server keeps history (not a read ahead: ``answers`` false, nothing written)."""
        keep = answers and self.history is not None and self.config.keep_history
        session = ChatSession(self.runtime, history=self.history if keep else None, defer=True, title_prefix="API · ")
        if keep and self.on_stored is not None:

            def stored(_final, message_id: int | None) -> None:  # told on the writer thread, once recorded
                if message_id is not None:
                    self.on_stored(session.conversation_id)

            session.events.answer_ended.connect(stored)
        for m in shown:
            if m["role"] in ("user", "assistant"):
                session.say(m["content"], role=m["role"], files=m.get("sent", ()))
        return session

    def read_files(self, shown: list[dict]) -> list[dict]:
        """The messages with their files read (a file that cannot be read: 400 naming it and why) and
        prepared as the model will read them (``sent``; the last question also gets the passages of
        the runtime's documents folder), each message's ``model`` text rendered."""
        session = ChatSession(self.runtime)
        out = []
        last_user = max((i for i, m in enumerate(shown) if m["role"] == "user"), default=-1)
        for i, m in enumerate(shown):
            attachments = []
            for part in m.get("files") or ():
                try:
                    # extract.read_bytes, read when called (tests put a slow reader in its place)
                    attachments.append(extract.read_bytes(part.filename, part.data, part.mime))
                except extract.AttachmentError as exc:
                    raise p.ApiError(400, str(exc), param=part.param, code="unreadable_file") from exc
            try:  # the documents folder answers the last question only (the earlier ones were answered)
                sent = session.attach(m["content"], attachments, documents=i == last_user)
            except ValueError as exc:
                raise p.ApiError(400, str(exc), param="messages", code="context_length_exceeded") from exc
            session.say(m["content"], role=m["role"], files=sent)
            out.append({**m, "sent": sent, "model": render(m["content"], sent)})
        return out

    async def events(self, session: ChatSession, request: GenerationRequest, ticket: Ticket | ChoiceTicket):
        """The answer's StepEvents then its FinalEvent, as they come, once it has its turn. Closing this
        generator (a client that went away) cancels the answer, which runs on to its cancel (within a
        step) and is kept so far; its end gives the ticket back."""
        cancel = request.cancel = threading.Event()
        if not request.background:
            await ticket.turn()
        heard: asyncio.Queue = asyncio.Queue()
        ticket.answering = True  # from here the answer's end gives the place back
        answer = asyncio.create_task(self._answer(session, request, ticket, heard.put_nowait))
        self.answers[answer] = cancel
        answer.add_done_callback(lambda task: self.answers.pop(task, None))
        try:
            while (item := await heard.get()) is not _END:
                if isinstance(item, Exception):
                    raise item
                yield item
        finally:
            cancel.set()  # a no-op when the answer is over

    async def _answer(
        self, session: ChatSession, request: GenerationRequest, ticket: Ticket | ChoiceTicket, put
    ) -> None:
        """The answer to its end, whether or not its request still listens: a task of its own, so a
        client that leaves cancels it (its cancel event) rather than dropping it unrecorded."""
        try:
            async with contextlib.aclosing(session.stream_async(request, write=self.write)) as events:
                async for event in events:
                    put(event)
        except Exception as exc:  # handed to the request, which answers with it
            put(exc)
        finally:
            put(_END)
            ticket.release()


def _error(exc: p.ApiError) -> JSONResponse:
    return JSONResponse(exc.body(), status_code=exc.status)


def create_app(
    runtime, *, history=None, config: ServerConfig | None = None, on_stored=None, on_request=None
) -> Starlette:
    """A server over ``runtime`` (draftscope.core.runtime): its settings give what a request leaves out
    (sampling, max tokens), read at each request (the app's live settings);
    ``on_stored(conversation_id)`` hears of each answer kept in ``history``; ``on_request(line)``
    of each request served (server/request_log.py). Served answers are learned from when the
    runtime learns (the server beside the window)."""
    answerer = Answerer(runtime, history=history, config=config, on_stored=on_stored)
    api = Api(runtime, answerer)
    app = Starlette(
        routes=api.routes(),
        # starlette calls a handler with the class it is registered for; its types ask for any Exception
        exception_handlers={HTTPException: _http_error, Exception: _unexpected_error},  # type: ignore[dict-item]
        lifespan=api.lifespan,
        middleware=[Middleware(RequestLog, on_line=on_request)] if on_request is not None else None,
    )
    app.state.answerer = answerer
    return app


async def _http_error(request: Request, exc: HTTPException):
    kind = "not_found" if exc.status_code == 404 else "invalid_request_error"
    message = f"{request.method} {request.url.path}: {exc.detail}"
    return JSONResponse(p.ApiError(exc.status_code, message, type=kind).body(), status_code=exc.status_code)


async def _unexpected_error(request: Request, exc: Exception):
    """What no handler expected (a defect): a 500 in OpenAI's shape rather than Starlette's plain
    text; Starlette then raises it again, so the server's log shows its traceback."""
    message = f"the server failed on {request.method} {request.url.path}: {type(exc).__name__}: {exc}"[:1000]
    return JSONResponse(p.ApiError(500, message, type="server_error").body(), status_code=500)


class Api:
    """The routes' handlers and the state they share: the runtime (its engine fixed when the app is
    made, its settings and documents read at each request) and the answerer (slots, queue, history)."""

    def __init__(self, runtime, answerer: Answerer) -> None:
        self.runtime, self.answerer = runtime, answerer
        self.config = answerer.config
        self.engine = runtime.engine
        self.model_id = self.engine.name

    def routes(self) -> list[Route]:
        return [
            Route("/v1/models", self.models, methods=["GET"]),
            Route("/v1/chat/completions", self.chat_completions, methods=["POST"]),
            Route("/v1/completions", self.completions, methods=["POST"]),
        ]

    @contextlib.asynccontextmanager
    async def lifespan(self, app):
        yield
        await self.answerer.finish()

    def authorise(self, request: Request) -> None:
        if not self.config.api_key:
            return
        header = request.headers.get("authorization", "")
        given = header[7:] if header.lower().startswith("bearer ") else ""
        if not hmac.compare_digest(given.encode(), self.config.api_key.encode()):
            raise p.ApiError(
                401,
                "invalid or missing API key (send 'Authorization: Bearer <key>')",
                type="invalid_request_error",
                code="invalid_api_key",
            )

    async def models(self, request: Request):
        try:
            self.authorise(request)
        except p.ApiError as exc:
            return _error(exc)
        return JSONResponse(
            {
                "object": "list",
                "data": [
                    {"id": self.model_id, "object": "model", "created": int(time.time()), "owned_by": "draftscope"}
                ],
            }
        )

    async def chat_completions(self, request: Request):
        return await _responding(self._admitted(request, self._prepare_chat, chat=True))

    async def completions(self, request: Request):
        return await _responding(self._admitted(request, self._prepare_completion, chat=False))

    async def _admitted(self, request: Request, prepare, *, chat: bool):
        """A request answered within the queue limit: its place taken before its body is read, the
        body parsed by ``prepare`` on the parsing pool, then answered."""
        self.authorise(request)
        ticket = self.answerer.admit()
        try:
            raw = await read_body(request, self.config.max_body_bytes)
            ready = await self.answerer.parsed(prepare, raw)
            return await self.answer(request, ready, ticket, chat=chat)
        finally:
            if not ticket.answering:  # refused, or gone, before its answer began
                ticket.release()

    def _prepare_chat(self, raw: bytes) -> Prepared:
        """On the parsing pool: the body checked, its files read, its prompt tokenized."""
        req = p.parse_chat(parse_json(raw))
        tools = self._tool_plan(req)
        self._warm_grammar(req.sampling)
        shown = req.messages
        if any(m["files"] for m in shown) or self.runtime.documents is not None:
            shown = self.answerer.read_files(shown)
        return Prepared(req, shown, self._chat_prompt(shown, tools), tools)

    def _tool_plan(self, req: p.ChatRequest) -> ToolPlan | None:
        """The request's tools fitted to the model (400 where its template has none); a required call's
        grammar holds the answer (compiled here, on the intake's worker)."""
        try:
            tools = plan_tools(req.tools, self.engine.tokenizer)
        except ToolError as exc:
            raise p.ApiError(400, str(exc), param=exc.param) from exc
        if tools is not None and tools.grammar is not None:
            if req.sampling.grammar is not None:
                words = "a required tool call and a response_format cannot both hold the answer"
                raise p.ApiError(400, words, param="tool_choice")
            req.sampling.grammar = tools.grammar
        return tools

    def _warm_grammar(self, sampling: p.Sampling) -> None:
        """A JSON answer's vocabulary built here, on the intake's worker, not on the event loop (its
        first build takes seconds; every answer after finds it kept)."""
        if sampling.grammar is None:
            return
        try:
            vocabulary_of(self.engine.tokenizer, self.engine.vocab, self.engine.eos_ids)
        except GrammarError as exc:
            raise p.ApiError(400, str(exc), param="response_format") from exc

    def _chat_prompt(self, shown: list[dict], tools: ToolPlan | None = None) -> list[int]:
        try:
            return self.engine.encode_chat(
                [template_message(m) for m in shown], tools.request.tools if tools is not None else None
            )
        except Exception as exc:  # a template that refuses these messages
            raise p.ApiError(
                400, f"the messages cannot be rendered with the model's chat template: {exc}", param="messages"
            ) from exc

    def _prepare_completion(self, raw: bytes) -> Prepared:
        req = p.parse_completion(parse_json(raw))
        self._warm_grammar(req.sampling)
        if req.suffix:
            prompt_ids = self._fim_prompt(req.prompt, req.suffix)
        else:
            prompt_ids = list(self.engine.tokenizer(req.prompt, add_special_tokens=False)["input_ids"])
        return Prepared(req, [{"role": "user", "content": req.prompt}], prompt_ids)

    def _fim_prompt(self, before: str, after: str) -> list[int]:
        """Fill-in-the-middle: the model's own FIM prompt (models/fim_tokens.py); 400 for a model without one."""
        try:
            fim = fim_tokens(self.engine.tokenizer, gguf_file(self.engine.backend.source))
        except NoFillInTheMiddle as exc:
            raise p.ApiError(400, f"{self.model_id}: {exc}", param="suffix", code="unsupported_parameter") from exc
        return fim.prompt(self.engine.tokenizer, before, after)

    async def answer(self, request: Request, ready: Prepared, ticket: Ticket, *, chat: bool):
        """The answer as one response or as a stream of events; None when the client went away."""
        req = ready.request
        n = req.sampling.n
        check_n(n, req.sampling.max_tokens, self.config.parallel, self.engine.stepper.size)
        rid, created = responses.new_id("chatcmpl" if chat else "cmpl"), int(time.time())
        replies = [self._reply(ready, rid, created, index, chat=chat) for index in range(n)]
        sessions = [self.answerer.session(ready.shown, answers=req.sampling.max_tokens != 0) for _ in range(n)]
        gens = [self._generation(session, req.sampling, ready.prompt_ids) for session in sessions]
        if n > 1:  # n answers to one prompt, which is read once
            return await answer_choices(request, ticket, self.answerer, replies, sessions, fork(gens), req)
        reply, session, gen = replies[0], sessions[0], gens[0]
        events = self.answerer.events(session, gen, ticket)  # its answer queued at its first event
        if not req.stream:
            return await whole_reply(request, reply, events)
        return await streamed_reply(request, reply, events, gen.stop_strings)

    def _reply(self, ready: Prepared, rid: str, created: int, index: int, *, chat: bool) -> Reply:
        """How one answer (choice ``index`` of the request's n) is sent, with readers of its own."""
        req = ready.request
        return Reply(
            rid=rid,
            created=created,
            model_id=self.model_id,
            chat=chat,
            prompt_tokens=len(ready.prompt_ids),
            usage_chunk=req.include_usage and req.sampling.n == 1,  # n answers': once, after all of them
            logprobs=None if req.sampling.logprobs is None else LogprobsWriter(self.engine.tokenizer, chat=chat),
            calls=ready.tools.reader() if ready.tools is not None else None,
            index=index,
        )

    def _generation(self, session: ChatSession, sampling: p.Sampling, prompt_ids: list[int]) -> GenerationRequest:
        """The engine's request: what the client left out of sampling taken from the live settings
        (and the model's recommendation where it is used: core/sampling_defaults.py); what it left out
        of the length, the settings' limit (0 there: until the model stops)."""
        params = session.sampling(**sampling.overrides)
        gen = session.request(
            prompt_ids=prompt_ids,
            max_new_tokens=sampling.max_tokens,
            sampling=params,
            stop=sampling.stop,
            budget=self.config.budget,
        )
        gen.keep_cache = sampling.cache_prompt
        gen.grammar = sampling.grammar
        gen.logprobs = sampling.logprobs
        # a read ahead: the lowest priority, yielding to any answer within a chunk (with its drafters: the
        # first answer's measurement of verify costs happens in it, not in the answer that keeps its read)
        gen.background = sampling.max_tokens == 0
        return gen


async def _responding(handling):
    """The handler's response, its ApiError as the error body, or 499 when the client went away."""
    try:
        response = await handling
    except p.ApiError as exc:
        return _error(exc)
    return response if response is not None else JSONResponse({}, status_code=499)
