"""A conversation's KV cache saved on disk and restored on llama.cpp (issue 61): the sequence state
(``llama_state_seq_get_data``/``set_data``) of a tiny F32 GGUF. After a restart (a new process) only
the new turn is read, and the answer is the cold read's or diverges at a measured near-tie
(tests/llama_helpers.py). llama.cpp refusing the state (no contiguous cells) falls back to reading."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from engine_fixtures import tiny_llama
from test_prompt_cache import Prefilled

from draftscope.engine.engine import Engine, GenerationRequest
from draftscope.engine.kv_disk import KvDiskStore, cache_files
from draftscope.engine.sampling import SamplingParams

SAMPLED = SamplingParams(temperature=0.9, top_p=0.95, seed=7)
TESTS = Path(__file__).resolve().parents[1]
FIRST = "system: be brief. user: one two three four five one two three four five one two three"
NEXT = " user: and red green blue red green"


@pytest.fixture(scope="module")
def gguf(tokenizer, tokenizer_dir, tmp_path_factory):
    from gguf_fixtures import write_tiny_gguf
    from llama_helpers import need_llama_cpp

    need_llama_cpp()
    model = tiny_llama(len(tokenizer), seed=3, sharpen=8.0, max_positions=1024)
    return write_tiny_gguf(tmp_path_factory.mktemp("kv-disk") / "tiny-F32.gguf", model, tokenizer_dir)


def words(tokenizer, text):
    return tokenizer(text, add_special_tokens=False)["input_ids"]


def open_engine(gguf, folder=None) -> Engine:
    from draftscope.engine.backends import open_backend

    store = KvDiskStore(Path(folder), 10**9, min_save=16, min_gain=8) if folder else None
    engine = Engine(backend=open_backend(str(gguf), backend="llama.cpp"), kv_store=store)
    engine.eos_ids = set()
    return engine


def ask(engine, prompt, params=None, *, keep=True):
    request = GenerationRequest(
        prompt_ids=list(prompt), max_new_tokens=8, sampling=params or SamplingParams(), keep_cache=keep
    )
    final = list(engine.generate(request))[-1]
    assert final.error is None, final.error
    return final


CHILD = """
import json, sys
sys.path.insert(0, {tests!r})
from test_kv_disk_llama import ask, open_engine
engine = open_engine(sys.argv[1], sys.argv[2])
final = ask(engine, json.loads(sys.argv[3]), {params})
engine.close()  # the caches are saved as the engine closes
print(json.dumps(final.token_ids))
"""


def first_turn_in_a_child(gguf, folder, prompt, params) -> list[int]:
    script = CHILD.format(
        tests=str(TESTS / "engine"),
        params=repr(params).replace(
            "SamplingParams", "__import__('draftscope.engine.sampling', fromlist=['x']).SamplingParams"
        ),
    )
    args = [sys.executable, "-c", script, str(gguf), str(folder), json.dumps(prompt)]
    done = subprocess.run(args, capture_output=True, text=True, timeout=600, cwd=TESTS)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize("params", [SamplingParams(), SAMPLED], ids=["greedy", "seeded"])
def test_after_a_restart_llama_cpp_reads_only_the_new_turn(gguf, tokenizer, tmp_path, params, monkeypatch):
    from llama_helpers import assert_plain_or_near_tie

    prompt = words(tokenizer, FIRST)
    first = first_turn_in_a_child(gguf, tmp_path, prompt, params)
    assert len(cache_files(tmp_path)) == 1, "saved as the process closed its engine"
    engine = open_engine(gguf, tmp_path)
    fed = Prefilled(monkeypatch)
    try:
        follow = prompt + first + words(tokenizer, NEXT)
        answer = ask(engine, follow, params)
        saved = len(prompt) + len(first) - 1
        assert (answer.stats.prompt_kept, fed.tokens) == (saved, len(follow) - 1 - saved)
        whole = ask(engine, follow, params, keep=False)
        assert_plain_or_near_tie(engine, follow, whole.token_ids, answer.token_ids, params)
    finally:
        engine.close()


def test_llama_cpp_refusing_a_saved_state_reads_the_prompt(gguf, tokenizer, tmp_path, monkeypatch, caplog):
    """``llama_state_seq_set_data`` returns 0 where no run of free cells is long enough: read instead."""
    prompt = words(tokenizer, FIRST)
    engine = open_engine(gguf, tmp_path)
    try:
        first = ask(engine, prompt)
        ask(engine, words(tokenizer, "user: something else entirely, red green blue red green blue"))
        assert cache_files(tmp_path), "the first conversation was saved before its slot was cut"

        real = engine.backend._L

        class Refusing:
            def __getattr__(self, name):
                return getattr(real, name)

            def llama_state_seq_set_data(self, *args):
                return 0

        monkeypatch.setattr(engine.backend, "_L", Refusing())
        fed = Prefilled(monkeypatch)
        follow = prompt + first.token_ids + words(tokenizer, NEXT)
        answer = ask(engine, follow)
        assert (answer.stats.prompt_kept, fed.tokens) == (0, len(follow) - 1)
        assert "did not take a saved cache" in caplog.text
    finally:
        engine.close()
