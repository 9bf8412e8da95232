"""Stop strings after a token that carries a long run of text (issue 60, defect 6): a token of a newline
and 23 spaces (deep indentation, one BPE token) with ``stop: ["\\n"]``. The answer with the stop is
plain decoding's answer cut at the stop, at T = 0 and T > 0, with drafts; what was streamed is that
text and nothing of the stop or after it. Searching only the text's last ``max_stop + 16``
characters missed the newline 23 characters back, and the answer ran on past it."""

from __future__ import annotations

import pytest
import torch
from engine_fixtures import tiny_llama
from tokenizer_fixture import make_tokenizer_folder

from draftscope.drafters import ContextDrafter
from draftscope.engine.engine import Engine, GenerationRequest
from draftscope.engine.events import FinalEvent, StepEvent
from draftscope.engine.sampling import SamplingParams

pytestmark = pytest.mark.usefixtures("one_thread")

DEEP_CODE = "def f(x):\n" + "".join(f"{' ' * 24}line_{i} = x\n" for i in range(5))
PROMPT_TEXT = "def main():\n    print('hello world')"
ANSWER_TOKENS = 24
SAMPLINGS = [SamplingParams(), SamplingParams(temperature=0.8, seed=3)]


@pytest.fixture(scope="module")
def indent_tokenizer(tmp_path_factory):
    """The tiny BPE tokenizer, also trained on deeply indented code: one token is a newline and 23 spaces."""
    from transformers import AutoTokenizer

    folder = make_tokenizer_folder(tmp_path_factory.mktemp("indent-tokenizer"), extra_text=(DEEP_CODE,))
    return folder, AutoTokenizer.from_pretrained(str(folder))


def indentation_token(tokenizer) -> int:
    """The vocabulary's longest token that starts with a newline."""
    starts = [i for i in range(len(tokenizer)) if tokenizer.decode([i]).startswith("\n")]
    token = max(starts, key=lambda i: len(tokenizer.decode([i])))
    assert len(tokenizer.decode([token])) > 17, "the tokenizer has no long indentation token to test with"
    return token


def answer(engine, prompt, params, *, stop=(), drafters=()) -> tuple[list[StepEvent], FinalEvent]:
    request = GenerationRequest(
        prompt_ids=prompt,
        max_new_tokens=ANSWER_TOKENS,
        sampling=params,
        stop_strings=list(stop),
        drafters=list(drafters),
        budget=8 if drafters else None,
    )
    events = list(engine.generate(request))
    return [e for e in events if isinstance(e, StepEvent)], events[-1]


def says_indentation_first(final: FinalEvent, tokenizer, token: int) -> bool:
    """The answer's first newline is the indentation token's, with text before it."""
    if token not in final.token_ids:
        return False
    before = tokenizer.decode(final.token_ids[: final.token_ids.index(token)])
    return "\n" not in before and before != "" and final.text.find("\n") == len(before)


def engine_saying_indentation(tokenizer, params: SamplingParams) -> tuple[Engine, list[int], FinalEvent]:
    """A tiny peaked model whose plain answer says the indentation token after some text, before any
    other newline: the row of a token it says early is copied (scaled up) to the indentation token,
    which then wins where that token did. The first seed, position and scale that do so are taken."""
    token = indentation_token(tokenizer)
    prompt = tokenizer(PROMPT_TEXT)["input_ids"]
    for seed in range(3):
        first = answer(Engine(tiny_llama(len(tokenizer), seed=seed, sharpen=32.0), tokenizer), prompt, params)[1]
        for scale in (1.05, 1.5):
            for k in range(1, 5):
                model = tiny_llama(len(tokenizer), seed=seed, sharpen=32.0)
                with torch.no_grad():
                    model.lm_head.weight[token] = model.lm_head.weight[first.token_ids[k]] * scale
                engine = Engine(model, tokenizer)
                plain = answer(engine, prompt, params)[1]
                if says_indentation_first(plain, tokenizer, token):
                    return engine, prompt, plain
    raise AssertionError("no tiny model said the indentation token after some text")


@pytest.mark.parametrize("params", SAMPLINGS, ids=["greedy", "sampled"])
@pytest.mark.parametrize("drafted", [False, True], ids=["plain", "drafted"])
def test_a_stop_inside_a_long_token_ends_the_answer_there(indent_tokenizer, params, drafted):
    _, tokenizer = indent_tokenizer
    engine, prompt, plain = engine_saying_indentation(tokenizer, params)
    cut = plain.text.find("\n")
    drafters = [ContextDrafter()] if drafted else []
    steps, final = answer(engine, prompt, params, stop=["\n"], drafters=drafters)
    assert final.finish_reason == "stop", f"the answer ran past the stop: {final.text!r}"
    assert final.text == plain.text[:cut], "the answer is plain decoding's, cut at the stop"
    assert final.token_ids == plain.token_ids[: len(final.token_ids)]
    assert final.token_ids[-1] == indentation_token(tokenizer), "the answer ends at the token holding the stop"
    streamed = "".join(piece for step in steps for piece in step.pieces)
    assert streamed == plain.text[:cut], "the stream said the stop or what came after it"
    assert all(len(step.pieces) == len(step.token_ids) for step in steps)


def test_a_stop_string_beginning_before_the_long_token_is_cut_there_too(indent_tokenizer):
    """A two-character stop: the character before the indentation token and its newline."""
    _, tokenizer = indent_tokenizer
    engine, prompt, plain = engine_saying_indentation(tokenizer, SamplingParams())
    cut = plain.text.find("\n")
    stop = plain.text[cut - 1 : cut + 1]
    steps, final = answer(engine, prompt, SamplingParams(), stop=[stop, "never said"])
    assert final.finish_reason == "stop"
    assert final.text == plain.text[: plain.text.find(stop)]
    # the character before the newline may have gone out in its own step, before the stop could be
    # known (the server holds such a tail back); nothing of the newline's token did
    assert "".join(piece for step in steps for piece in step.pieces) in (plain.text[: cut - 1], plain.text[:cut])


@pytest.mark.parametrize("params", SAMPLINGS, ids=["greedy", "sampled"])
def test_a_stop_inside_a_long_token_ends_the_answer_on_llama_cpp(indent_tokenizer, params, tmp_path):
    """The same model and tokenizer in a GGUF, answered by llama.cpp: with the stop, its own plain
    answer cut at the stop."""
    from gguf_fixtures import write_tiny_gguf
    from llama_helpers import need_llama_cpp

    need_llama_cpp()
    from draftscope.engine.backends.llama.llamacpp import LlamaCppBackend

    folder, tokenizer = indent_tokenizer
    torch_engine, prompt, _ = engine_saying_indentation(tokenizer, params)
    path = write_tiny_gguf(tmp_path / "indent-F32.gguf", torch_engine.model, folder)
    engine = Engine(backend=LlamaCppBackend(path, tokenizer, context=256, threads=1))
    try:
        plain = answer(engine, prompt, params)[1]
        assert says_indentation_first(plain, tokenizer, indentation_token(tokenizer)), plain.text
        cut = plain.text.find("\n")
        steps, final = answer(engine, prompt, params, stop=["\n"])
        assert final.finish_reason == "stop", f"the answer ran past the stop: {final.text!r}"
        assert final.text == plain.text[:cut]
        assert "".join(piece for step in steps for piece in step.pieces) == plain.text[:cut]
    finally:
        engine.close()
