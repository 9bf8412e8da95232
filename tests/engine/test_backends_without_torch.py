"""Issue 67: where torch is not installed, what opens on it is refused in words naming what needs it (the
torch backend asked for, a Hugging Face folder, a GGUF that cannot run on llama.cpp, a draft model
beside a llama.cpp model that would run on torch), before the window is told weights are loading;
a GGUF on llama.cpp opens and answers with a llama.cpp draft model as before."""

from __future__ import annotations

import sys

import pytest
from engine_fixtures import tiny_llama
from gguf_fixtures import write_tiny_gguf
from llama_helpers import need_llama_cpp

from draftscope.drafters.draft_model import load_draft_model
from draftscope.drafters.model_drafter import ModelDrafter
from draftscope.engine import backends
from draftscope.engine.backends import open_backend
from draftscope.engine.engine import Engine, GenerationRequest
from draftscope.engine.sampling import SamplingParams
from draftscope.engine.stages import LOADING_WEIGHTS
from draftscope.optional_torch import TorchMissing


@pytest.fixture(scope="module")
def model(tokenizer):
    return tiny_llama(len(tokenizer), seed=3, sharpen=4.0)


@pytest.fixture(scope="module")
def gguf(model, tokenizer_dir, tmp_path_factory):
    return write_tiny_gguf(tmp_path_factory.mktemp("gguf") / "tiny-F32.gguf", model, tokenizer_dir)


@pytest.fixture(scope="module")
def folder(model, tokenizer, tmp_path_factory):
    """The same model as a Hugging Face folder."""
    path = tmp_path_factory.mktemp("hf") / "tiny"
    model.save_pretrained(path)
    tokenizer.save_pretrained(path)
    return path


@pytest.fixture
def no_torch(monkeypatch):
    """torch as if not installed: ``import torch`` fails and optional_torch says so."""
    monkeypatch.setitem(sys.modules, "torch", None)


def refused(spec, **options) -> tuple[str, list[str]]:
    """The words of the refusal, and the stages the load told of before it."""
    stages: list[str] = []
    with pytest.raises(TorchMissing) as missing:
        open_backend(spec, progress=lambda stage: stages.append(getattr(stage, "name", stage)), **options)
    return str(missing.value), stages


def test_the_torch_backend_asked_for_is_refused_in_words(no_torch, gguf):
    words, stages = refused(str(gguf), backend="torch")
    assert words.startswith("The torch backend (Settings ▸ Model ▸ Backend) needs PyTorch, which is not installed")
    assert "pip install" in words and LOADING_WEIGHTS not in stages


def test_a_hugging_face_folder_is_refused_in_words(no_torch, folder):
    words, stages = refused(str(folder))
    assert words.startswith("A Hugging Face model folder (") and ") needs PyTorch, which is not installed" in words, (
        words
    )
    assert LOADING_WEIGHTS not in stages


def test_a_gguf_without_llama_cpp_is_refused_in_words(no_torch, gguf, monkeypatch):
    monkeypatch.setattr(backends, "llama_cpp_available", lambda: False)
    words, _ = refused(str(gguf))
    assert words.startswith("Running a GGUF without llama.cpp (llama-cpp-python is not installed")


def test_a_gguf_on_llama_cpp_answers_with_a_llama_cpp_draft_model(no_torch, gguf, folder):
    need_llama_cpp()
    engine = Engine.load(str(gguf), measure=False, threads=1)
    draft = load_draft_model(str(gguf), engine).model
    try:
        assert engine.backend.kind == draft.kind == "llama.cpp"
        request = GenerationRequest(
            prompt_ids=[5, 6, 7, 5, 6],
            max_new_tokens=16,
            sampling=SamplingParams(temperature=0.8, seed=4),
            drafters=[ModelDrafter(draft, max_tokens=3)],
            budget=3,
        )
        final = list(engine.generate(request))[-1]
        assert final.error is None and len(final.token_ids) > 0 and final.stats.accepted_by_source.get("model", 0) > 0
        with pytest.raises(
            TorchMissing, match=r"^The draft model .* \(it runs on torch beside this model\) needs PyTorch"
        ):
            load_draft_model(str(folder), engine)
    finally:
        draft.close()
        engine.close()


def test_torch_loaded_after_a_llama_cpp_model_opened_gets_one_thread_at_the_next_answer(monkeypatch):
    """A recurrent head or a torch draft model beside llama.cpp loads torch after the model opened: its
    spinning threads would take llama.cpp's cores, so the next answer gives torch one thread."""
    import torch
    from engine_fixtures import NumpyModel

    backend = NumpyModel(16)
    backend.kind = "llama.cpp"
    with monkeypatch.context() as hidden:
        hidden.setitem(sys.modules, "torch", None)
        engine = Engine(backend=backend)
    before = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        list(engine.generate(GenerationRequest(prompt_ids=[1, 2, 3], max_new_tokens=2)))
        assert torch.get_num_threads() == 1
    finally:
        torch.set_num_threads(before)
