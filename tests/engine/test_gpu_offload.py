"""GGUF models on a graphics card through llama.cpp (issue 53), tested on the CPU: the memory estimate
against a written GGUF's own tensor sizes, the routing with and without a card llama.cpp can use, and
a load that runs out of the card's memory answered with fewer layers. The card is a stand-in (this
llama.cpp has only its CPU backend, which takes n_gpu_layers and keeps every layer), so what these
tests hold is the logic; the figures on a real card are issue 53's device measurements."""

from __future__ import annotations

import pytest
from llama_helpers import need_llama_cpp

llama_cpp = need_llama_cpp()

from engine_fixtures import tiny_llama
from gguf_fixtures import write_tiny_gguf

from draftscope.engine import backends
from draftscope.engine.backends import choose_backend, open_backend
from draftscope.engine.backends.llama import gpu_offload
from draftscope.engine.backends.llama.gguf_memory import CARD_RESERVE, GgufMemory, _group
from draftscope.engine.backends.llama.gpu_offload import Card, load_with_fewer_layers
from draftscope.engine.backends.llama.llama_lib import LlamaCppError
from draftscope.engine.engine import Engine, GenerationRequest
from draftscope.engine.sampling import SamplingParams
from draftscope.models.resolve import resolve_model
from draftscope.rules import GPU_LAYERS_ALL, GPU_LAYERS_AUTO

LAYERS = 4
CARD = Card("CUDA0", "NVIDIA GeForce RTX 4070", free=11 << 30, total=12 << 30)


@pytest.fixture(scope="module")
def gguf(tokenizer, tokenizer_dir, tmp_path_factory):
    model = tiny_llama(len(tokenizer), seed=5, sharpen=16.0, layers=LAYERS)
    return write_tiny_gguf(tmp_path_factory.mktemp("offload") / "tiny-F32.gguf", model, tokenizer_dir)


@pytest.fixture
def a_card(monkeypatch):
    """llama.cpp's device list with one graphics card in it."""
    found = [CARD]
    monkeypatch.setattr(gpu_offload, "cards", lambda: list(found))
    return found


@pytest.fixture
def no_card(monkeypatch):
    monkeypatch.setattr(gpu_offload, "cards", lambda: [])


def table(gguf):
    from gguf import GGUFReader

    reader = GGUFReader(str(gguf))
    sizes = {t.name: int(t.n_bytes) for t in reader.tensors}
    number = {
        k: int(f.parts[-1][0]) for k, f in reader.fields.items() if k.startswith("llama.") and len(f.parts[-1]) == 1
    }
    return sizes, number


# ---------------------------------------------------------------- the estimate


def test_the_card_estimate_is_the_gguf_s_own_tensor_sizes(gguf):
    """The last k layers' tensors as stored; all of them puts the output head and its norm there too;
    each layer there brings its f16 KV cache."""
    sizes, number = table(gguf)
    layer = [sum(n for name, n in sizes.items() if name.startswith(f"blk.{i}.")) for i in range(LAYERS)]
    head = sizes["output.weight"] + sizes["output_norm.weight"]
    memory = GgufMemory.read(gguf)
    assert memory.layers == tuple(layer) and min(layer) > 0
    assert memory.count == number["llama.block_count"] == LAYERS
    assert [memory.weights_on_card(k) for k in range(LAYERS + 1)] == [sum(layer[LAYERS - k :]) for k in range(5)]
    assert memory.weights_on_card(LAYERS + 1) == sum(layer) + head
    assert memory.weights_on_card(GPU_LAYERS_ALL) == memory.weights_on_card(-1) == sum(layer) + head
    head_dim = number["llama.embedding_length"] // number["llama.attention.head_count"]
    assert memory.kv_per_position == number["llama.attention.head_count_kv"] * 2 * head_dim * 2
    kv = 100 * memory.kv_per_position
    compute = memory.compute_buffer(2, 100, 8)
    assert memory.on_card(2, positions=100, batch=8) == layer[2] + layer[3] + 2 * kv + compute + CARD_RESERVE
    assert memory.on_card(0, positions=100, batch=8) == 0


def test_auto_takes_the_most_layers_whose_estimate_fits_the_free_memory(gguf):
    memory = GgufMemory.read(gguf)
    need = [memory.on_card(k, 300, 64) for k in range(LAYERS + 2)]
    assert need == sorted(need) and len(set(need)) == len(need)  # each layer more costs more
    for k in range(1, LAYERS + 2):
        assert memory.layers_that_fit(need[k], 300, 64) == k
        assert memory.layers_that_fit(need[k] - 1, 300, 64) == k - 1
    assert memory.layers_that_fit(1 << 40, 300, 64) == LAYERS + 1  # all, the head included
    assert memory.layers_that_fit(CARD_RESERVE, 300, 64) == 0


