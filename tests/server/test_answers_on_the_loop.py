"""A served answer has no thread of its own (issue 64): its events are awaited on the server's event
loop, fed from the model's stepper thread. Two answers streamed at once (two slots) interleave and
finish with no thread per answer, and a client that walks away frees its answering place and its
slot for the next request, its answer kept so far. A live server on a tiny model, real HTTP clients."""

from __future__ import annotations

import json
import threading
import time

import httpx2 as httpx
import pytest
from engine_fixtures import tiny_llama
from runtime_helpers import runtime_for

from draftscope.drafters import ContextDrafter
from draftscope.engine.backends.pytorch.torch_slots import TorchSlotsBackend
from draftscope.engine.engine import Engine
from draftscope.server import ServerConfig, ServerThread, create_app
from draftscope.storage import HistoryStore

# threads an answer may meet besides the stepper: the server's body parsing and its one writer
POOLS = ("draftscope-parse", "draftscope-record")


@pytest.fixture
def served(tokenizer, tmp_path):
    started = []

    def start(*, parallel: int, queue_limit: int = 8, max_new_tokens: int = 30, pace: float = 0.01):
        backend = TorchSlotsBackend(tiny_llama(len(tokenizer), seed=3, sharpen=4.0), tokenizer, slots=parallel)
        backend.name = "tiny"
        engine = Engine(backend=backend)
        engine.eos_ids = set()  # every answer runs to its length
        decode = backend.decode_many

        def paced(work):  # 10 ms a forward: answers long enough to overlap and to walk away from
            time.sleep(pace)
            return decode(work)

        backend.decode_many = paced
        store = HistoryStore(tmp_path / "h.sqlite3")
        runtime = runtime_for(engine, max_new_tokens=max_new_tokens, drafters=lambda: [ContextDrafter()])
        config = ServerConfig(parallel=parallel, queue_limit=queue_limit)
        server = ServerThread(create_app(runtime, history=store, config=config), port=0).start()
        started.append(server)
        return server, engine, store

    yield start
    for server in started:
        server.stop()


def body(content: str, tokens: int) -> dict:
    return {
        "model": "tiny",
        "stream": True,
        "max_tokens": tokens,
        "temperature": 0,
        "messages": [{"role": "user", "content": content}],
    }


def wait_until(condition, what: str, seconds: float = 10.0) -> None:
    deadline = time.monotonic() + seconds
    while not condition():
        assert time.monotonic() < deadline, f"never happened: {what}"
        time.sleep(0.01)


def test_answers_streamed_at_once_interleave_and_finish_with_no_thread_of_their_own(served):
    server, engine, _ = served(parallel=2)
    before = {t.name for t in threading.enumerate()}
    both_stepping = threading.Barrier(3, timeout=20)
    steps: dict[int, int] = {0: 0, 1: 0}
    finals: dict[int, str] = {}

    def client(i: int) -> None:
        with httpx.stream("POST", server.url + "/chat/completions", json=body(f"question {i}", 40), timeout=30) as r:
            for line in r.iter_lines():
                if not line.startswith("data: {"):
                    continue
                choice = json.loads(line[6:])["choices"][0]
                if choice["finish_reason"]:
                    finals[i] = choice["finish_reason"]
                elif choice["delta"].get("content"):
                    steps[i] += 1
                    if steps[i] == 1:
                        both_stepping.wait()

    clients = [threading.Thread(target=client, args=(i,), name=f"client-{i}") for i in range(2)]
    for t in clients:
        t.start()
    both_stepping.wait()  # both answers are writing
    during = {t.name for t in threading.enumerate()} - before - {"client-0", "client-1"}
    answering = engine.stepper.busy
    for t in clients:
        t.join(60)
    assert answering == 2, "the two answers were not in their slots at once"
    assert finals == {0: "length", 1: "length"} and all(steps.values())
    unexpected = {name for name in during if name != "stepper" and not name.startswith(POOLS)}
    assert not unexpected, f"threads beside the stepper while answering: {unexpected}"
    assert engine.stepper.mean_answers > 1.2, "their steps did not share forwards"


def test_a_client_that_walks_away_frees_its_place_and_slot_and_its_answer_is_kept_so_far(served):
    server, engine, store = served(parallel=1, queue_limit=0)
    answerer = server.app.state.answerer
    with httpx.stream("POST", server.url + "/chat/completions", json=body("leave", 2000), timeout=30) as r:
        for line in r.iter_lines():
            if '"draftscope"' in line:
                break  # one step arrived: walk away
    wait_until(lambda: answerer.in_flight == 0, "the request gave its place back")
    wait_until(lambda: engine.stepper.busy == 0, "the answer gave its slot back")
    (conversation,) = store.conversations()
    kept = store.messages(conversation.id)[-1]
    assert kept.stats["finish_reason"] == "cancel" and kept.stats["tokens"] < 2000
    # the only place is free again: the next request is answered, not refused (queue limit 0) nor kept waiting
    reply = httpx.post(server.url + "/chat/completions", json={**body("next", 3), "stream": False}, timeout=30)
    assert reply.status_code == 200 and reply.json()["usage"]["completion_tokens"] == 3


def test_an_answer_running_when_the_server_stops_is_kept_so_far(served):
    """A restart of the server (a port changed in the window) cancels what it is answering; the cut
    answers are recorded as a client's leaving records them, not lost with the event loop."""
    # 50 ms a forward: the answer's end is far past the server's 2 s graceful stop
    server, engine, store = served(parallel=1, max_new_tokens=1000, pace=0.05)
    streamed = threading.Event()

    def client() -> None:
        try:
            with httpx.stream("POST", server.url + "/chat/completions", json=body("stop", 2000), timeout=30) as r:
                for line in r.iter_lines():
                    if '"draftscope"' in line:
                        streamed.set()
        except httpx.HTTPError:
            pass  # the server went away mid-stream

    reader = threading.Thread(target=client, name="client-stop")
    reader.start()
    assert streamed.wait(20), "no step was streamed"
    server.stop(timeout=30)
    reader.join(30)
    (conversation,) = store.conversations()
    kept = store.messages(conversation.id)[-1]
    assert kept.role == "assistant" and kept.stats["finish_reason"] == "cancel" and kept.stats["tokens"] < 2000
    assert engine.stepper.busy == 0, "the cut answer gave its slot back"
