"""``n`` answers to one request (server/choices.py, engine/fork.py) on a live server over a tiny model with
three slots: each choice is the answer a single request with its seed gives (seed s, s+1, ...), told in
its own statistics; the prompt is read by one choice and copied by the others; the usage counts the
prompt once and every choice's completion; a stream names each chunk's choice, each choice's text joins
into its whole answer, and the usage comes last; n over the server's answering places is a 400 naming
the limit. The official ``openai`` client with n=2, raw HTTP for the rest."""

from __future__ import annotations

import json
import time

import httpx2 as httpx
import openai
import pytest
from engine_fixtures import tiny_llama
from runtime_helpers import runtime_for

from draftscope.drafters import ContextDrafter
from draftscope.engine.backends.pytorch.torch_slots import TorchSlotsBackend
from draftscope.engine.engine import Engine
from draftscope.server import ServerConfig, ServerThread, create_app

PARALLEL = 3
SEED = 11


@pytest.fixture(scope="module")
def served(tokenizer):
    backend = TorchSlotsBackend(tiny_llama(len(tokenizer), seed=3, sharpen=8.0), tokenizer, slots=PARALLEL)
    backend.name = "tiny"
    engine = Engine(backend=backend)
    engine.eos_ids = set()  # every answer runs to its length
    runtime = runtime_for(engine, max_new_tokens=24, drafters=lambda: [ContextDrafter()])
    app = create_app(runtime, config=ServerConfig(parallel=PARALLEL))
    server = ServerThread(app, port=0).start()
    yield server, app, engine
    server.stop()


@pytest.fixture(scope="module")
def client(served):
    return openai.OpenAI(base_url=served[0].url, api_key="none")


def ask(content: str, **fields) -> dict:
    return {
        "model": "tiny",
        "messages": [{"role": "user", "content": content}],
        "temperature": 0.9,
        "max_tokens": 24,
        **fields,
    }


def post(served, path: str, body: dict) -> httpx.Response:
    return httpx.post(f"{served[0].url}/{path}", json=body, timeout=120)


def alone(served, content: str, seed: int) -> str:
    reply = post(served, "chat/completions", ask(content, seed=seed))
    assert reply.status_code == 200, reply.text
    return reply.json()["choices"][0]["message"]["content"]


def all_places_back(served) -> None:
    """Every answering place and queue place given back (within a few seconds: answers end within a step)."""
    answerer = served[1].state.answerer
    deadline = time.monotonic() + 10
    while answerer.in_flight or answerer.places._value != PARALLEL:
        assert time.monotonic() < deadline, (answerer.in_flight, answerer.places._value)
        time.sleep(0.02)


def test_the_openai_client_gets_n_choices_each_its_seeds_answer_the_prompt_read_once(served, client):
    content = "the river runs to the sea and the river runs to the"
    reply = client.chat.completions.create(**ask(content, n=2, seed=SEED))
    assert [c.index for c in reply.choices] == [0, 1]
    stats = [c.model_extra["draftscope"] for c in reply.choices]
    assert [s["seed"] for s in stats] == [SEED, SEED + 1]
    reads = sorted(s["prompt_tokens_read"] for s in stats)
    cached = reply.usage.prompt_tokens_details.cached_tokens
    assert reads == [1, reply.usage.prompt_tokens - cached], "one choice read the prompt; the other only its root"
    assert reply.usage.completion_tokens == sum(s["tokens"] for s in stats) == 48
    assert reply.usage.total_tokens == reply.usage.prompt_tokens + 48
    assert all(s["answers_per_forward"] > 1.5 for s in stats), "the choices stepped in shared forwards"
    texts = [c.message.content for c in reply.choices]
    assert texts[0] != texts[1], "two seeds, two answers"
    assert texts == [alone(served, content, SEED), alone(served, content, SEED + 1)]
    all_places_back(served)


def test_a_stream_names_each_chunks_choice_and_ends_with_the_usage(served):
    content = "green leaves fall and green leaves fall and green"
    body = ask(content, n=3, seed=SEED, stream=True, stream_options={"include_usage": True})
    texts, finishes, events = {0: "", 1: "", 2: ""}, {}, []
    with httpx.stream("POST", f"{served[0].url}/chat/completions", json=body, timeout=120) as r:
        assert r.status_code == 200
        for line in r.iter_lines():
            if line.startswith("data: "):
                events.append(line[6:])
    assert events[-1] == "[DONE]"
    chunks = [json.loads(e) for e in events[:-1]]
    usage = chunks[-1]
    assert usage["choices"] == [] and usage["usage"]["completion_tokens"] == 3 * 24
    for chunk in chunks[:-1]:
        (choice,) = chunk["choices"]
        texts[choice["index"]] += choice["delta"].get("content") or ""
        if choice["finish_reason"] is not None:
            finishes[choice["index"]] = chunk["draftscope"]["stats"]["seed"]
    assert finishes == {0: SEED, 1: SEED + 1, 2: SEED + 2}, "a finish chunk for each choice, with its seed"
    assert len({c["choices"][0]["index"] for c in chunks[:9]}) > 1, "the choices' chunks interleave"
    assert [texts[i] for i in range(3)] == [alone(served, content, SEED + i) for i in range(3)]
    all_places_back(served)


def test_plain_completions_take_n_too(served):
    reply = post(
        served,
        "completions",
        {"prompt": "one two three one two", "n": 2, "seed": 5, "max_tokens": 8, "temperature": 0.8},
    )
    assert reply.status_code == 200, reply.text
    choices = reply.json()["choices"]
    assert [c["index"] for c in choices] == [0, 1] and all(isinstance(c["text"], str) for c in choices)
    assert [c["draftscope"]["seed"] for c in choices] == [5, 6]


@pytest.mark.parametrize(
    "fields, words",
    [
        ({"n": PARALLEL + 1}, f"n={PARALLEL + 1} but this server answers at most {PARALLEL} at once (--parallel 3)"),
        ({"n": 2, "max_tokens": 0}, "max_tokens 0 writes none"),
        ({"n": 0}, "'n' must be between 1 and 128"),
    ],
)
def test_n_beyond_what_the_server_answers_is_a_400_naming_it(served, fields, words):
    reply = post(served, "chat/completions", ask("hello", **fields))
    assert reply.status_code == 400
    error = reply.json()["error"]
    assert error["param"] == "n" and words in error["message"], error
    all_places_back(served)


def test_a_client_that_leaves_a_stream_of_n_gives_every_place_back(served):
    body = ask("stars shine bright and stars shine", n=3, stream=True, max_tokens=200)
    with httpx.stream("POST", f"{served[0].url}/chat/completions", json=body, timeout=120) as r:
        lines = r.iter_lines()
        assert next(lines).startswith("data: ")  # the stream began; the client walks away
    all_places_back(served)
    assert served[2].stepper.busy == 0