def test_tied_embeddings_are_copied_to_where_the_head_runs():
    """A model without output.weight (SmolLM2, Qwen2.5's small ones) uses its token embeddings as the
    head: llama.cpp copies them to the card with the last layer."""
    layers, inputs, output, outside = _group(
        {"token_embd.weight": 1000, "output_norm.weight": 8, "blk.0.attn_q.weight": 50, "rope_freqs.weight": 4}, 1
    )
    assert (layers, inputs, output, outside) == ([50], 1000, 1008, 1012)


# ---------------------------------------------------------------- the routing


def test_a_gguf_opens_on_llama_cpp_with_its_layers_on_a_card_llama_cpp_can_use(gguf, a_card):
    source = resolve_model(str(gguf))
    choice = choose_backend(source, "auto", None, check=False)
    assert (choice.kind, choice.on_card) == ("llama.cpp", True)
    assert CARD.description in choice.why
    assert choose_backend(source, "auto", "cuda", check=False).on_card
    assert choose_backend(source, "llama.cpp", None, check=False).on_card
    on_cpu = choose_backend(source, "auto", "cpu", check=False)
    assert (on_cpu.kind, on_cpu.on_card) == ("llama.cpp", False)  # the CPU, as asked
    assert choose_backend(source, "torch", None, check=False).kind == "torch"  # torch one choice away


def test_a_card_only_torch_drives_opens_the_gguf_on_torch_and_says_which_build_is_missing(gguf, no_card, monkeypatch):
    import torch

    from draftscope.engine.backends.pytorch import precision

    monkeypatch.setattr(precision, "pick_device", lambda *a, **k: torch.device("cuda"))
    monkeypatch.setattr(backends, "has_nvidia_card", lambda: True)  # the card's driver is there
    source = resolve_model(str(gguf))
    choice = choose_backend(source, "auto", None, check=False)
    assert choice.kind == "torch" and "build_llama_cuda.sh" in choice.why
    with pytest.raises(ValueError, match="llama.cpp here has no CUDA backend"):
        choose_backend(source, "llama.cpp", "cuda", check=False)


def test_without_a_card_a_gguf_stays_on_llama_cpp_on_the_cpu(gguf, no_card, monkeypatch):
    """And torch is not asked for a device there (importing it would cost seconds, where it is installed at all)."""
    from draftscope.engine.backends.pytorch import precision

    monkeypatch.setattr(backends, "has_nvidia_card", lambda: False)
    monkeypatch.setattr(backends.sys, "platform", "linux")
    monkeypatch.setattr(backends.shutil, "which", lambda name: None)

    def asked(*args, **kwargs):
        raise AssertionError("torch was asked which device it would run on")

    monkeypatch.setattr(precision, "pick_device", asked)
    choice = choose_backend(resolve_model(str(gguf)), "auto", None, check=False)
    assert (choice.kind, choice.on_card) == ("llama.cpp", False)


def test_layers_asked_for_without_a_card_are_said_to_run_on_the_cpu(gguf, no_card):
    """--gpu-layers all on a computer whose llama.cpp sees no card: the model runs, and the user is told."""
    asked = open_backend(str(gguf), gpu_layers=GPU_LAYERS_ALL)
    quiet = open_backend(str(gguf), gpu_layers=GPU_LAYERS_AUTO)  # auto asks for nothing in particular
    try:
        assert asked.offload is None
        assert "found no graphics card" in asked.notice and "build_llama_cuda.sh" in asked.notice
        assert quiet.notice is None
    finally:
        asked.close()
        quiet.close()


# ---------------------------------------------------------------- loading


def answer(backend, params, tokens=24):
    engine = Engine(backend=backend)
    ids = engine.encode_chat([{"role": "user", "content": "Tell me about the sea."}])
    request = GenerationRequest(prompt_ids=ids, max_new_tokens=tokens, sampling=params, drafters=[], budget=None)
    return [t for event in engine.generate(request) for t in getattr(event, "token_ids", [])]


