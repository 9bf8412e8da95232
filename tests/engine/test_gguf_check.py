"""GGUF files handed to llama.cpp: damaged, truncated, of an unknown architecture or too big for
memory, each gives an error naming the problem and this process lives on (llama.cpp itself only
ever sees a file that loaded in a child process first)."""

from __future__ import annotations

import os
import random
import shutil

import pytest
from llama_helpers import need_llama_cpp

need_llama_cpp()

from draftscope.draft_tree import DraftTree
from draftscope.engine.backends import open_backend
from draftscope.engine.backends.llama import gguf_check
from draftscope.engine.backends.llama.gguf_check import GGUFError
from draftscope.engine.backends.llama.gguf_writer import random_llama
from draftscope.engine.backends.llama.llama_lib import LlamaCppError
from draftscope.models.resolve import ModelNotFoundError


@pytest.fixture(scope="module")
def good(tmp_path_factory):
    return random_llama(tmp_path_factory.mktemp("gguf") / "good.gguf")


pytestmark = pytest.mark.usefixtures("own_cache")  # every test starts with no file remembered as checked


@pytest.fixture
def fake_child(tmp_path, monkeypatch):
    """``fake_child(body)``: the checking child becomes a shell script running ``body``; returns the
    file the script adds a line to each time it starts (see run_count)."""
    runs = tmp_path / "runs.log"

    def make(body: str):
        script = tmp_path / "fake-python"
        script.write_text(f"#!/bin/sh\necho run >> '{runs}'\n{body}\n")
        script.chmod(0o755)
        monkeypatch.setattr(gguf_check.sys, "executable", str(script))
        return runs

    return make


def run_count(runs) -> int:
    return len(runs.read_text().splitlines()) if runs.exists() else 0


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


def test_a_child_that_says_why_it_failed_gives_that_reason(good, fake_child):
    """The user reads llama.cpp's own reason (the child's last line), not a generic message."""
    fake_child("echo loading...; echo 'llama.cpp could not load good.gguf: tensor blk.0 has a bad shape'; exit 1")
    with pytest.raises(GGUFError, match="^llama.cpp could not load good.gguf: tensor blk.0 has a bad shape$"):
        gguf_check.check(good)


def test_a_child_killed_by_a_signal_is_an_error_naming_file_and_signal(good, fake_child):
    """A file that crashes llama.cpp is reported as a crash, and is tried again next time."""
    runs = fake_child("ulimit -c 0; kill -SEGV $$")  # no core file left behind
    for attempt in (1, 2):
        with pytest.raises(GGUFError, match=r"crashed reading good\.gguf \(signal 11\)"):
            gguf_check.check(good)
        assert run_count(runs) == attempt  # not remembered as checked: the child ran again


def test_a_child_that_never_finishes_is_stopped_with_an_error(good, fake_child):
    """A load that hangs is given up after the timeout, in words, and is tried again next time."""
    runs = fake_child("exec sleep 60")
    for attempt in (1, 2):
        with pytest.raises(GGUFError, match=r"did not finish loading good\.gguf within 1 s"):
            gguf_check.check(good, timeout=1)
        assert run_count(runs) == attempt  # not remembered as checked: the child ran again


def test_a_file_changed_after_passing_is_checked_again(good, tmp_path):
    """A model file replaced in place (same size) is not trusted on the strength of the old check."""
    model = tmp_path / "model.gguf"
    shutil.copyfile(good, model)
    gguf_check.check(model)
    before = model.stat()
    data = model.read_bytes()
    at = data.index(b"llama", data.index(b"general.architecture"))
    model.write_bytes(data[:at] + b"zzzzz" + data[at + 5 :])  # same size, unknown architecture
    os.utime(model, ns=(before.st_atime_ns, before.st_mtime_ns + 5_000_000_000))
    with pytest.raises(GGUFError, match="zzzzz"):
        gguf_check.check(model)


def test_a_new_modification_time_runs_the_child_again(good, tmp_path, fake_child):
    """A passed file is not loaded twice, but one touched since is checked again."""
    runs = fake_child("echo ok")
    model = tmp_path / "model.gguf"
    shutil.copyfile(good, model)
    gguf_check.check(model)
    gguf_check.check(model)
    assert run_count(runs) == 1
    st = model.stat()
    os.utime(model, ns=(st.st_atime_ns, st.st_mtime_ns + 5_000_000_000))
    gguf_check.check(model)
    assert run_count(runs) == 2


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
    outcomes = {"refused": 0, "answered": 0, "failed in words": 0}
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
            outcomes["answered"] += 1
        except Exception as exc:  # any other kind is a failure, reported with the file
            assert isinstance(exc, (LlamaCppError, ValueError)), f"fuzz{k}: {type(exc).__name__}: {exc}"
            assert any(c.isalpha() for c in str(exc)), f"fuzz{k}: an error without words: {exc!r}"
            outcomes["failed in words"] += 1
        finally:
            backend.close()
    assert outcomes["refused"] > 0, outcomes
    assert outcomes["answered"] + outcomes["failed in words"] > 0, outcomes  # some opened: that path ran
