"""JSON answers through the official ``openai`` client (issue 65): ``response_format`` json_object and
json_schema (OpenAI's nested shape, llama-server's top-level one), ``parse`` with a Pydantic model,
streamed; every answer is JSON its schema accepts, even from a tiny random model. A schema that cannot
be used is a 400 that names the problem, never an answer written without it."""

import json
from typing import Literal

import httpx2 as httpx
import openai
import pydantic
import pytest
from engine_fixtures import tiny_llama
from runtime_helpers import runtime_for

from draftscope.drafters import ContextDrafter
from draftscope.engine.engine import Engine
from draftscope.server import ServerConfig, ServerThread, create_app

SCHEMA = {
    "type": "object",
    "properties": {"colour": {"enum": ["red", "green", "blue"]}, "ok": {"type": "boolean"}},
    "required": ["colour", "ok"],
    "additionalProperties": False,
}
ASK = [{"role": "user", "content": "A colour, as JSON."}]


class Pick(pydantic.BaseModel):
    colour: Literal["red", "green", "blue"]  # a random model writes a free string on for ever
    ok: bool


@pytest.fixture(scope="module")
def client(tokenizer):
    engine = Engine(tiny_llama(len(tokenizer), seed=3, sharpen=4.0), tokenizer, name="tiny")
    engine.eos_ids = set()  # a random model: the grammar's end, not an EOS, ends its JSON
    app = create_app(runtime_for(engine, max_new_tokens=60, drafters=lambda: [ContextDrafter()]), config=ServerConfig())
    server = ServerThread(app, port=0).start()
    yield openai.OpenAI(base_url=server.url, api_key="none")
    server.stop()


def schema_format(schema):
    return {"type": "json_schema", "json_schema": {"name": "pick", "schema": schema, "strict": True}}


@pytest.mark.parametrize("seed", [1, 2])
def test_a_json_schema_answer_is_json_the_schema_accepts(client, seed):
    reply = client.chat.completions.create(
        model="tiny", messages=ASK, response_format=schema_format(SCHEMA), temperature=0.8, seed=seed, max_tokens=60
    )
    value = json.loads(reply.choices[0].message.content)
    assert set(value) == {"colour", "ok"} and value["colour"] in {"red", "green", "blue"}
    assert reply.choices[0].finish_reason == "stop"


def test_json_object_and_llama_servers_shape_give_json(client):
    any_object = client.chat.completions.create(
        model="tiny", messages=ASK, response_format={"type": "json_object"}, max_tokens=60, temperature=0
    )
    text = any_object.choices[0].message.content
    if any_object.choices[0].finish_reason == "stop":  # a random model may write a long object: cut, not wrong
        assert isinstance(json.loads(text), dict)
    assert text.startswith("{")
    top_level = client.chat.completions.create(
        model="tiny",
        messages=ASK,
        response_format={"type": "json_schema", "schema": SCHEMA},  # llama-server's own shape
        max_tokens=60,
    )
    assert json.loads(top_level.choices[0].message.content)["colour"] in {"red", "green", "blue"}


def test_parse_with_a_pydantic_model_and_a_streamed_schema_answer(client):
    parsed = client.chat.completions.parse(model="tiny", messages=ASK, response_format=Pick, max_tokens=80, seed=3)
    assert isinstance(parsed.choices[0].message.parsed, Pick)
    pieces = client.chat.completions.create(
        model="tiny", messages=ASK, response_format=schema_format(SCHEMA), stream=True, max_tokens=60
    )
    text = "".join(chunk.choices[0].delta.content or "" for chunk in pieces if chunk.choices)
    assert json.loads(text)["colour"] in {"red", "green", "blue"}


@pytest.mark.parametrize(
    "response_format, words",
    [
        (schema_format({"type": "nonsense"}), "nonsense"),
        (schema_format({"type": "object", "properties": {"a": {"$ref": "#/nowhere"}}}), "nowhere"),
        ({"type": "json_schema"}, "needs its schema"),
        ({"type": "xml"}, "unknown response_format type"),
    ],
)
def test_a_schema_that_cannot_be_used_is_a_400_naming_it(client, response_format, words):
    r = httpx.post(
        str(client.base_url) + "chat/completions",
        json={"messages": ASK, "response_format": response_format},
    )
    assert r.status_code == 400
    error = r.json()["error"]
    assert error["param"] == "response_format" and words in error["message"], error