def test_auto_puts_every_layer_on_a_card_with_room_and_the_answer_is_the_same(gguf, a_card):
    on_cpu = open_backend(str(gguf), device="cpu")
    on_card = open_backend(str(gguf), gpu_layers=GPU_LAYERS_AUTO)
    try:
        assert on_cpu.offload is None
        assert (on_card.offload.layers, on_card.offload.of) == (LAYERS + 1, LAYERS)
        assert "CUDA0 5/5 layers" in on_card.brief() and on_card.device == "cuda"
        assert "all of its layers on the NVIDIA GeForce RTX 4070" in on_card.describe()
        assert on_card.notice is None
        for params in (SamplingParams(), SamplingParams(temperature=0.8, top_p=0.95, seed=11)):
            assert answer(on_card, params) == answer(on_cpu, params)
    finally:
        on_cpu.close()
        on_card.close()


def test_auto_on_a_small_card_takes_as_many_layers_as_fit(gguf, a_card):
    from draftscope.engine.backends.llama.llama_batching import batch_sizes
    from draftscope.engine.backends.work import PREFILL_BATCH

    memory = GgufMemory.read(gguf)
    positions = batch_sizes(1, min(128, memory.trained_context)).cells  # the context the load opens
    a_card[0] = Card("CUDA0", "a small card", free=memory.on_card(2, positions, PREFILL_BATCH), total=4 << 30)
    small = open_backend(str(gguf), gpu_layers=GPU_LAYERS_AUTO, context=128)
    try:
        assert small.offload.layers == 2
        assert "as many as fit" in small.describe() and "CUDA0 2/5 layers" in small.brief()
    finally:
        small.close()


def test_a_count_set_is_the_count_loaded(gguf, a_card):
    backend = open_backend(str(gguf), gpu_layers=3)
    try:
        assert backend.offload.layers == 3 and "as set" in backend.offload.why
    finally:
        backend.close()
    on_cpu = open_backend(str(gguf), gpu_layers=0)  # none: the CPU only, whatever the card
    try:
        assert on_cpu.offload is None
    finally:
        on_cpu.close()


def out_of_memory_above(monkeypatch, layers: int) -> list[int]:
    """llama.cpp's model load standing in for a card that holds ``layers`` layers: more, and it fails
    as llama.cpp does (a NULL model, its reason in the log). Returns the counts tried."""
    real = llama_cpp.llama_model_load_from_file
    tried = []

    def load(path, params):
        tried.append(params.n_gpu_layers)
        if params.n_gpu_layers > layers:
            return None
        return real(path, params)

    monkeypatch.setattr(llama_cpp, "llama_model_load_from_file", load)
    return tried


def test_a_load_that_runs_out_of_card_memory_is_tried_with_fewer_layers_and_says_so(gguf, a_card, monkeypatch):
    tried = out_of_memory_above(monkeypatch, 1)
    backend = open_backend(str(gguf), gpu_layers=GPU_LAYERS_ALL)
    try:
        assert tried == [LAYERS + 1, 2, 1]
        assert backend.offload.layers == 1
        assert "did not fit the card with 5 layers" in backend.notice
        assert "it runs with 1 layers on the card" in backend.notice
        assert answer(backend, SamplingParams(), tokens=8)  # it answers
    finally:
        backend.close()


def test_a_model_that_fails_to_load_even_on_the_cpu_is_an_error_in_words(gguf, a_card, monkeypatch):
    out_of_memory_above(monkeypatch, -1)
    with pytest.raises(LlamaCppError, match="could not load tiny-F32.gguf"):
        open_backend(str(gguf), gpu_layers=GPU_LAYERS_AUTO)


def test_fewer_layers_halves_down_to_none():
    tried = []

    def load(n):
        tried.append(n)
        if n > 3:
            raise MemoryError(f"{n} layers: out of memory")
        return f"model with {n}"

    assert load_with_fewer_layers(load, 29, MemoryError)[:2] == ("model with 3", 3)
    assert tried == [29, 14, 7, 3]
    assert load_with_fewer_layers(load, 2, MemoryError) == ("model with 2", 2, None)


# ---------------------------------------------------------------- the setting


def test_the_setting_and_the_option_take_auto_all_or_a_count(tmp_path):
    import argparse

    from draftscope.core import argtypes
    from draftscope.storage import Settings

    assert [argtypes.gpu_layers(t) for t in ("auto", "all", "0", "28")] == [GPU_LAYERS_AUTO, GPU_LAYERS_ALL, 0, 28]
    for bad in ("-3", "lots", "1000", ""):
        with pytest.raises(argparse.ArgumentTypeError, match="auto .*all, or a count of layers"):
            argtypes.gpu_layers(bad)
    assert Settings().gpu_layers == GPU_LAYERS_AUTO
    assert any("gpu_layers must be" in p for p in Settings(gpu_layers=-2).problems())
