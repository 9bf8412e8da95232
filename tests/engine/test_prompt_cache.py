"""A conversation's next turn reads only what the model's cache lacks (issue 48).

Each backend keeps the tokens its cache holds; a new prompt keeps their longest common prefix and
reads the rest. Counted here by what the model is actually fed (its forwards' input ids, llama.cpp's
batches), on torch (dynamic cache, static cache, static cache with its graphs' buffers, slots) and
on llama.cpp. The answers are those of reading everything: token-identical in fp32 on torch, greedy
and seeded, with drafts; on llama.cpp equal or diverging only at a measured near-tie. A cache that
trusted its length instead of comparing tokens is caught by the same comparison.
"""

from __future__ import annotations

import pytest
import torch
from engine_fixtures import IdTokenizer, tiny_llama

import draftscope.engine.backends.held as held_mod
from draftscope.drafters import ContextDrafter
from draftscope.engine.backends.pytorch.torch_backend import TorchBackend
from draftscope.engine.backends.pytorch.torch_slots import TorchSlotsBackend
from draftscope.engine.backends.pytorch.torch_static import StaticTorchBackend
from draftscope.engine.engine import Engine, GenerationRequest
from draftscope.engine.sampling import SamplingParams

V = 96
SYSTEM = [5, 9, 14, 2, 7, 7, 31, 40, 2]  # what every conversation starts with (a system prompt)
FIRST = SYSTEM + [11, 12, 13, 11, 12, 13, 11, 12, 60, 61]
SAMPLED = SamplingParams(temperature=0.9, top_p=0.95, seed=7)


@pytest.fixture(scope="module")
def model():
    return tiny_llama(V, seed=5, sharpen=6.0, max_positions=512)


def open_torch(kind: str, model):
    tokenizer = IdTokenizer()
    if kind == "dynamic":
        return TorchBackend(model, tokenizer)
    if kind == "static":
        return StaticTorchBackend(model, tokenizer, graphs="off", first_span=64)
    if kind == "static-graphs":  # the graphs' buffers replayed without a CUDA graph: the steps CUDA runs
        return StaticTorchBackend(model, tokenizer, graphs="eager", first_span=64)
    return TorchSlotsBackend(model, tokenizer, slots=2)


class Fed:
    """Counts the prompt tokens the model is given while an answer reads its prompt (by the token ids
    its embedding looks up in the forwards of prompt work: the graphs' steps pass there too, not
    through forward)."""

    def __init__(self, engine, model) -> None:
        from draftscope.engine.backends.work import Prefill

        self.tokens, self.reading = 0, False
        embeddings = model.get_input_embeddings()
        self._hook = embeddings.register_forward_hook(self._count)
        decode = engine.backend.decode_many

        def counted(work):  # the stepper's forwards: those of prompt work are what is counted
            self.reading = all(isinstance(item, Prefill) for item in work.values())
            try:
                return decode(work)
            finally:
                self.reading = False

        engine.backend.decode_many = counted

    def _count(self, module, inputs, output) -> None:
        if self.reading:
            self.tokens += int(inputs[0].numel())

    def close(self) -> None:
        self._hook.remove()


def ask(engine, prompt, params=None, *, drafted=True, keep=True, tokens=12):
    request = GenerationRequest(
        prompt_ids=list(prompt),
        max_new_tokens=tokens,
        sampling=params or SamplingParams(),
        drafters=[ContextDrafter()] if drafted else [],
        budget=4 if drafted else None,
        keep_cache=keep,
    )
    final = list(engine.generate(request))[-1]
    assert final.error is None, final.error
    return final


def read_by_start(engine, fed: Fed, prompt, **kwargs):
    """(the answer, the prompt tokens its start fed the model)."""
    fed.tokens = 0
    final = ask(engine, prompt, **kwargs)
    return final, fed.tokens


