"""A conversation's KV cache saved on disk and restored (issue 61), on torch (fp32, token-identical).

A conversation switched away from is saved before its slot is cut; coming back to it (a switch, a
restart in a new process) loads the saved prefix and reads only the new turn, counted by the tokens
the model is fed. The answer is the cold read's, greedy and seeded. Files that do not check out are
ignored and the answer is still right; keeping one token too many is caught by the same comparison.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from engine_fixtures import IdTokenizer, tiny_llama
from test_prompt_cache import Fed

import draftscope.engine.kv_restore as kv_restore
from draftscope.engine.backends.pytorch.torch_backend import TorchBackend
from draftscope.engine.engine import Engine, GenerationRequest
from draftscope.engine.kv_disk import KvDiskStore, cache_files
from draftscope.engine.sampling import SamplingParams

V, SEED = 96, 5
A = [(i * 7) % 90 + 3 for i in range(60)]  # one conversation
B = [(i * 5) % 90 + 2 for i in range(40)]  # another, taking the slot in between
NEW_TURN = [70, 71, 72, 11, 12]
SAMPLED = SamplingParams(temperature=0.9, top_p=0.95, seed=7)
TESTS = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def model():
    return tiny_llama(V, seed=SEED, sharpen=6.0, max_positions=512)


def store_in(folder) -> KvDiskStore:
    return KvDiskStore(Path(folder), 10**8, min_save=16, min_gain=8)


def engine_on(model, folder=None) -> Engine:
    engine = Engine(backend=TorchBackend(model, IdTokenizer()), kv_store=store_in(folder) if folder else None)
    engine.eos_ids = set()
    return engine


def ask(engine, prompt, params=None, *, keep=True):
    request = GenerationRequest(
        prompt_ids=list(prompt), max_new_tokens=12, sampling=params or SamplingParams(), keep_cache=keep
    )
    final = list(engine.generate(request))[-1]
    assert final.error is None, final.error
    return final


def cold(model, prompt, params):
    """The answer of reading everything, on an engine with no cache on disk."""
    return ask(engine_on(model), prompt, params).token_ids


def switch_away_and_back(model, folder, params):
    """A, then B in the slot (A saved), then A's next turn: (that answer, tokens fed, its prompt)."""
    engine = engine_on(model, folder)
    first = ask(engine, A, params)
    ask(engine, B, params)
    follow = A + first.token_ids + NEW_TURN
    fed = Fed(engine, model)
    try:
        answer = ask(engine, follow, params)
        return answer, fed.tokens, follow, len(A) + len(first.token_ids) - 1
    finally:
        fed.close()


@pytest.mark.parametrize("params", [SamplingParams(), SAMPLED], ids=["greedy", "seeded"])
def test_a_conversation_come_back_to_is_restored_and_answers_as_a_cold_read(model, tmp_path, params):
    answer, fed, follow, saved = switch_away_and_back(model, tmp_path, params)
    assert answer.stats.prompt_kept == saved and fed == len(follow) - 1 - saved, "only the new turn is read"
    assert answer.token_ids == cold(model, follow, params)


def test_keeping_one_token_too_many_is_caught(model, tmp_path, monkeypatch):
    """The wrong variant (a restore that keeps one position more than the prompt shares with the
    saved cache) is refused by the test above."""
    right = kv_restore.positions_to_keep
    monkeypatch.setattr(kv_restore, "positions_to_keep", lambda held, prompt, **kw: right(held, prompt, **kw) + 1)
    with pytest.raises(AssertionError):
        test_a_conversation_come_back_to_is_restored_and_answers_as_a_cold_read(model, tmp_path, SamplingParams())


CHILD = """
import sys
sys.path.insert(0, {tests!r})
from engine_fixtures import IdTokenizer, tiny_llama
from draftscope.engine.backends.pytorch.torch_backend import TorchBackend
from draftscope.engine.engine import Engine, GenerationRequest
from draftscope.engine.kv_disk import KvDiskStore

engine = Engine(
    backend=TorchBackend(tiny_llama({V}, seed={SEED}, sharpen=6.0, max_positions=512), IdTokenizer()),
    kv_store=KvDiskStore(__import__("pathlib").Path(sys.argv[1]), 10**8, min_save=16, min_gain=8),
)
engine.eos_ids = set()
final = list(engine.generate(GenerationRequest(prompt_ids={A}, max_new_tokens=12)))[-1]
engine.close()  # the caches are saved as the engine closes
print(__import__("json").dumps(final.token_ids))
"""


def first_turn_in_a_child(folder) -> list[int]:
    script = CHILD.format(tests=str(TESTS), V=V, SEED=SEED, A=A)
    done = subprocess.run([sys.executable, "-c", script, str(folder)], capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize("params", [SamplingParams()], ids=["greedy"])
def test_after_a_restart_only_the_new_turn_is_read(model, tmp_path, params):
    first = first_turn_in_a_child(tmp_path)
    assert len(cache_files(tmp_path)) == 1, "saved as the process closed its engine"
    engine = engine_on(model, tmp_path)
    fed = Fed(engine, model)
    follow = A + first + NEW_TURN
    answer = ask(engine, follow, params)
    saved = len(A) + len(first) - 1
    assert (answer.stats.prompt_kept, fed.tokens) == (saved, len(follow) - 1 - saved)
    assert engine.backend.take_restored(0)[0] in (0, saved), "read once by the answer, or here"
    assert answer.token_ids == cold(model, follow, params)


def damage(path: Path, how: str) -> None:
    data = path.read_bytes()
    if how == "damaged":
        data = data[:-100] + bytes([data[-100] ^ 0x55]) + data[-99:]
    elif how == "truncated":
        data = data[:-1000]
    path.write_bytes(data)


def claim_for(folder: Path, path: Path, key: str) -> None:
    """The index says ``path`` holds a cache under ``key`` (a stale or mixed-up index)."""
    index = json.loads((folder / "index.json").read_text())
    index["files"][path.name]["key"] = key
    (folder / "index.json").write_text(json.dumps(index))


def foreign_cache_of(folder: Path, prompt: list[int], key: str) -> Path:
    """Another model's cache of ``prompt``, saved in the same folder, the index naming it ours."""
    foreign = engine_on(tiny_llama(V, seed=SEED + 1, sharpen=6.0, max_positions=512), folder)
    ask(foreign, prompt)
    foreign.close()
    path = next(
        p for p in cache_files(folder) if json.loads((folder / "index.json").read_text())["files"][p.name]["key"] != key
    )
    claim_for(folder, path, key)
    return path


@pytest.mark.parametrize("how", ["damaged", "truncated", "foreign model"])
def test_a_cache_file_that_does_not_check_out_is_ignored_and_the_answer_is_right(model, tmp_path, how, caplog):
    engine = engine_on(model, tmp_path)
    first = ask(engine, A)
    ask(engine, B)  # A saved
    follow = A + first.token_ids + NEW_TURN
    (ours,) = [
        p for p in cache_files(tmp_path) if engine.backend.kv_cache.store.find(engine.backend.kv_cache.key, follow, 0)
    ]
    if how == "foreign model":
        ours.unlink()
        bad = foreign_cache_of(tmp_path, A + first.token_ids + [1] * 20, engine.backend.kv_cache.key)
    else:
        bad = ours
        damage(bad, how)
    fed = Fed(engine, model)
    answer = ask(engine, follow)
    assert (answer.stats.prompt_kept, fed.tokens) == (0, len(follow) - 1), "read as without it"
    assert answer.token_ids == cold(model, follow, SamplingParams())
    assert "ignored" in caplog.text and not bad.exists()
