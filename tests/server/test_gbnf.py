"""llama-server's ``grammar`` field (issue 65): a GBNF grammar the answer is held to, through llguidance on the
path a JSON schema takes (engine/grammar.py). At T > 0 a drafted answer is plain decoding's under the same
grammar with the same seed, and it is a sentence of the grammar. A grammar that cannot be compiled is a 400
naming ``grammar`` and the problem (llama-server answers unconstrained: its #19051), as is a grammar beside a
JSON response_format; an empty one changes nothing."""

import re

import httpx2 as httpx
import openai
import pytest
from engine_fixtures import tiny_llama
from runtime_helpers import runtime_for

from draftscope.core.session import ChatSession
from draftscope.drafters import ContextDrafter
from draftscope.engine.engine import Engine, GenerationRequest
from draftscope.engine.grammar import gbnf_grammar
from draftscope.server import ServerConfig, ServerThread, create_app

YES_NO = 'root ::= "yes" | "no"'
# a few words, each from a small set: long enough for drafts (the grammar's and the conversation's) to matter
WORDS = 'root ::= word (" " word){2,7} "."\nword ::= "yes" | "no" | "maybe" | "never"'
SENTENCE = re.compile(r"(yes|no|maybe|never)( (yes|no|maybe|never)){2,7}\.")
PROMPT = "Answer with a few words: yes, no, maybe, never."

pytestmark = pytest.mark.usefixtures("one_thread")


@pytest.fixture(scope="module")
def served(tokenizer):
    engine = Engine(tiny_llama(len(tokenizer), seed=3, sharpen=4.0), tokenizer, name="tiny")
    engine.eos_ids = set()  # a random model: the grammar's end, not an EOS, ends its answer
    runtime = runtime_for(engine, max_new_tokens=60, drafters=lambda: [ContextDrafter(min_suffix=1)])
    server = ServerThread(create_app(runtime, config=ServerConfig(budget=8)), port=0).start()  # drafts every step
    yield runtime, server
    server.stop()


def plain(runtime, prompt: str, grammar: str, **sampling) -> tuple[str, str]:
    """Plain decoding (no drafts) of the completion ``prompt`` under ``grammar``: its text and finish."""
    tokenizer = runtime.engine.tokenizer
    request = GenerationRequest(
        prompt_ids=tokenizer(prompt, add_special_tokens=False)["input_ids"],
        max_new_tokens=60,
        sampling=ChatSession(runtime).sampling(**sampling),
        drafters=[],
        grammar=gbnf_grammar(grammar),
    )
    final = list(runtime.engine.generate(request))[-1]
    return final.text, final.finish_reason


@pytest.mark.parametrize("seed", [1, 2, 3, 4])
def test_a_gbnf_answer_at_t_above_0_is_plain_decoding_under_the_grammar(served, seed):
    runtime, server = served
    client = openai.OpenAI(base_url=server.url, api_key="none")
    reply = client.completions.create(
        model="tiny", prompt=PROMPT, max_tokens=60, temperature=0.9, seed=seed, extra_body={"grammar": WORDS}
    )
    text, finish = plain(runtime, PROMPT, WORDS, temperature=0.9, seed=seed)
    assert finish == "eos" and SENTENCE.fullmatch(text), text
    assert reply.choices[0].text == text and reply.choices[0].finish_reason == "stop"
    assert sum(reply.draftscope["accepted_by_source"].values()) > 0, "drafted, and still plain decoding's answer"


def test_a_chat_answer_is_one_of_the_grammars_sentences(served):
    client = openai.OpenAI(base_url=served[1].url, api_key="none")
    for seed in range(3):
        reply = client.chat.completions.create(
            model="tiny",
            messages=[{"role": "user", "content": "Yes or no?"}],
            temperature=1.0,
            seed=seed,
            extra_body={"grammar": YES_NO},
        )
        assert reply.choices[0].message.content in {"yes", "no"}
    free = client.chat.completions.create(model="tiny", messages=[{"role": "user", "content": "Yes or no?"}],
                                          extra_body={"grammar": ""})  # fmt: skip
    assert free.choices[0].message.content not in {"yes", "no"}, "an empty grammar holds the answer to nothing"


@pytest.mark.parametrize(
    "fields, words",
    [
        ({"grammar": "root ::= answer"}, "Rule 'answer' not found"),
        ({"grammar": 'answer ::= "yes"'}, "No 'root' rule found"),
        ({"grammar": 'root ::= "yes'}, "Unexpected end of input"),
        ({"grammar": "root ::= " + "(" * 3000 + '"a"' + ")" * 3000}, "recursion"),
        ({"grammar": ["root ::= x"]}, "must be a string"),
        ({"grammar": YES_NO, "response_format": {"type": "json_object"}}, "send one"),
        ({"grammar": YES_NO, "json_schema": {"type": "object"}}, "send one"),
    ],
)
def test_a_grammar_that_cannot_be_used_is_a_400_naming_it(served, fields, words):
    r = httpx.post(served[1].url + "/chat/completions", json={"messages": [{"role": "user", "content": "?"}], **fields})
    assert r.status_code == 400
    error = r.json()["error"]
    assert error["param"] == "grammar" and words in error["message"], error