@pytest.mark.parametrize("kind", ["dynamic", "static", "static-graphs", "slots"])
@pytest.mark.parametrize("params", [SamplingParams(), SAMPLED], ids=["greedy", "seeded"])
def test_a_conversation_reads_only_what_is_new_and_answers_as_reading_everything(model, kind, params):
    engine = Engine(backend=open_torch(kind, model))
    engine.eos_ids = set()
    fed = Fed(engine, model)
    try:
        first, read = read_by_start(engine, fed, FIRST, params=params)
        assert read == len(FIRST) - 1 and first.stats.prompt_kept == 0

        # the follow-up: the whole conversation again, as every client sends it
        second = FIRST + first.token_ids + [70, 71, 72, 11, 12]
        answer, read = read_by_start(engine, fed, second, params=params)
        kept = len(FIRST) + len(first.token_ids) - 1  # all but the answer's last token was committed
        assert (answer.stats.prompt_kept, read) == (kept, len(second) - 1 - kept)

        # regenerate: the same prompt again reads nothing
        again, read = read_by_start(engine, fed, second, params=params)
        assert read == 0 and again.token_ids == answer.token_ids

        # an edit in the middle of the conversation reads from the edit
        edited = list(second)
        edited[len(FIRST) + 2] = (edited[len(FIRST) + 2] + 1) % V
        changed, read = read_by_start(engine, fed, edited, params=params)
        assert read == len(edited) - 1 - (len(FIRST) + 2)

        # another conversation in the same slot reads from what the two share (the system prompt)
        other = SYSTEM + [50, 51, 52, 53, 54, 55]
        switched, read = read_by_start(engine, fed, other, params=params)
        assert read == len(other) - 1 - len(SYSTEM)

        for prompt, got in ((second, answer), (edited, changed), (other, switched)):
            whole = ask(engine, prompt, params, keep=False)
            assert whole.stats.prompt_kept == 0
            assert got.token_ids == whole.token_ids, "an answer on the kept cache differs from reading everything"
    finally:
        fed.close()
        engine.backend.close()


def test_a_cache_that_trusts_its_length_instead_of_its_tokens_is_caught(model, monkeypatch):
    """The comparison above can fail: keeping every cached position a prompt could use, whatever
    tokens they hold, answers an edited conversation as if it were not edited."""
    engine = Engine(backend=open_torch("dynamic", model))
    engine.eos_ids = set()
    first = ask(engine, FIRST, drafted=False)
    second = FIRST + first.token_ids + [70, 71, 72]
    edited = [(t + 17) % V if SYSTEM.__len__() <= i < len(FIRST) else t for i, t in enumerate(second)]
    whole = ask(engine, edited, drafted=False, keep=False)
    ask(engine, second, drafted=False)  # the cache holds the unedited conversation

    monkeypatch.setattr(
        held_mod, "positions_to_keep", lambda held, prompt, want_hidden=False: min(len(held), len(prompt) - 1)
    )
    trusting = ask(engine, edited, drafted=False)
    assert trusting.stats.prompt_kept > len(FIRST)
    assert trusting.token_ids != whole.token_ids


def test_drafters_see_the_whole_conversation_after_a_kept_prefix(model):
    seen = []

    class Recording(ContextDrafter):
        def reset(self, context_ids):
            seen.append(list(context_ids))
            super().reset(context_ids)

    engine = Engine(backend=open_torch("dynamic", model))
    engine.eos_ids = set()
    first = ask(engine, FIRST)
    second = FIRST + first.token_ids + [70, 71]
    request = GenerationRequest(prompt_ids=second, max_new_tokens=6, drafters=[Recording()], budget=4)
    final = list(engine.generate(request))[-1]
    assert final.stats.prompt_kept > len(FIRST) and seen == [second]


def test_the_answers_figures_say_how_much_of_the_prompt_came_from_the_cache(model):
    from draftscope.core.session import answer_record
    from draftscope.core.words import answer_stats

    engine = Engine(backend=open_torch("dynamic", model))
    engine.eos_ids = set()
    first = ask(engine, FIRST)
    second = ask(engine, FIRST + first.token_ids + [70, 71])
    assert "from cache" not in answer_stats(answer_record(first, None)[0])
    line = answer_stats(answer_record(second, None)[0])
    kept = len(FIRST) + len(first.token_ids) - 1
    assert f"prompt {len(FIRST) + len(first.token_ids) + 2} tokens, {kept} from cache" in line
    old = {k: v for k, v in answer_record(second, None)[0].items() if not k.startswith("prompt_")}
    assert "prompt" not in answer_stats(old)  # answers stored before this was counted


