"""Fill-in-the-middle on ``/v1/completions`` (issue 65): with a ``suffix`` the model reads its own FIM prompt
(prefix marker, the prompt, suffix marker, the suffix, middle marker; no chat template) and its answer is
plain decoding's of that prompt with the same seed, drafts and all. A model without FIM tokens gets a 400
naming ``suffix``; an empty suffix changes nothing; a chat has no suffix. On llama.cpp the tokens a FIM
model writes past the middle (the next file's separator, padding) end the answer.

The model is the tiny random Llama over the test tokenizer with Qwen2.5-Coder's FIM tokens added."""

import httpx2 as httpx
import openai
import pytest
from engine_fixtures import tiny_llama
from gguf_fixtures import write_tiny_gguf
from llama_helpers import need_llama_cpp
from runtime_helpers import runtime_for
from transformers import AutoTokenizer

from draftscope.core.session import ChatSession
from draftscope.drafters import ContextDrafter
from draftscope.engine.engine import Engine, GenerationRequest
from draftscope.models.fim_tokens import FAMILIES, past_the_middle
from draftscope.models.resolve import ModelSource
from draftscope.server import ServerConfig, ServerThread, create_app

QWEN = FAMILIES[0]
BEFORE = "def main():\n    print('hello world')\n    "
AFTER = "\n    return 0\n\nclass Thing:\n    pass\n"

pytestmark = pytest.mark.usefixtures("one_thread")


@pytest.fixture(scope="module")
def fim_dir(tokenizer_dir, tmp_path_factory):
    """The test tokenizer with Qwen Coder's FIM tokens added, saved as a model folder's tokenizer."""
    tokenizer = AutoTokenizer.from_pretrained(str(tokenizer_dir))
    tokenizer.add_special_tokens({"additional_special_tokens": [QWEN.prefix, QWEN.suffix, QWEN.middle, *QWEN.ends]})
    folder = tmp_path_factory.mktemp("fim-tokenizer")
    tokenizer.save_pretrained(str(folder))
    return folder


@pytest.fixture(scope="module")
def fim_tokenizer(fim_dir):
    return AutoTokenizer.from_pretrained(str(fim_dir))


def serve(engine, **fields):
    engine.eos_ids = set()  # a random model: the length ends its answers
    runtime = runtime_for(engine, max_new_tokens=24, drafters=lambda: [ContextDrafter(min_suffix=1)], **fields)
    return runtime, ServerThread(create_app(runtime, config=ServerConfig(budget=8)), port=0).start()


@pytest.fixture(scope="module")
def fim_server(fim_tokenizer):
    engine = Engine(tiny_llama(len(fim_tokenizer), seed=5, sharpen=4.0), fim_tokenizer, name="tiny-coder")
    runtime, server = serve(engine)
    yield runtime, server
    server.stop()


def plain(runtime, prompt_ids, **sampling) -> tuple[str, int]:
    """Plain decoding of ``prompt_ids`` (no drafts) with the server's sampling: its text and prompt length."""
    params = ChatSession(runtime).sampling(**sampling)
    request = GenerationRequest(prompt_ids=list(prompt_ids), max_new_tokens=24, sampling=params, drafters=[])
    return list(runtime.engine.generate(request))[-1].text, len(prompt_ids)


def fim_prompt(tokenizer, before: str, after: str) -> list[int]:
    """Qwen Coder's FIM prompt, spelled out here rather than asked of the module under test."""
    code = lambda text: tokenizer(text, add_special_tokens=False)["input_ids"]  # noqa: E731
    marker = tokenizer.convert_tokens_to_ids
    return [marker(QWEN.prefix), *code(before), marker(QWEN.suffix), *code(after), marker(QWEN.middle)]


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_a_suffix_makes_the_fim_prompt_and_the_answer_is_plain_decodings(fim_server, fim_tokenizer, seed):
    runtime, server = fim_server
    client = openai.OpenAI(base_url=server.url, api_key="none")
    reply = client.completions.create(
        model="tiny-coder", prompt=BEFORE, suffix=AFTER, max_tokens=24, temperature=0.8, seed=seed
    )
    expected, prompt_tokens = plain(runtime, fim_prompt(fim_tokenizer, BEFORE, AFTER), temperature=0.8, seed=seed)
    assert reply.usage.prompt_tokens == prompt_tokens, "the prompt the model read is the FIM prompt"
    assert reply.choices[0].text == expected
    streamed = client.completions.create(
        model="tiny-coder", prompt=BEFORE, suffix=AFTER, max_tokens=24, temperature=0.8, seed=seed, stream=True
    )
    assert "".join(chunk.choices[0].text for chunk in streamed if chunk.choices) == expected


