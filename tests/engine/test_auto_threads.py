"""Automatic threads (engine/auto_threads.py): at load the engine times plain steps on every core and
on one fewer, alternately, and keeps the faster (one fewer on a tie); the plain speed is measured
after, on the count kept. Explicit threads, one core, or a graphics card: nothing measured."""

from __future__ import annotations

import logging

import pytest
from engine_fixtures import tiny_llama
from gguf_fixtures import write_tiny_gguf
from llama_helpers import need_llama_cpp

from draftscope.engine import auto_threads
from draftscope.engine.auto_threads import CHOOSING_THREADS, TIE, ThreadsChoice, choose_for, choose_threads
from draftscope.engine.engine import Engine
from draftscope.engine.stages import MEASURING_COSTS, MEASURING_SPEED, as_stage


class ScriptedMachine:
    """Steps that take ``seconds[threads]`` on a clock of their own; the first step after a change
    of threads costs a second more (a thread pool starting), which no try may count."""

    def __init__(self, seconds: dict[int, float], spike_at: int | None = None) -> None:
        self.seconds, self.now, self.threads, self.fresh = seconds, 0.0, None, False
        self.calls: list[int] = []
        self.steps = 0
        self.spike_at = spike_at  # this step (counted from 1) takes 10 s more: a load spike

    def set_threads(self, threads: int) -> None:
        self.fresh = self.fresh or threads != self.threads
        self.threads = threads
        self.calls.append(threads)

    def step(self) -> None:
        self.steps += 1
        self.now += self.seconds[self.threads] + (1.0 if self.fresh else 0.0)
        self.now += 10.0 if self.steps == self.spike_at else 0.0
        self.fresh = False

    def clock(self) -> float:
        return self.now


def scripted_choice(seconds: dict[int, float], cores: int = 8, **machine) -> tuple[ThreadsChoice, ScriptedMachine]:
    m = ScriptedMachine(seconds, **machine)
    return choose_threads(m.set_threads, m.step, cores, clock=m.clock), m


def test_the_faster_count_is_kept_and_left_set():
    choice, m = scripted_choice({8: 0.010, 7: 0.012})
    assert choice.threads == 8 and m.threads == 8
    assert choice.step_seconds == pytest.approx({8: 0.010, 7: 0.012}), "the warm-up steps were timed"
    assert choice.words() == "chose 8: 20% faster than 7"

    choice, m = scripted_choice({8: 0.050, 7: 0.020})  # another program holds a core
    assert choice.threads == 7 and m.threads == 7
    assert choice.words() == "chose 7: 150% faster than 8"


def test_a_tie_leaves_a_core_free():
    choice, m = scripted_choice({8: 0.0100, 7: 0.0100 * (1 + TIE / 2)})  # all cores a hair faster
    assert choice.threads == 7 and m.threads == 7
    assert choice.words() == "chose 7: as fast as 8, one core left free"


def test_the_counts_alternate_and_a_spike_falls_on_one_try_only():
    choice, m = scripted_choice({2: 0.010, 1: 0.013}, cores=2, spike_at=6)  # in all cores' first try
    assert choice.threads == 2, "one spike decided the choice"
    assert m.calls == [2, 2, 1, 1, 2, 2], m.calls  # the first step's pace, ABBA, the choice left set


def test_a_slow_model_takes_fewer_steps():
    _, fast = scripted_choice({8: 0.001, 7: 0.001})
    _, slow = scripted_choice({8: 0.5, 7: 0.5})
    assert slow.steps < fast.steps and slow.now - 8 * 1.0 < 8.0  # its timed steps: a few seconds, not dozens


def test_one_thread_is_no_choice():
    with pytest.raises(ValueError, match="at least 2"):
        choose_threads(lambda n: None, lambda: None, 1)


# ------------------------------------------------------------------ the engine, on llama.cpp (a tiny GGUF)


@pytest.fixture(scope="module")
def gguf_file(tokenizer, tokenizer_dir, tmp_path_factory):
    need_llama_cpp()
    return write_tiny_gguf(tmp_path_factory.mktemp("gguf") / "tiny-F32.gguf", tiny_llama(len(tokenizer)), tokenizer_dir)


def opened(gguf_file, tokenizer, threads: int):
    from draftscope.engine.backends.llama.llamacpp import LlamaCppBackend

    return LlamaCppBackend(gguf_file, tokenizer, context=256, threads=threads)