@torch.inference_mode()
def test_the_static_cache_reads_a_follow_up_as_one_causal_block_over_what_it_kept(model):
    """The kept prefix plus the new tokens read as a block give the logits of reading it all."""
    static = open_torch("static", model)
    full = TorchBackend(model, IdTokenizer())
    from draftscope.draft_tree import chain_tree

    prompt = FIRST + [70, 71, 72, 73, 74, 75]
    static.start(FIRST)
    static.start(prompt)
    full.start(prompt)
    assert static.last_kept == len(FIRST) - 1
    root = torch.tensor(prompt[-1])
    a = static.verify(int(root), chain_tree([3, 4])).logits
    b = full.verify(int(root), chain_tree([3, 4])).logits
    torch.testing.assert_close(a, b, atol=1e-4, rtol=1e-4)


# ---------------------------------------------------------------- llama.cpp


@pytest.fixture(scope="module")
def gguf(tokenizer, tokenizer_dir, tmp_path_factory):
    from gguf_fixtures import write_tiny_gguf

    need_llama_cpp()
    model = tiny_llama(len(tokenizer), seed=3, sharpen=8.0, max_positions=1024)
    return write_tiny_gguf(tmp_path_factory.mktemp("prompt-cache") / "tiny-F32.gguf", model, tokenizer_dir)


def need_llama_cpp():
    from llama_helpers import need_llama_cpp as need

    return need()


class Prefilled:
    """Counts the prompt tokens llama.cpp is given (its Prefill items: steps are Verify items)."""

    def __init__(self, monkeypatch) -> None:
        from draftscope.engine.backends.llama.llamacpp import LlamaCppBackend
        from draftscope.engine.backends.work import Prefill

        self.tokens = 0
        decode = LlamaCppBackend.decode_many

        def counting(backend, work):
            self.tokens += sum(len(item.tokens) for item in work.values() if isinstance(item, Prefill))
            return decode(backend, work)

        monkeypatch.setattr(LlamaCppBackend, "decode_many", counting)


def words(tokenizer, text):
    return tokenizer(text, add_special_tokens=False)["input_ids"]


@pytest.mark.parametrize("params", [SamplingParams(), SAMPLED], ids=["greedy", "seeded"])
def test_llama_cpp_reads_only_what_is_new_and_answers_as_reading_everything(gguf, tokenizer, params, monkeypatch):
    """Equal to reading everything, or diverging at a near-tie: llama.cpp's arithmetic depends on
    the batch (a kept prefix was read in other batches than a whole prompt), as measured there."""
    from llama_helpers import assert_plain_or_near_tie

    from draftscope.engine.backends import open_backend

    engine = Engine(backend=open_backend(str(gguf), backend="llama.cpp"))
    engine.eos_ids = set()
    fed = Prefilled(monkeypatch)
    try:
        first_prompt = words(tokenizer, "system: be brief. user: one two three four five one two three")
        first = ask(engine, first_prompt, params)
        second = first_prompt + first.token_ids + words(tokenizer, " user: and red green blue red green")
        fed.tokens = 0
        answer = ask(engine, second, params)
        kept = len(first_prompt) + len(first.token_ids) - 1
        assert (answer.stats.prompt_kept, fed.tokens) == (kept, len(second) - 1 - kept)
        fed.tokens = 0
        again = ask(engine, second, params)
        assert fed.tokens == 0 and again.stats.prompt_kept == len(second) - 1
        edit_at = len(first_prompt) // 2
        edited = second[:edit_at] + words(tokenizer, " zebra") + second[edit_at + 1 :]
        fed.tokens = 0
        changed = ask(engine, edited, params)
        shared = next(i for i, (a, b) in enumerate(zip(second, edited)) if a != b)
        assert fed.tokens == len(edited) - 1 - shared
        for prompt, got in ((second, answer), (edited, changed)):
            whole = ask(engine, prompt, params, keep=False)
            assert_plain_or_near_tie(engine, prompt, whole.token_ids, got.token_ids, params)
    finally:
        engine.backend.close()