def test_a_middle_may_begin_the_file_and_an_empty_suffix_changes_nothing(fim_server, fim_tokenizer):
    runtime, server = fim_server
    url = server.url + "/completions"
    first = httpx.post(url, json={"prompt": "", "suffix": AFTER, "max_tokens": 24, "temperature": 0}, timeout=60)
    assert first.status_code == 200, first.text
    assert first.json()["choices"][0]["text"] == plain(runtime, fim_prompt(fim_tokenizer, "", AFTER), temperature=0)[0]
    ask = {"prompt": BEFORE, "max_tokens": 24, "temperature": 0.7, "seed": 4}
    neutral, without = (httpx.post(url, json=body, timeout=60).json() for body in ({**ask, "suffix": ""}, ask))
    assert neutral["choices"][0]["text"] == without["choices"][0]["text"]
    assert neutral["usage"]["prompt_tokens"] == without["usage"]["prompt_tokens"]
    assert httpx.post(url, json={"prompt": "", "suffix": ""}).status_code == 400, "no prefix and no suffix"


@pytest.mark.parametrize(
    "path, body, words",
    [
        ("/completions", {"prompt": BEFORE, "suffix": 5}, "must be a string"),
        ("/chat/completions", {"messages": [{"role": "user", "content": "hi"}], "suffix": AFTER}, "/v1/completions"),
    ],
)
def test_a_suffix_where_none_can_be_used_is_a_400_naming_it(fim_server, path, body, words):
    r = httpx.post(fim_server[1].url + path, json=body, timeout=60)
    assert r.status_code == 400
    error = r.json()["error"]
    assert error["param"] == "suffix" and words in error["message"], error


def test_a_model_without_fim_tokens_is_a_400_that_says_so(tokenizer):
    _, server = serve(Engine(tiny_llama(len(tokenizer), seed=5), tokenizer, name="tiny-chat"))
    try:
        r = httpx.post(server.url + "/completions", json={"prompt": BEFORE, "suffix": AFTER}, timeout=60)
        plain_completion = httpx.post(server.url + "/completions", json={"prompt": BEFORE, "max_tokens": 4})
    finally:
        server.stop()
    assert r.status_code == 400
    error = r.json()["error"]
    assert (
        error["param"] == "suffix"
        and "no fill-in-the-middle tokens" in error["message"]
        and "tiny-chat" in error["message"]
    ), error
    assert plain_completion.status_code == 200, "a completion without a suffix is served as before"


def test_on_llama_cpp_the_tokens_past_the_middle_end_the_answer(fim_dir, fim_tokenizer, tmp_path):
    """llama.cpp counts a FIM model's separator, padding and end of text among its end tokens; the server
    finds the model's FIM tokens through its GGUF and answers with its FIM prompt."""
    need_llama_cpp()
    from draftscope.engine.backends.llama.llamacpp import LlamaCppBackend

    path = write_tiny_gguf(tmp_path / "coder-F32.gguf", tiny_llama(len(fim_tokenizer), seed=5), fim_dir)
    backend = LlamaCppBackend(path, fim_tokenizer, context=256, threads=1)
    backend.source = ModelSource("gguf", str(path), "tiny-coder")  # as open_backend records it
    ends = past_the_middle(fim_tokenizer)
    assert ends and ends <= backend.eos_ids, [fim_tokenizer.decode([t]) for t in ends - backend.eos_ids]
    engine = Engine(backend=backend)
    runtime, server = serve(engine)
    try:
        r = httpx.post(server.url + "/completions", json={"prompt": BEFORE, "suffix": AFTER, "max_tokens": 8})
    finally:
        server.stop()
        backend.close()
    assert r.status_code == 200 and r.json()["usage"]["prompt_tokens"] == len(fim_prompt(fim_tokenizer, BEFORE, AFTER))


def test_generate_with_a_suffix_writes_the_middle_in_the_terminal(fim_server, fim_tokenizer, tokenizer, capsys):
    """``draftscope generate PROMPT --suffix TEXT``: the same FIM prompt, the same answer."""
    import argparse

    from draftscope.commands import chat

    runtime, _ = fim_server
    args = argparse.Namespace(prompt=BEFORE, suffix=AFTER, budget=8, quiet_stats=True)
    session, ended = ChatSession(runtime), []
    session.events.answer_ended.connect(lambda final, *_: ended.append(final))
    assert chat._generate_with(session, args, []) == 0
    expected = plain(runtime, fim_prompt(fim_tokenizer, BEFORE, AFTER))[0]
    assert ended[0].text == expected
    printed = capsys.readouterr().out.removesuffix("\n")  # a random model's last broken character is held back
    assert printed and expected.startswith(printed) and len(expected) - len(printed) <= 1
    runtime_without, server = serve(Engine(tiny_llama(len(tokenizer), seed=5), tokenizer, name="tiny-chat"))
    server.stop()
    refused = argparse.Namespace(prompt=BEFORE, suffix=AFTER, budget=8, quiet_stats=True)
    assert chat._generate_with(ChatSession(runtime_without), refused, []) == 2
    assert "no fill-in-the-middle tokens" in capsys.readouterr().err
