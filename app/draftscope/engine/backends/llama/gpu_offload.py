"""A GGUF model's layers on a graphics card through llama.cpp's GPU backends (CUDA where
llama-cpp-python was built with it: scripts/setup.sh does where ``nvcc`` is, and
scripts/build_llama_cuda.sh builds for one card's architecture only).

How many layers: the GPU-layers setting (rules.GPU_LAYERS_*), where "auto" takes as many as the
card's free memory holds by the GGUF's own tensor sizes (gguf_memory.py). A load that still runs out
of memory is tried again with half the layers, down to none, and the user is told what ran.
"""

from __future__ import annotations

import ctypes
from collections.abc import Callable
from dataclasses import dataclass
from typing import TypeVar

from draftscope.engine.backends.llama.gguf_memory import GgufMemory
from draftscope.engine.backends.llama.llama_batching import batch_sizes
from draftscope.engine.backends.llama.llama_lib import LlamaCppError, ggml, lib
from draftscope.engine.backends.llama.llamacpp import LlamaCppBackend
from draftscope.engine.backends.work import PREFILL_BATCH
from draftscope.rules import GPU_LAYERS_AUTO

GPU_TYPES = (1, 2)  # GGML_BACKEND_DEVICE_TYPE_GPU and _IGPU (CPU 0, ACCEL 3 are not cards)
Loaded = TypeVar("Loaded")


@dataclass(frozen=True)
class Card:
    name: str  # llama.cpp's device name, e.g. "CUDA0"
    description: str  # e.g. "NVIDIA H200"
    free: int  # bytes free now
    total: int


def cards() -> list[Card]:
    """The graphics cards llama.cpp's backends found (none when it was built for the CPU only, or
    llama-cpp-python is missing)."""
    try:
        lib()  # registers the backends, and with them their devices
        library = ggml()
    except Exception:  # not installed, or its library does not load: no card
        return []
    found = []
    for i in range(library.ggml_backend_dev_count()):
        device = library.ggml_backend_dev_get(i)
        if library.ggml_backend_dev_type(device) not in GPU_TYPES:
            continue
        free, total = ctypes.c_size_t(), ctypes.c_size_t()
        library.ggml_backend_dev_memory(device, ctypes.byref(free), ctypes.byref(total))
        name = (library.ggml_backend_dev_name(device) or b"GPU").decode(errors="replace")
        description = (library.ggml_backend_dev_description(device) or b"").decode(errors="replace")
        found.append(Card(name, description or name, int(free.value), int(total.value)))
    return found


@dataclass(frozen=True)
class Offload:
    """Where a model's layers went, in words for the status bar and the terminal."""

    card: Card
    layers: int  # llama.cpp's count on the card (``of`` + 1 is all, the output head included)
    of: int  # the model's transformer layers
    bytes_used: int  # what the load took of the card's memory (measured, else the estimate)
    why: str  # how the count was chosen

    @property
    def on_card(self) -> int:
        return min(self.layers, self.of + 1)

    def brief(self) -> str:
        return f"{self.card.name} {self.on_card}/{self.of + 1} layers, {_gb(self.bytes_used)}"

    def words(self) -> str:
        where = "all of its layers" if self.on_card > self.of else f"{self.on_card} of its {self.of + 1} layers"
        return f"{where} on the {self.card.description} ({_gb(self.bytes_used)} of {_gb(self.card.total)}; {self.why})"


def _gb(n: int) -> str:
    return f"{n / 1e9:.1f} GB"


def layers_to_try(wanted: int, sizes, free: int, positions: int, batch: int) -> tuple[int, str]:
    """(llama.cpp's n_gpu_layers, why) for the setting ``wanted`` on a card with ``free`` bytes."""
    if wanted == GPU_LAYERS_AUTO:
        fit = sizes.layers_that_fit(free, positions, batch)
        need = sizes.on_card(sizes.count + 1, positions, batch)
        if fit > sizes.count:
            return fit, f"all fit in the card's free {_gb(free)} (~{_gb(need)} needed)"
        return fit, f"as many as fit in the card's free {_gb(free)} (all would need ~{_gb(need)})"
    if wanted > sizes.count:
        return sizes.count + 1, "all, as set (Settings ▸ Model ▸ GPU layers, or --gpu-layers)"
    return wanted, "as set (Settings ▸ Model ▸ GPU layers, or --gpu-layers)"


def fewer_layers(layers: int) -> int:
    """The next count to try after ``layers`` ran out of memory: half as many, then none."""
    return layers // 2 if layers > 1 else 0


def load_with_fewer_layers(
    load: Callable[[int], Loaded], layers: int, failure: type[Exception] = Exception
) -> tuple[Loaded, int, str | None]:
    """``load(layers)``, and where it fails with ``failure`` (out of memory on the card), the same with
    fewer layers down to none. Returns (what loaded, the layers it holds on the card, a notice saying
    what happened, or None when the first try loaded). With no layer to give back, the error stands."""
    tried, first_error = layers, None
    while True:
        try:
            loaded = load(tried)
        except failure as exc:
            if tried == 0:
                raise first_error or exc from None
            first_error = first_error or exc
            tried = fewer_layers(tried)
            continue
        if first_error is None:
            return loaded, tried, None
        notice = (
            f"The model did not fit the card with {layers} layers ({first_error}); "
            + (f"it runs with {tried} layers on the card, the rest on the CPU." if tried else "it runs on the CPU.")
            + " Settings ▸ Model ▸ GPU layers sets how many."
        )
        return loaded, tried, notice


def open_on_card(path, tokenizer, wanted: int, *, context: int, slots: int, **options):
    """A LlamaCppBackend with ``wanted`` layers (the setting) on the first card llama.cpp found; its
    ``offload`` says where they went, its ``offload_notice`` what ran out of memory on the way."""
    card = cards()[0]
    sizes = GgufMemory.read(path)
    positions = batch_sizes(slots, min(context, sizes.trained_context or context)).cells
    layers, why = layers_to_try(wanted, sizes, card.free, positions, PREFILL_BATCH)

    def load(n: int):
        return LlamaCppBackend(path, tokenizer, gpu_layers=n, context=context, slots=slots, **options)

    backend, used, notice = load_with_fewer_layers(load, layers, LlamaCppError)
    if used == 0:
        backend.offload_notice = notice or f"The card's free memory ({_gb(card.free)}) holds no layer: {why}."
        return backend
    after = next((c for c in cards() if c.name == card.name), card)
    measured = card.free - after.free  # what the load took, as the card counts it
    estimate = sizes.on_card(used, positions, PREFILL_BATCH)
    why = why if notice is None else "fewer, after running out of memory"
    backend.offload = Offload(card, used, sizes.count, measured if measured > 0 else estimate, why)
    backend.device = "cuda" if card.name.upper().startswith("CUDA") else "gpu"
    backend.offload_notice = notice
    return backend