def test_a_request_for_no_tokens_reads_its_prompt_for_the_next_on_llama_cpp(gguf, tokenizer, monkeypatch):
    """A read ahead (issue 61: the API's max_tokens 0) writes nothing and leaves the prompt in the
    cache: the request that follows is fed only its last token, and answers as a cold read."""
    from llama_helpers import assert_plain_or_near_tie

    from draftscope.engine.backends import open_backend

    engine = Engine(backend=open_backend(str(gguf), backend="llama.cpp"))
    engine.eos_ids = set()
    fed = Prefilled(monkeypatch)
    try:
        prompt = words(tokenizer, "system: be brief. user: one two three four five one two three four")
        warmed = ask(engine, prompt, drafted=False, tokens=0)
        assert warmed.token_ids == [] and warmed.finish_reason == "length"
        fed.tokens = 0
        answer = ask(engine, prompt, drafted=False, tokens=6)
        assert (answer.stats.prompt_kept, fed.tokens) == (len(prompt) - 1, 0)
        cold = ask(engine, prompt, drafted=False, tokens=6, keep=False)
        assert_plain_or_near_tie(engine, prompt, cold.token_ids, answer.token_ids, SamplingParams())
    finally:
        engine.backend.close()


def test_a_model_in_a_child_process_keeps_its_cache_too(gguf, tokenizer):
    """The RPC workers' backend (llama.cpp in a child process) keeps the conversation as well."""
    from draftscope.engine.backends.llama.isolated import IsolatedLlamaBackend

    engine = Engine(backend=IsolatedLlamaBackend(gguf, tokenizer, context=256, threads=1))
    engine.eos_ids = set()
    try:
        prompt = words(tokenizer, "one two three four five one two three")
        first = ask(engine, prompt, drafted=False, tokens=6)
        second = ask(engine, prompt + first.token_ids + words(tokenizer, " four"), drafted=False, tokens=4)
        assert second.stats.prompt_kept == len(prompt) + len(first.token_ids) - 1
    finally:
        engine.backend.close()


def test_measuring_plain_speed_again_keeps_the_conversations_cache(model):
    """The window measures plain decoding again every few minutes: on the conversation the cache
    holds, so the next turn still reads only what is new."""
    engine = Engine(backend=open_torch("dynamic", model))
    engine.eos_ids = set()
    prompt = FIRST * 5  # past the 64 tokens a baseline is measured on
    first = ask(engine, prompt, drafted=False)
    assert engine.measure_baseline(tokens=6) > 0
    second = ask(engine, prompt + first.token_ids + [70, 71])
    # the measurement went on from the answer's last token: that one may be kept too
    assert second.stats.prompt_kept >= len(prompt) + len(first.token_ids) - 1


def test_bench_turns_prints_each_turns_first_token_and_what_came_from_the_cache(gguf, tmp_path, capsys):
    """A two-turn conversation through our server (a process of its own), as the benchmark drives it."""
    import json

    from draftscope.cli import main

    document = tmp_path / "notes.txt"
    document.write_text("The cat sat on the mat. The dog sat on the log. " * 10)
    out = tmp_path / "turns.json"
    code = main(
        [
            "bench",
            "turns",
            "--model",
            str(gguf),
            "--servers",
            "ours",
            "--document",
            str(document),
            "--turns",
            "2",
            "--repeats",
            "1",
            "--max-new-tokens",
            "6",
            "--json",
            str(out),
        ]
    )
    printed = capsys.readouterr().out
    assert code == 0, printed
    rows = json.loads(out.read_text())
    assert [r["turn"] for r in rows] == [1, 2]
    assert rows[0]["cached_tokens"] == 0 and rows[0]["prompt_tokens"] <= rows[1]["cached_tokens"]
    assert "| 2 | ours |" in printed and "first token" in printed
