"""True logprobs through the official ``openai`` client (issue 65): a chat's ``logprobs`` and
``top_logprobs``, the legacy completions' ``logprobs`` N, llama-server's ``n_probs``. They are the model's
own (a plain forward over prompt + answer gives them) although the server drafts every step, each
streamed chunk carries its own tokens' (concatenated: the whole reply's), and a field set wrongly is a
400 naming it."""

from __future__ import annotations

import httpx2 as httpx
import openai
import pytest
import torch
from engine_fixtures import tiny_llama
from runtime_helpers import runtime_for

from draftscope.drafters import ContextDrafter
from draftscope.engine.engine import Engine
from draftscope.server import ServerConfig, ServerThread, create_app

ASK = [{"role": "user", "content": "Say hello world. Say hello world again, hello world."}]
PROMPT = "def main():\n    print('hello world')\n    print('hello"


@pytest.fixture(scope="module")
def model(tokenizer):
    return tiny_llama(len(tokenizer), seed=3, sharpen=4.0)


@pytest.fixture(scope="module")
def engine(model, tokenizer):
    engine = Engine(model, tokenizer, name="tiny")
    engine.eos_ids = set()  # a random model: answers run to their length
    return engine


@pytest.fixture(scope="module")
def client(engine):
    # every step drafts (the conversation's drafts, 8 nodes): the logprobs come from verify rows
    runtime = runtime_for(engine, max_new_tokens=24, drafters=lambda: [ContextDrafter(min_suffix=1)])
    server = ServerThread(create_app(runtime, config=ServerConfig(budget=8)), port=0).start()
    yield openai.OpenAI(base_url=server.url, api_key="none")
    server.stop()


def reference(model, prompt_ids, answer_ids) -> torch.Tensor:
    """Each answer token's logprob by a plain forward over prompt + answer."""
    with torch.no_grad():
        logits = model(torch.tensor([prompt_ids + answer_ids])).logits[0].float()
    rows = torch.log_softmax(logits, -1)[len(prompt_ids) - 1 : len(prompt_ids) - 1 + len(answer_ids)]
    return rows.gather(-1, torch.tensor(answer_ids)[:, None]).squeeze(-1)


def entries(content) -> list[tuple]:
    return [
        (e.token, round(e.logprob, 5), tuple(e.bytes), tuple((t.token, round(t.logprob, 5)) for t in e.top_logprobs))
        for e in content
    ]


def test_chat_logprobs_whole_and_streamed_are_the_models_own(client, engine, model):
    # greedy: the random model soon repeats itself, and the conversation's drafts of it are accepted
    asked = dict(model="tiny", messages=ASK, temperature=0, max_tokens=24, logprobs=True, top_logprobs=3)
    whole = client.chat.completions.create(**asked)
    content = whole.choices[0].logprobs.content
    assert len(content) == whole.usage.completion_tokens == 24
    special = set(engine.tokenizer.all_special_tokens)  # listed, as every token said, but not in the text
    said = b"".join(bytes(e.bytes) for e in content if e.token not in special)  # bytes that need not make characters
    assert said.decode(errors="replace") == whole.choices[0].message.content
    for e in content:
        tops = [t.logprob for t in e.top_logprobs]
        assert len(tops) == 3 and tops == sorted(tops, reverse=True)
        assert e.logprob <= tops[0] + 1e-6
    chunks = list(client.chat.completions.create(**asked, stream=True))
    streamed = [e for c in chunks if c.choices and c.choices[0].logprobs for e in c.choices[0].logprobs.content]
    assert entries(streamed) == entries(content), "the chunks' logprobs, concatenated, are the whole reply's"
    steps = [c.model_extra["draftscope"] for c in chunks if "tokens" in (c.model_extra.get("draftscope") or {})]
    ids = [t["id"] for step in steps for t in step["tokens"]]
    want = reference(model, engine.encode_chat(ASK), ids).tolist()
    assert [e.logprob for e in content] == pytest.approx(want, abs=1e-4)
    assert sum(step["accepted"] for step in steps) > 0, "drafts accepted: the rows of accepted nodes are checked too"


def test_completions_legacy_logprobs_whole_and_streamed(client, engine, model):
    asked = dict(model="tiny", prompt=PROMPT, max_tokens=16, temperature=0.9, seed=2, logprobs=2)
    whole = client.completions.create(**asked)
    lp, text = whole.choices[0].logprobs, whole.choices[0].text
    assert len(lp.tokens) == len(lp.token_logprobs) == len(lp.top_logprobs) == len(lp.text_offset) == 16
    assert lp.text_offset[0] == 0 and lp.text_offset == sorted(lp.text_offset) and lp.text_offset[-1] <= len(text)
    for token, logprob, top in zip(lp.tokens, lp.token_logprobs, lp.top_logprobs):
        assert 2 <= len(top) <= 3 and top[token] == pytest.approx(logprob)  # two alternatives and the chosen one
    chunks = list(client.completions.create(**asked, stream=True))
    steps = [c.model_extra["draftscope"] for c in chunks if "tokens" in (c.model_extra.get("draftscope") or {})]
    ids = [t["id"] for step in steps for t in step["tokens"]]
    prompt_ids = list(engine.tokenizer(PROMPT, add_special_tokens=False)["input_ids"])
    assert lp.token_logprobs == pytest.approx(reference(model, prompt_ids, ids).tolist(), abs=1e-4)
    parts = [c.choices[0].logprobs for c in chunks if c.choices and c.choices[0].logprobs]
    assert [t for p in parts for t in p.tokens] == lp.tokens
    assert [x for p in parts for x in p.token_logprobs] == pytest.approx(lp.token_logprobs)
    assert [x for p in parts for x in p.text_offset] == lp.text_offset, "offsets run on from chunk to chunk"


def test_n_probs_is_read_as_logprobs_and_an_answer_that_does_not_ask_gets_none(client):
    plain = client.chat.completions.create(model="tiny", messages=ASK, max_tokens=4)
    assert plain.choices[0].logprobs is None
    probs = client.chat.completions.create(model="tiny", messages=ASK, max_tokens=4, extra_body={"n_probs": 2})
    assert [len(e.top_logprobs) for e in probs.choices[0].logprobs.content] == [2] * 4
    chosen_only = client.completions.create(model="tiny", prompt=PROMPT, max_tokens=4, logprobs=0)
    assert [len(top) for top in chosen_only.choices[0].logprobs.top_logprobs] == [1] * 4


@pytest.mark.parametrize(
    "route, fields, param",
    [
        ("chat/completions", {"logprobs": True, "top_logprobs": 21}, "top_logprobs"),
        ("chat/completions", {"top_logprobs": 2}, "top_logprobs"),  # without logprobs: true
        ("chat/completions", {"logprobs": 3}, "logprobs"),  # chat's is true or false
        ("chat/completions", {"logprobs": True, "top_logprobs": 2, "n_probs": 4}, "n_probs"),
        ("completions", {"logprobs": 6}, "logprobs"),
        ("completions", {"logprobs": True}, "logprobs"),
        ("completions", {"top_logprobs": 2}, "top_logprobs"),
        ("completions", {"n_probs": -1}, "n_probs"),
    ],
)
def test_a_logprobs_field_set_wrongly_is_a_400_naming_it(client, route, fields, param):
    body = {"messages": ASK} if route.startswith("chat") else {"prompt": PROMPT}
    r = httpx.post(str(client.base_url) + route, json={**body, "max_tokens": 2, **fields})
    assert r.status_code == 400, r.text
    assert r.json()["error"]["param"] == param
