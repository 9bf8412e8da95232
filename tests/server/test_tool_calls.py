"""Tool calls (issue 65): tools shown to the model through its own chat template (Qwen2.5's, shipped in
tests/data), its answer read back into OpenAI's ``tool_calls`` in each family's format, a required call
held to a grammar so even a tiny random model calls validly, streamed as OpenAI streams calls, tool
results read back into the conversation, and every malformed piece a 400 naming it."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import httpx2 as httpx
import openai
import pytest
from engine.test_grammar import RandomTree
from engine_fixtures import tiny_llama
from runtime_helpers import runtime_for

from draftscope.core.tool_calls import CallReader
from draftscope.core.tool_formats import FORMATS, call_grammar, format_of, renders_tools
from draftscope.drafters import ContextDrafter
from draftscope.drafters.oracle import OracleDrafter
from draftscope.engine.engine import Engine, GenerationRequest
from draftscope.engine.sampling import SamplingParams
from draftscope.server import ServerConfig, ServerThread, create_app

QWEN_TEMPLATE = (Path(__file__).parent.parent / "data" / "qwen2.5_chat_template.jinja").read_text()
HERMES, MISTRAL, LLAMA3 = FORMATS
WEATHER = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "The weather in a city",
        "parameters": {
            "type": "object",
            "properties": {
                "city": {"enum": ["Paris", "Oslo"]},
                "days": {"type": "integer", "minimum": 1, "maximum": 9},
            },
            "required": ["city", "days"],
            "additionalProperties": False,
        },
    },
}
ADD = {
    "type": "function",
    "function": {
        "name": "add",
        "parameters": {
            "type": "object",
            "properties": {"a": {"type": "boolean"}},
            "required": ["a"],
            "additionalProperties": False,
        },
    },
}
TOOLS = [WEATHER, ADD]
ASK = [{"role": "user", "content": "The weather in Paris?"}]


@pytest.fixture(scope="module")
def qwen_tokenizer(tokenizer):
    tools = copy.deepcopy(tokenizer)
    tools.chat_template = QWEN_TEMPLATE
    return tools


def serve(tokenizer):
    engine = Engine(tiny_llama(len(tokenizer), seed=3, sharpen=4.0, max_positions=2048), tokenizer, name="tiny")
    engine.eos_ids = set()  # a random model: the grammar's end ends its call
    app = create_app(runtime_for(engine, max_new_tokens=80, drafters=lambda: [ContextDrafter()]), config=ServerConfig())
    return ServerThread(app, port=0).start()


@pytest.fixture(scope="module")
def client(qwen_tokenizer):
    server = serve(qwen_tokenizer)
    yield openai.OpenAI(base_url=server.url, api_key="none")
    server.stop()


@pytest.fixture(scope="module")
def chatml_url(tokenizer):
    server = serve(tokenizer)
    yield server.url
    server.stop()


def read(fmt, text, *, eager=False, step=None):
    reader = CallReader(fmt, frozenset({"get_weather", "add"}), eager=eager)
    deltas = []
    for i in range(0, len(text), step or len(text)):
        deltas += reader.push(text[i : i + (step or len(text))])
    deltas += reader.finish()
    assert "".join(d.get("content", "") for d in deltas) == reader.content
    return reader.content, [(c.name, json.loads(c.arguments)) for c in reader.calls]


PARIS = ("get_weather", {"city": "Paris"})
ONE = ("add", {"a": 1})


@pytest.mark.parametrize(
    ("fmt", "text", "content", "calls"),
    [
        (
            HERMES,
            'Let me look.\n<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>\n'
            '<tool_call>\n{"name": "add", "arguments": {"a": 1}}\n</tool_call>',
            "Let me look.",
            [PARIS, ONE],
        ),
        (HERMES, "a < b and <tool is no call", "a < b and <tool is no call", []),
        # small Qwen models write a call without its tags: the whole answer a call's JSON is that call
        (HERMES, ' {"name": "get_weather", "arguments": {"city": "Paris"}}\n', "", [PARIS]),
        (HERMES, '{"name": "get_weather", "arguments": {}} is how', None, []),
        (HERMES, '{"name": "nope", "arguments": {}}', None, []),
        (HERMES, '<tool_call>\n{"name": ["add"], "arguments": {}}\n</tool_call>', None, []),  # a name not a string
        (
            HERMES,
            'I try <tool_call>\n{"name": "unknown", "arguments": {}}\n</tool_call>',
            'I try <tool_call>\n{"name": "unknown", "arguments": {}}\n</tool_call>',
            [],
        ),
        (HERMES, '<tool_call>\n{"name": "add", "arguments": {"a": 1</tool_call>', None, []),
        (
            MISTRAL,
            '[TOOL_CALLS] [{"name": "get_weather", "arguments": {"city": "Paris"}}, {"name": "add", "arguments": {"a": 1}}]',
            "",
            [PARIS, ONE],
        ),
        (MISTRAL, '[{"name": "add", "arguments": {"a": 1}}]', "", [ONE]),  # the special token left out of the text
        (MISTRAL, "[1, 2] is a list", "[1, 2] is a list", []),
        (LLAMA3, '{"name": "get_weather", "parameters": {"city": "Paris"}}', "", [PARIS]),
        (
            LLAMA3,
            '<|python_tag|>{"name": "add", "parameters": {"a": 1}}; {"name": "add", "parameters": {"a": 1}}',
            "",
            [ONE, ONE],
        ),
        (LLAMA3, 'Say {"name": "add"}', 'Say {"name": "add"}', []),
    ],
)
def test_each_format_is_read_into_calls_alike_whole_and_streamed(fmt, text, content, calls):
    whole = read(fmt, text)
    assert whole == (text if content is None else content, calls)
    for step in (1, 4):
        assert read(fmt, text, step=step) == whole, "a stream, a few characters at a time, reads the same"


def test_json_that_is_no_call_streams_as_it_comes():
    """An answer of JSON with tools on offer is held only while it may still be a call without its tags."""
    reader = CallReader(HERMES, frozenset({"get_weather"}))
    assert reader.push('{"na') == [] and reader.push('me": "get_w') == []  # still maybe a call
    assert reader.push("eath") == []
    other = CallReader(HERMES, frozenset({"get_weather"}))
    assert other.push('{"colour": "red", ') == [{"content": '{"colour": "red",'}]  # no call: it streams
    named = CallReader(HERMES, frozenset({"get_weather"}))
    assert named.push('{"name": "Ada", "age": 3}') == [{"content": '{"name": "Ada", "age": 3}'}]


def test_a_grammar_held_call_streams_its_arguments_as_written():
    text = '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris", "days": 3}}\n</tool_call>'
    reader = CallReader(HERMES, frozenset({"get_weather"}), eager=True)
    deltas = [d for i in range(0, len(text), 3) for d in reader.push(text[i : i + 3])] + reader.finish()
    fragments = [d["tool_calls"][0]["function"]["arguments"] for d in deltas[1:]]
    assert deltas[0]["tool_calls"][0]["function"] == {"name": "get_weather", "arguments": ""}
    assert len(fragments) > 3 and "".join(fragments) == '{"city": "Paris", "days": 3}'


def test_the_format_and_the_tools_come_from_the_template(tokenizer, qwen_tokenizer):
    assert format_of(qwen_tokenizer) is HERMES and renders_tools(qwen_tokenizer)
    assert not renders_tools(tokenizer), "ChatML alone never shows tools"
    shown = qwen_tokenizer.apply_chat_template(ASK, tools=TOOLS, tokenize=False, add_generation_prompt=True)
    assert "<tools>" in shown and '"name": "get_weather"' in shown


def test_a_required_call_from_a_random_model_is_a_valid_call(client):
    for seed in (1, 2):
        reply = client.chat.completions.create(
            model="tiny",
            messages=ASK,
            tools=TOOLS,
            tool_choice="required",
            parallel_tool_calls=False,  # a random model calls on to the length limit where it may call again
            temperature=0.9,
            seed=seed,
        )
        choice = reply.choices[0]
        assert choice.finish_reason == "tool_calls" and choice.message.tool_calls
        for call in choice.message.tool_calls:
            assert call.id.startswith("call_") and call.type == "function"
            assert call.function.name in {"get_weather", "add"}
            arguments = json.loads(call.function.arguments)
            if call.function.name == "get_weather":
                assert arguments["city"] in {"Paris", "Oslo"} and 1 <= arguments["days"] <= 9


def test_a_call_the_length_limit_cuts_finishes_with_length(client):
    """A client must not run a call whose arguments the limit cut: then the finish says "length" (whole and
    streamed); calls whose arguments are whole say "tool_calls"."""
    cut = 0
    for limit in (36, 44, 52, 60, 80):
        ask = {"model": "tiny", "messages": ASK, "tools": TOOLS, "tool_choice": "required", "max_tokens": limit}
        choice = client.chat.completions.create(**ask, seed=1).choices[0]
        calls = choice.message.tool_calls or []
        whole = all(_is_json(c.function.arguments) for c in calls)
        assert choice.finish_reason == ("tool_calls" if calls and whole else "length"), (limit, calls)
        streamed = list(client.chat.completions.create(**ask, seed=1, stream=True))
        assert streamed[-1].choices[0].finish_reason == choice.finish_reason
        cut += bool(calls) and not whole
    assert cut, "no limit cut a call's arguments: the test asked nothing"


def _is_json(text):
    try:
        json.loads(text)
    except ValueError:
        return False
    return True


def test_a_tool_with_nested_models_is_called_by_their_definitions(client):
    """Pydantic writes a nested model as ``$defs`` and ``$ref`` (as the Agents SDK and LangChain send tools): a
    required call holds to them, where a grammar nesting them under the call would find no definitions."""
    place = {"type": "object", "properties": {"city": {"enum": ["Paris", "Oslo"]}}, "required": ["city"]}
    parameters = {
        "$defs": {"Place": {**place, "additionalProperties": False}},
        "type": "object",
        "properties": {"where": {"$ref": "#/$defs/Place"}},
        "required": ["where"],
        "additionalProperties": False,
    }
    tool = {"type": "function", "function": {"name": "visit", "parameters": parameters}}
    reply = client.chat.completions.create(
        model="tiny", messages=ASK, tools=[tool], tool_choice="required", parallel_tool_calls=False, seed=4
    )
    (call,) = reply.choices[0].message.tool_calls
    assert json.loads(call.function.arguments)["where"]["city"] in {"Paris", "Oslo"}


def test_the_object_form_calls_the_named_function_once(client):
    reply = client.chat.completions.create(
        model="tiny",
        messages=ASK,
        tools=TOOLS,
        tool_choice={"type": "function", "function": {"name": "add"}},
        temperature=0.9,
        seed=4,
    )
    calls = reply.choices[0].message.tool_calls
    assert [c.function.name for c in calls] == ["add"]
    assert isinstance(json.loads(calls[0].function.arguments)["a"], bool)


def test_a_streamed_call_joins_into_the_whole_replys_call(client):
    ask = {"model": "tiny", "messages": ASK, "tools": TOOLS, "tool_choice": "required", "temperature": 0.9, "seed": 5}
    whole = client.chat.completions.create(**ask).choices[0].message.tool_calls
    chunks = list(client.chat.completions.create(**ask, stream=True))
    deltas = [c.choices[0].delta.tool_calls for c in chunks if c.choices and c.choices[0].delta.tool_calls]
    heads = [d[0] for d in deltas if d[0].id is not None]
    assert [h.function.name for h in heads] == [c.function.name for c in whole]
    assert all(h.function.arguments == "" and h.type == "function" for h in heads)
    for index, call in enumerate(whole):
        joined = "".join(d[0].function.arguments for d in deltas if d[0].index == index and d[0].id is None)
        assert joined == call.function.arguments
    assert chunks[-1].choices[0].finish_reason == "tool_calls"


def test_tool_results_are_read_back_into_the_conversation(client, qwen_tokenizer):
    call = {"id": "call_1", "type": "function", "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'}}
    messages = [*ASK, {"role": "assistant", "content": None, "tool_calls": [call]}]
    messages.append({"role": "tool", "tool_call_id": "call_1", "content": "Sunny, 24 C"})
    reply = client.chat.completions.create(model="tiny", messages=messages, tools=TOOLS, max_tokens=8)
    assert reply.choices[0].message.role == "assistant"
    shown = qwen_tokenizer.apply_chat_template(
        [
            *messages[:1],
            {**messages[1], "tool_calls": [{**call, "function": {**call["function"], "arguments": {"city": "Paris"}}}]},
            messages[2],
        ],
        tools=TOOLS,
        tokenize=False,
        add_generation_prompt=True,
    )
    assert "<tool_response>\nSunny, 24 C\n</tool_response>" in shown
    assert reply.usage.prompt_tokens == len(qwen_tokenizer(shown, add_special_tokens=False)["input_ids"])


@pytest.mark.parametrize(
    ("fields", "param"),
    [
        ({"tools": TOOLS, "tool_choice": {"type": "function", "function": {"name": "nope"}}}, "tool_choice"),
        ({"tool_choice": "required"}, "tool_choice"),
        ({"tools": TOOLS, "tool_choice": "sometimes"}, "tool_choice"),
        ({"tools": [{"type": "function", "function": {"name": "bad name!"}}]}, "tools[0].function.name"),
        ({"tools": [WEATHER, WEATHER]}, "tools[1].function.name"),
        ({"tools": TOOLS, "parallel_tool_calls": "yes"}, "parallel_tool_calls"),
        (
            {
                "tools": TOOLS,
                "messages": [
                    *ASK,
                    {
                        "role": "assistant",
                        "tool_calls": [{"id": "c", "type": "function", "function": {"name": "add", "arguments": 5}}],
                    },
                ],
            },
            "messages[1].tool_calls[0].function.arguments",
        ),
        ({"messages": [*ASK, {"role": "tool", "content": "x"}]}, "messages[1].tool_call_id"),
        (
            {
                "tools": [{"type": "function", "function": {"name": "f", "parameters": {"type": "nonsense"}}}],
                "tool_choice": "required",
            },
            "tools",
        ),
    ],
)
def test_malformed_tool_pieces_are_400s_naming_them(client, fields, param):
    r = httpx.post(str(client.base_url) + "chat/completions", json={"messages": ASK, "max_tokens": 4, **fields})
    assert r.status_code == 400, r.text
    assert r.json()["error"]["param"] == param


def test_arguments_cut_short_are_read_back_as_the_text_they_are(client):
    """An answer cut by the length limit inside a call gives arguments that are not JSON; an agent sends them
    back as the server said them, and OpenAI takes them: so does Draftscope."""
    cut = {"id": "c", "type": "function", "function": {"name": "add", "arguments": '{"a": 1, "b'}}
    messages = [*ASK, {"role": "assistant", "tool_calls": [cut]}, {"role": "tool", "tool_call_id": "c", "content": "?"}]
    r = httpx.post(
        str(client.base_url) + "chat/completions", json={"messages": messages, "tools": TOOLS, "max_tokens": 4}
    )
    assert r.status_code == 200, r.text


def test_a_template_without_tools_is_a_400_that_says_so(chatml_url):
    r = httpx.post(chatml_url + "/chat/completions", json={"messages": ASK, "tools": TOOLS, "max_tokens": 4})
    assert r.status_code == 400 and r.json()["error"]["param"] == "tools"
    assert "has no tools" in r.json()["error"]["message"]
    none = httpx.post(
        chatml_url + "/chat/completions", json={"messages": ASK, "tools": TOOLS, "tool_choice": "none", "max_tokens": 4}
    )
    assert none.status_code == 200, "tool_choice none: the tools are not shown, nothing to refuse"
    r = httpx.post(chatml_url + "/completions", json={"prompt": "x", "tools": TOOLS, "max_tokens": 4})
    assert r.status_code == 400 and r.json()["error"]["param"] == "tools"


@pytest.fixture(scope="module")
def engine(qwen_tokenizer):
    engine = Engine(
        tiny_llama(len(qwen_tokenizer), seed=7, layers=1, hidden=32, sharpen=4.0, max_positions=2048), qwen_tokenizer
    )
    engine.eos_ids = {qwen_tokenizer.eos_token_id}
    return engine


def call_answer(engine, seed, drafters):
    request = GenerationRequest(
        messages=ASK,
        tools=TOOLS,
        max_new_tokens=60,
        sampling=SamplingParams(temperature=1.0, top_k=40, seed=seed),
        drafters=drafters,
        budget=6 if drafters else None,
        grammar=call_grammar(HERMES, TOOLS, parallel=True),
    )
    final = list(engine.generate(request))[-1]
    return final.token_ids, final.text


@pytest.mark.parametrize("seed", range(4))
def test_a_drafted_call_is_the_grammar_masked_plain_decoding(engine, seed):
    """At T > 0 a call drafted by random trees, the conversation and the plain answer itself is the plain
    decoding under the same grammar, token for token (the drafts are cut and masked as any grammar's)."""
    plain = call_answer(engine, seed, [])
    prompt = len(engine.encode_chat(ASK, TOOLS))
    drafters = [
        RandomTree(len(engine.tokenizer), seed),
        ContextDrafter(min_suffix=1),
        OracleDrafter(plain[0], prompt, max_depth=4),
    ]
    assert call_answer(engine, seed, drafters) == plain
    assert plain[1].startswith('<tool_call>\n{"name": ')