def scripted_steps(backend, monkeypatch, slow_threads: int) -> list[int]:
    """The choice's clock scripted: each verify (the real one runs too) takes 10 ms at ``slow_threads``
    threads and 2 ms at any other count (a busy test machine's own timings would decide otherwise);
    returns the counts verifies ran at."""
    ran, verify, now = [], backend.verify, [0.0]

    def scripted_verify(*args, **kwargs):
        ran.append(backend.threads)
        now[0] += 0.010 if backend.threads == slow_threads else 0.002
        return verify(*args, **kwargs)

    backend.verify = scripted_verify
    monkeypatch.setattr(auto_threads, "step_clock", lambda: now[0])
    return ran


@pytest.mark.parametrize("slow", ["all", "one fewer"])
def test_automatic_keeps_the_count_that_measured_faster_before_the_plain_speed(
    gguf_file, tokenizer, caplog, monkeypatch, slow
):
    backend = opened(gguf_file, tokenizer, threads=2)  # two, whatever this machine has: a choice of 2 or 1
    scripted_steps(backend, monkeypatch, 2 if slow == "all" else 1)
    engine = Engine(backend=backend)  # threads not asked for: Automatic
    heard = []
    try:
        with caplog.at_level(logging.INFO, logger="draftscope.engine.auto_threads"):
            engine.measure(progress=heard.append)
        choice = engine.threads_choice
        assert choice is not None and set(choice.step_seconds) == {2, 1}
        assert choice.threads == (1 if slow == "all" else 2), choice
        assert backend.threads == choice.threads
        # llama.cpp itself computes on the count kept, not only the backend's word for it
        assert backend._L.llama_n_threads(backend._ctx) == choice.threads
        assert backend._L.llama_n_threads_batch(backend._ctx) == 2  # a prompt's reading keeps every core
        assert f"{choice.threads} threads" in backend.describe()
        (line,) = [r.getMessage() for r in caplog.records if r.name == "draftscope.engine.auto_threads"]
        assert " on 2 and " in line and " on 1 threads" in line and choice.words() in line, line
        names = [as_stage(s).name for s in heard]
        assert names.index(CHOOSING_THREADS) < names.index(MEASURING_COSTS) < names.index(MEASURING_SPEED)
        assert CHOOSING_THREADS not in names[names.index(MEASURING_COSTS) :], "the choice came after a measurement"
    finally:
        engine.close()


def test_the_real_choice_on_the_tiny_model_picks_one_of_the_two(gguf_file, tokenizer, caplog):
    backend = opened(gguf_file, tokenizer, threads=2)
    engine = Engine(backend=backend)
    try:
        with caplog.at_level(logging.INFO, logger="draftscope.engine.auto_threads"):
            choice = engine.stepper.call(lambda: choose_for(backend), exclusive=True)
        assert choice.threads in (2, 1) and backend._L.llama_n_threads(backend._ctx) == choice.threads
        assert all(s > 0 for s in choice.step_seconds.values())
        assert any("a plain step took" in r.getMessage() for r in caplog.records)
    finally:
        engine.close()


def test_threads_asked_for_or_one_core_or_a_card_measure_nothing(gguf_file, tokenizer, monkeypatch):
    backend = opened(gguf_file, tokenizer, threads=2)
    ran = scripted_steps(backend, monkeypatch, 0)
    engine = Engine(backend=backend, threads=2)  # Settings ▸ Threads at 2
    try:
        engine.measure(baseline=False)
        assert engine.threads_choice is None and backend._L.llama_n_threads(backend._ctx) == 2
        assert set(ran) == {2}, "steps ran at another count"
        backend.device = "gpu"  # layers on a graphics card: the CPU's threads decide little
        assert backend.cpu_threads() is None
    finally:
        engine.close()

    monkeypatch.setattr("draftscope.sysinfo.usable_cores", lambda: 1)  # a one-core computer
    backend = opened(gguf_file, tokenizer, threads=None)
    engine = Engine(backend=backend)
    try:
        assert backend.threads == 1
        engine.measure(baseline=False)
        assert engine.threads_choice is None
    finally:
        engine.close()


# ------------------------------------------------------------------ torch on the CPU


def test_automatic_on_torch_leaves_torch_on_the_count_kept(tokenizer):
    import torch

    before = torch.get_num_threads()
    engine = Engine(tiny_llama(len(tokenizer)), tokenizer)  # Automatic
    try:
        cores = engine.backend.cpu_threads()
        if cores < 2:
            pytest.skip("torch computes on one thread here: nothing to choose")
        engine.measure(baseline=False)
        choice = engine.threads_choice
        assert choice is not None and set(choice.step_seconds) == {cores, cores - 1}
        assert engine.stepper.call(torch.get_num_threads) == choice.threads
    finally:
        engine.close()
        torch.set_num_threads(before)
