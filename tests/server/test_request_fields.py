"""Honoured or refused, never ignored (issue 65): every field of OpenAI's chat and completions requests
and llama-server's common extensions (server/request_fields.py) is walked. A refused field set to a value
that would change the answer is a 400 naming it; set to its neutral value it is accepted; an inert one
is accepted; llama-server's names for our fields are read as ours."""

import httpx2 as httpx
import pytest
from engine_fixtures import tiny_llama
from runtime_helpers import runtime_for

from draftscope.engine.engine import Engine
from draftscope.server import ServerConfig, ServerThread, create_app
from draftscope.server.request_fields import ALIASES, INERT, REFUSED

ASK = {"messages": [{"role": "user", "content": "Say something."}], "max_tokens": 4}
# a value of each refused field that would change the answer
CHANGING = {
    "logit_bias": {"5": 10},
    "audio": {"voice": "alloy", "format": "wav"},
    "modalities": ["text", "audio"],
    "prediction": {"type": "content", "content": "x"},
    "frequency_penalty": 0.5,
    "presence_penalty": 0.5,
    "reasoning_effort": "high",
    "web_search_options": {"search_context_size": "low"},
    "echo": True,
    "best_of": 3,
    "mirostat": 2,
    "typical_p": 0.5,
    "tfs_z": 0.9,
    "dynatemp_range": 0.5,
    "dry_multiplier": 0.8,
    "xtc_probability": 0.5,
    "ignore_eos": True,
    "samplers": ["top_k", "temperature"],
}
INERT_VALUES = {
    "user": "u-1",
    "metadata": {"a": "b"},
    "store": False,
    "service_tier": "auto",
}


@pytest.fixture(scope="module")
def url(tokenizer):
    engine = Engine(tiny_llama(len(tokenizer), seed=3, sharpen=4.0), tokenizer, name="tiny")
    engine.eos_ids = set()
    server = ServerThread(create_app(runtime_for(engine, max_new_tokens=30), config=ServerConfig()), port=0).start()
    yield server.url
    server.stop()


def post(url, **fields):
    return httpx.post(url + "/chat/completions", json={**ASK, **fields}, timeout=60)


def test_the_walk_covers_every_refused_and_inert_field():
    assert set(CHANGING) == set(REFUSED) and set(INERT_VALUES) == set(INERT)


@pytest.mark.parametrize("name", sorted(REFUSED))
def test_a_field_not_served_is_a_400_naming_it_unless_it_changes_nothing(url, name):
    r = post(url, **{name: CHANGING[name]})
    assert r.status_code == 400, name
    error = r.json()["error"]
    assert error["param"] == name and error["code"] == "unsupported_parameter" and name in error["message"]
    for neutral in REFUSED[name]:
        assert post(url, **{name: neutral}).status_code == 200, (name, neutral)


def test_inert_fields_are_accepted(url):
    assert post(url, **INERT_VALUES).status_code == 200


def test_llama_servers_names_are_read_as_ours(url):
    def said(**fields):
        reply = post(url, temperature=0.9, seed=5, max_tokens=30, **fields)
        return reply.json()["choices"][0]["message"]["content"]

    free = said(repetition_penalty=1.0)
    assert said(repeat_penalty=8.0) == said(repetition_penalty=8.0) != free, "a penalty that changes the answer"
    assert said(repetition_penalty=3.0, repeat_last_n=2) == said(repetition_penalty=3.0, repetition_window=2)
    assert said(repetition_penalty=8.0, repeat_last_n=0) == free, "llama-server's 0: the penalty off"
    assert post(url, repeat_last_n=-1).status_code == 200, "llama-server's -1: the whole context"
    assert post(url, repeat_penalty=None, repetition_penalty=1.2).status_code == 200, "a null is no value"
    for theirs, ours in ALIASES.items():
        clash = post(url, **{theirs: 2, ours: 3})
        assert clash.status_code == 400 and clash.json()["error"]["param"] == theirs
