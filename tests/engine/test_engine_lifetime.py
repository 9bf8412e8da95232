"""An engine's model is freed when the engine is (issue 60, defects 9 and 7): at the last reference,
with no garbage collection (a reference cycle between the stepper and its backend kept a dropped
engine's weights and llama.cpp context until a full collection), and at ``close`` once answers ran
(its thread ended and joined; llama.cpp's context freed at once)."""

from __future__ import annotations

import gc
import threading
import weakref

import pytest
from engine_fixtures import tiny_llama

from draftscope.engine.engine import Engine, GenerationRequest

pytestmark = pytest.mark.usefixtures("one_thread")


@pytest.fixture
def no_collection():
    """Garbage collection off for the test: only reference counts free what it drops."""
    was_on = gc.isenabled()
    gc.disable()
    yield
    if was_on:
        gc.enable()


def stepper_threads() -> set[threading.Thread]:
    return {t for t in threading.enumerate() if t.name in ("stepper", "llama.cpp stepper")}


def test_a_dropped_torch_engine_frees_its_model_without_a_collection(tokenizer, no_collection):
    model = tiny_llama(len(tokenizer), seed=1)
    engine = Engine(model, tokenizer)
    backend, weights = weakref.ref(engine.backend), weakref.ref(model)
    del engine, model
    assert backend() is None, "the dropped engine's backend is still referenced (a reference cycle)"
    assert weights() is None, "the dropped engine's model is still referenced"


def test_a_dropped_llama_cpp_engine_frees_its_context_without_a_collection(tokenizer, tokenizer_dir, tmp_path):
    from gguf_fixtures import write_tiny_gguf
    from llama_helpers import need_llama_cpp

    need_llama_cpp()
    from draftscope.engine.backends.llama.llamacpp import LlamaCppBackend

    path = write_tiny_gguf(tmp_path / "tiny-F32.gguf", tiny_llama(len(tokenizer), seed=1), tokenizer_dir)
    gc.collect()
    gc.disable()  # after the file is written: only the engine's own references are under test
    try:
        engine = Engine(backend=LlamaCppBackend(path, tokenizer, context=256, threads=1))
        backend = weakref.ref(engine.backend)
        del engine
        assert backend() is None, "the dropped engine's llama.cpp backend (its context) is still referenced"
    finally:
        gc.enable()


def test_closing_an_engine_that_answered_ends_its_thread_and_frees_its_model(tokenizer, no_collection):
    model = tiny_llama(len(tokenizer), seed=1)
    engine = Engine(model, tokenizer)
    before = stepper_threads()  # other tests' engines may still have theirs
    final = list(engine.generate(GenerationRequest(prompt_ids=[5, 6, 7], max_new_tokens=4)))[-1]
    assert final.finish_reason in ("length", "eos")
    ours = stepper_threads() - before
    assert ours, "the answer ran on the stepper's thread"
    backend, weights = weakref.ref(engine.backend), weakref.ref(model)
    engine.close()
    assert not any(t.is_alive() for t in ours), "closing the engine ended and joined its stepper's thread"
    del engine, model, final
    assert backend() is None and weights() is None, "the closed engine's model is still referenced"


def test_a_closed_engine_refuses_answers_in_words(tokenizer):
    engine = Engine(tiny_llama(len(tokenizer), seed=1), tokenizer)
    engine.close()
    final = list(engine.generate(GenerationRequest(prompt_ids=[5, 6, 7], max_new_tokens=4)))[-1]
    assert final.finish_reason == "error" and "closed" in final.error
