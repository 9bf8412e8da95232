"""GGUF files handed to llama.cpp: damaged, truncated, of an unknown architecture or too big for
memory, each gives an error naming the problem and this process lives on (llama.cpp itself only
ever sees a file that loaded in a child process first)."""

from __future__ import annotations

import random

import pytest

pytest.importorskip("llama_cpp")

from draftscope.draft_tree import DraftTree  # noqa: E402
from draftscope.engine.backends import gguf_check, open_backend  # noqa: E402
from draftscope.engine.backends.gguf_check import GGUFError  # noqa: E402
from draftscope.engine.backends.gguf_writer import random_llama  # noqa: E402
from draftscope.engine.backends.llama_lib import LlamaCppError  # noqa: E402
from draftscope.engine.models import ModelNotFoundError  # noqa: E402


@pytest.fixture(scope="module")
def good(tmp_path_factory):
    return random_llama(tmp_path_factory.mktemp("gguf") / "good.gguf")


@pytest.fixture(autouse=True)
def own_cache(tmp_path, monkeypatch):
    """Every test starts with no file remembered as checked."""
    monkeypatch.setenv("DRAFTSCOPE_CACHE_DIR", str(tmp_path / "cache"))


def test_a_good_file_passes_and_is_remembered(good, monkeypatch):
    gguf_check.check(good)
    calls = []
    monkeypatch.setattr(gguf_check.subprocess, "run", lambda *a, **k: calls.append(a))
    gguf_check.check(good)  # the child ran once for this file
    assert calls == []


def test_not_a_gguf_and_truncated_files_are_named(good, tmp_path):
    text = tmp_path / "notes.gguf"
    text.write_text("hello, I am not a model")
    with pytest.raises(GGUFError, match="not a GGUF file"):
        gguf_check.check(text)
    data = good.read_bytes()
    cut = tmp_path / "cut.gguf"
    cut.write_bytes(data[: len(data) * 2 // 3])
    with pytest.raises(GGUFError, match="truncated|damaged"):
        gguf_check.check(cut)
    empty = tmp_path / "empty.gguf"
    empty.write_bytes(b"")
    with pytest.raises(GGUFError):
        gguf_check.check(empty)


def test_an_architecture_llama_cpp_does_not_know(good, tmp_path):
    data = good.read_bytes()
    at = data.index(b"llama", data.index(b"general.architecture"))
    odd = tmp_path / "odd.gguf"
    odd.write_bytes(data[:at] + b"zzzzz" + data[at + 5 :])  # same length: only the name changes
    with pytest.raises(GGUFError, match="zzzzz"):
        gguf_check.check(odd)


def test_a_model_bigger_than_free_memory_is_refused_before_loading(good, monkeypatch):
    monkeypatch.setattr(gguf_check, "_available_memory", lambda: 1000)
    with pytest.raises(GGUFError, match="memory"):
        gguf_check.check(good)


def test_fuzzed_files_give_errors_never_a_dead_process(good, tmp_path):
    """Bytes flipped in the header and tensor table (where parsers trip): every file either opens
    and runs, or is refused with a message; the test process survives all of them."""
    data = good.read_bytes()
    header_end = data.index(b"blk.0.attn_norm.weight") + 400  # metadata and the start of the tensor table
    rng = random.Random(7)
    outcomes = {"refused": 0, "opened": 0}
    for k in range(24):
        damaged = bytearray(data)
        for _ in range(rng.choice([1, 2, 8])):
            damaged[rng.randrange(4, header_end)] = rng.randrange(256)
        path = tmp_path / f"fuzz{k}.gguf"
        path.write_bytes(bytes(damaged))
        try:
            backend = open_backend(str(path), backend="llama.cpp", context=64, threads=1)
        except (GGUFError, LlamaCppError, ModelNotFoundError, ValueError) as exc:
            assert str(exc), "an error without words"
            outcomes["refused"] += 1
            continue
        try:
            backend.start([1, 2, 3])
            backend.verify(3, DraftTree.empty())
        except (LlamaCppError, ValueError):
            pass
        finally:
            backend.close()
        outcomes["opened"] += 1
    assert outcomes["refused"] > 0, outcomes
