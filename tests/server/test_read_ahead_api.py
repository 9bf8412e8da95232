"""Reading ahead through the API (issue 61, item 2): a request with ``max_tokens: 0`` (or
llama-server's ``n_predict: 0``) reads its prompt into the cache and returns at once with its
usage, writing nothing and keeping no conversation; the next request reads only what is new and
answers what a cold read answers. A live server on a tiny model, a real HTTP client on 127.0.0.1."""

from __future__ import annotations

import json

import httpx2 as httpx
import pytest
from engine_fixtures import tiny_llama
from runtime_helpers import runtime_for

from draftscope.drafters import ContextDrafter
from draftscope.engine.engine import Engine
from draftscope.server import ServerThread, create_app
from draftscope.storage import HistoryStore

QUESTION = [
    {"role": "system", "content": "You answer questions about the boiler manual."},
    {"role": "user", "content": "The boiler is serviced every 18 months by a registered engineer. " * 2},
]


@pytest.fixture
def serve(tokenizer, tmp_path):
    started = []

    def start():
        engine = Engine(tiny_llama(len(tokenizer), seed=3, sharpen=4.0), tokenizer, name="tiny")
        engine.eos_ids = set()
        runtime = runtime_for(engine, max_new_tokens=6, drafters=lambda: [ContextDrafter()])
        history = HistoryStore(tmp_path / f"h{len(started)}.sqlite3")
        server = ServerThread(create_app(runtime, history=history), port=0).start()
        started.append(server)
        return server, history

    yield start
    for server in started:
        server.stop()


def chat(server, **fields) -> dict:
    reply = httpx.post(
        server.url + "/chat/completions", json={"model": "tiny", "messages": QUESTION, **fields}, timeout=60
    )
    assert reply.status_code == 200, reply.text
    return reply.json()


def cached(reply: dict) -> int:
    return reply["usage"].get("prompt_tokens_details", {}).get("cached_tokens", 0)


@pytest.mark.parametrize("field", ["max_tokens", "max_completion_tokens", "n_predict"])
def test_max_tokens_0_reads_the_prompt_and_the_next_request_reads_only_the_rest(serve, field):
    server, history = serve()
    warmed = chat(server, **{field: 0})
    prompt = warmed["usage"]["prompt_tokens"]
    assert warmed["choices"][0]["message"]["content"] == "" and warmed["usage"]["completion_tokens"] == 0
    assert warmed["choices"][0]["finish_reason"] == "length"
    assert history.conversations() == [], "a read ahead is no conversation of the user's"
    answered = chat(server, max_tokens=5, temperature=0)
    assert cached(answered) == prompt - 1, "all but the last prompt token came from the read ahead"

    cold_server, _ = serve()
    cold = chat(cold_server, max_tokens=5, temperature=0)
    assert cached(cold) == 0
    assert answered["choices"][0]["message"]["content"] == cold["choices"][0]["message"]["content"]


def test_n_predict_minus_1_is_llama_servers_no_limit(serve):
    server, _ = serve()
    reply = chat(server, n_predict=-1, temperature=0)
    assert reply["usage"]["completion_tokens"] == 6, "the settings' length, as if left out"


def test_a_streamed_read_ahead_ends_at_once_with_its_usage(serve):
    server, _ = serve()
    body = {"model": "tiny", "messages": QUESTION, "max_tokens": 0, "stream": True}
    body["stream_options"] = {"include_usage": True}
    with httpx.stream("POST", server.url + "/chat/completions", json=body, timeout=60) as reply:
        assert reply.status_code == 200
        lines = [line for line in reply.iter_lines() if line.startswith("data: ")]
    assert lines[-1] == "data: [DONE]"
    chunks = [json.loads(line[6:]) for line in lines[:-1]]
    said = "".join(c["choices"][0]["delta"].get("content") or "" for c in chunks if c["choices"])
    assert said == ""
    assert [c["choices"][0]["finish_reason"] for c in chunks if c["choices"]][-1] == "length"
    assert chunks[-1]["usage"]["completion_tokens"] == 0 and chunks[-1]["usage"]["prompt_tokens"] > 0


def test_an_answer_does_not_queue_behind_a_read_ahead_in_the_server(serve, monkeypatch):
    """With one answer at a time, a read ahead still reading must not hold the only answering place:
    the answer reaches the stepper, which makes the read ahead give way within a chunk."""
    import asyncio
    import threading

    from draftscope.core.session import ChatSession

    server, _ = serve()
    holding, release = threading.Event(), threading.Event()
    original = ChatSession.stream_async

    async def stream_async(self, request, **kwargs):
        if request.background:  # a read ahead that is still reading
            holding.set()
            await asyncio.to_thread(release.wait, 60)
        async for event in original(self, request, **kwargs):
            yield event

    monkeypatch.setattr(ChatSession, "stream_async", stream_async)
    ahead = threading.Thread(target=lambda: chat(server, max_tokens=0))
    ahead.start()
    try:
        assert holding.wait(30)
        reply = httpx.post(
            server.url + "/chat/completions",
            json={"model": "tiny", "messages": QUESTION, "max_tokens": 3, "temperature": 0},
            timeout=20,
        )
        assert reply.status_code == 200 and reply.json()["usage"]["completion_tokens"] == 3
        assert ahead.is_alive(), "answered while the read ahead was still reading"
    finally:
        release.set()
        ahead.join(60)
