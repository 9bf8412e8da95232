"""What runs the target model: the one place that turns (model, backend, device, precision) into
an opened backend. GGUF files open on llama.cpp, which computes with the file's own quantised
weights, on the CPU and on a card llama.cpp has a backend for (its layers there: gpu_offload.py);
Hugging Face folders, hub ids, and cards only torch drives open on torch.

A backend's modules are imported in the function that opens it, not here: every backend module,
and every child process (the self-test and the GGUF check run as ``python -m``, the isolated
llama.cpp is spawned), imports this package first. torch is optional: what opens on torch asks
optional_torch first, which says in words what needs it where it is not installed."""

from __future__ import annotations

import platform
import shutil
import sys
from types import SimpleNamespace
from typing import NamedTuple

from draftscope.engine.backends.base import Backend, Verified
from draftscope.engine.backends.llama import llama_verdict
from draftscope.engine.backends.llama.rpc import WorkerError, rpc_supported
from draftscope.engine.load_spec import LoadSpec
from draftscope.engine.stages import LOADING_WEIGHTS, Stage
from draftscope.models.resolve import load_tokenizer
from draftscope.optional_torch import has_nvidia_card, require_torch, torch_available
from draftscope.rules import BACKENDS

__all__ = [
    "BACKENDS",
    "Backend",
    "BackendChoice",
    "Verified",
    "answers_held",
    "backend_for_gguf",
    "choose_backend",
    "llama_cpp_available",
    "open_backend",
    "torch_backend_for",
]


def llama_cpp_available() -> bool:
    try:
        import llama_cpp  # noqa: F401
    except Exception:  # not installed, or its shared library failed to load
        return False
    return True


class BackendChoice(NamedTuple):
    kind: str  # "llama.cpp" or "torch"
    why: str  # in words, for the model's description
    notice: str | None = None  # what the user should be told (kernels turned off, llama.cpp left for torch)
    repacked: bool = True  # llama.cpp may repack the weights for this CPU's fastest kernels
    on_card: bool = False  # llama.cpp puts layers on a graphics card (gpu_offload.py)


def choose_backend(
    source,
    requested: str = "auto",
    device: str | None = None,
    *,
    check: bool = True,
    progress=None,
    threads: int | None = None,
) -> BackendChoice:
    """Which backend a resolved ModelSource opens on, and why. Refused with the reason in words when
    the request cannot be met (llama.cpp needs a GGUF file, the llama-cpp-python package, and a
    llama.cpp that runs on this CPU: see llama_verdict, whose self-test runs with ``threads``;
    ``check`` off uses only a kept verdict)."""
    if requested not in BACKENDS:
        raise ValueError(f"unknown backend {requested!r}: choose one of {', '.join(BACKENDS)}")
    gguf = source.kind == "gguf"
    if requested == "llama.cpp":
        if not gguf:
            raise ValueError(
                f"{source.display_name} is not a GGUF file: llama.cpp runs GGUF models; use the torch backend"
            )
        if not llama_cpp_available():
            raise ValueError("the llama.cpp backend needs llama-cpp-python (scripts/setup.sh installs it)")
        card = _card_for(device)
        if device == "cuda" and card is None:
            raise ValueError(f"llama.cpp here has no CUDA backend, so it cannot run on cuda: {NO_CUDA_FIX}")
        found = llama_verdict.verdict(check=check, progress=progress, threads=threads)
        if found is not None and not found.runs:
            raise ValueError(
                f"llama.cpp does not run on this CPU: {found.cause}. Choose the torch backend, or {llama_verdict.FIX}"
            )
        return _on_llama("as asked (Settings ▸ Model, or --backend)", found, card is not None)
    if requested == "torch":
        return BackendChoice("torch", "as asked (Settings ▸ Model, or --backend)")
    if not gguf:
        return BackendChoice("torch", "a Hugging Face model runs on torch")
    return _choose_for_gguf(device, check, progress, threads)


NO_CUDA_FIX = "bash scripts/build_llama_cuda.sh builds it for this card (then set LLAMA_CPP_LIB_PATH), or choose torch"


def _card_for(device: str | None):
    """The card llama.cpp would put layers on for ``device`` (None: none, or the CPU was asked for)."""
    if device not in (None, "auto", "cuda") or not llama_cpp_available():
        return None
    from draftscope.engine.backends.llama.gpu_offload import cards

    found = cards()
    return found[0] if found else None


def _choose_for_gguf(device, check, progress, threads) -> BackendChoice:
    """auto for a GGUF: llama.cpp on a card it has a backend for, on torch for a card only torch
    drives (de-quantised), and on llama.cpp on the CPU."""
    card = _card_for(device)
    if card is None and device in (None, "auto"):
        device = _torch_device()  # a GPU llama.cpp has no backend for: torch runs it
    if card is None and device != "cpu":
        lacking = f" (llama.cpp here has no CUDA backend: {NO_CUDA_FIX})" if device == "cuda" else ""
        return BackendChoice("torch", f"the {device} device runs on torch{lacking}")
    if not llama_cpp_available():
        return BackendChoice("torch", "llama-cpp-python is not installed: the GGUF is de-quantised for torch")
    found = llama_verdict.verdict(check=check, progress=progress, threads=threads)
    if found is not None and not found.runs:
        return BackendChoice("torch", f"llama.cpp does not run on this CPU ({found.cause})", found.notice)
    if card is not None:
        why = f"a GGUF file with the {card.description} at hand: llama.cpp runs its quantised weights on the card"
        return _on_llama(why, found, True)
    return _on_llama("a GGUF file on the CPU: llama.cpp computes with its quantised weights directly", found)


def _torch_device() -> str:
    """The device torch would run a model on: asked of torch only where it is installed and a card it
    drives could be there (an NVIDIA or AMD driver, an Apple GPU), so a GGUF opened on a CPU loads no
    torch (seconds, where it is installed at all)."""
    apple = sys.platform == "darwin" and platform.machine() == "arm64"
    if not torch_available() or not (has_nvidia_card() or shutil.which("rocm-smi") or apple):
        return "cpu"
    from draftscope.engine.backends.pytorch.precision import pick_device

    return pick_device().type


def _on_llama(why: str, found, on_card: bool = False) -> BackendChoice:
    """llama.cpp, as the verdict allows (None: no verdict yet, nothing turned off)."""
    if found is None:
        return BackendChoice("llama.cpp", why, on_card=on_card)
    return BackendChoice("llama.cpp", why, found.notice, found.repacked, on_card)


def backend_for_gguf(requested: str = "auto", device: str | None = None) -> str:
    """Which backend a GGUF model (every catalogue model) would open on: for memory estimates."""
    try:
        return choose_backend(
            SimpleNamespace(kind="gguf", display_name="the model"), requested, device, check=False
        ).kind
    except ValueError:
        return "torch"


def open_backend(spec, *, progress=None, **options) -> Backend:
    """Open ``spec`` (a LoadSpec, or a model name or source with LoadSpec's fields as ``options``)
    on the backend chosen for it. Its ``slots`` answers are held at once (in shared forwards); its
    ``workers`` (llama.cpp RPC, host:port) take a share of the layers, the model then running in a
    child process."""
    spec = LoadSpec.of(spec, **options)
    source = spec.source
    kind, why, notice, repacked, on_card = choose_backend(
        source, spec.backend, spec.device, progress=progress, threads=spec.threads
    )
    if spec.workers and kind != "llama.cpp":
        raise ValueError(
            f"workers share a model's layers on llama.cpp, and {source.display_name} opens on {kind} "
            f"({why}): use a GGUF model on the llama.cpp backend, or no workers"
        )
    if kind != "llama.cpp":
        require_torch(_needs_torch(spec, why))  # in words, before anything of torch is imported or loaded
    if progress is not None:
        progress(Stage(LOADING_WEIGHTS))
    if kind == "llama.cpp":
        opened = _open_on_llama(spec, repacked, on_card)
    else:
        opened = _open_on_torch(spec, progress)
        if source.kind == "gguf":
            opened.precision_reason += f"; torch backend: {why}"
    opened.source = source
    # the window, the terminal and the server say it, once per load
    opened.notice = " ".join(filter(None, (notice, getattr(opened, "offload_notice", None)))) or None
    return opened


def _needs_torch(spec: LoadSpec, why: str) -> str:
    """What needs torch, in words (optional_torch.TorchMissing's first words), for a model that opens on it."""
    if spec.backend == "torch":
        return "The torch backend (Settings ▸ Model ▸ Backend)"
    if spec.source.kind != "gguf":
        return f"A Hugging Face model folder ({spec.source.display_name})"
    return f"Running a GGUF without llama.cpp ({why})"


def _open_on_llama(spec, repacked, on_card: bool = False) -> Backend:
    """The GGUF in a llama.cpp context (in a child process when RPC workers share its layers)."""
    from draftscope.engine.backends.llama import gguf_check
    from draftscope.engine.backends.llama.llamacpp import DEFAULT_CONTEXT, LlamaCppBackend

    source = spec.source
    # a file llama.cpp would crash on is refused here, in words; loaded as the model will be
    gguf_check.check(source.gguf_path, repacked=repacked)
    common = dict(
        name=source.display_name,
        context=spec.context or DEFAULT_CONTEXT,
        threads=spec.threads,
        slots=spec.slots,
        repacked=repacked,
    )
    if not spec.workers:
        if on_card and spec.gpu_layers != 0:
            from draftscope.engine.backends.llama.gpu_offload import open_on_card

            return open_on_card(source.gguf_path, load_tokenizer(source), spec.gpu_layers, **common)
        opened = LlamaCppBackend(source.gguf_path, load_tokenizer(source), **common)
        if spec.gpu_layers > 0 and spec.device in (None, "auto", "cuda"):  # a count asked for, and no card
            opened.offload_notice = (
                f"GPU layers is set to {spec.gpu_layers}, but llama.cpp found no graphics card it can use here: "
                f"the model runs on the CPU ({NO_CUDA_FIX.split(', or')[0]})."
            )
        return opened
    from draftscope.engine.backends.llama.isolated import IsolatedLlamaBackend

    if not rpc_supported():
        raise WorkerError(
            "this llama.cpp was built without RPC, so the model cannot use workers "
            "(bash scripts/setup.sh builds it with GGML_RPC=ON)"
        )
    return IsolatedLlamaBackend(source.gguf_path, load_tokenizer(source), workers=list(spec.workers), **common)


def _open_on_torch(spec, progress) -> Backend:
    from draftscope.engine.backends.pytorch.loader import load_model

    loaded = load_model(spec.source, device=spec.device, dtype=spec.dtype)
    return torch_backend_for(
        loaded.model,
        loaded.tokenizer,
        name=loaded.name,
        device=loaded.device,
        precision_reason=loaded.dtype_reason,
        progress=progress,
        slots=spec.slots,
        context=spec.context,
    )


def answers_held(kind: str, device, wanted: int) -> int:
    """How many answers a backend of ``kind`` on ``device`` holds at once when asked for ``wanted``.
    On CUDA a shared torch forward runs eagerly (its shape changes with the answers in it) while one
    answer replays captured steps, several times faster: there the window and one served answer take
    turns (1 slot), and slots start from 3 answers."""
    if kind == "torch" and str(device).startswith("cuda") and wanted <= 2:
        return 1
    return wanted


def torch_backend_for(
    model, tokenizer, *, cache: str = "auto", progress=None, slots: int = 1, attention: str | None = None, **kwargs
) -> Backend:
    """A loaded torch model as a backend. ``cache``: "static" (preallocated; on CUDA each tree
    size's step is captured as a CUDA graph at once, here, at load, telling ``progress(text)``),
    "dynamic", or "auto": static on CUDA, dynamic elsewhere (where a step's launches cost little next
    to its work). ``slots`` > 1: that many answers at once, stepping in shared forwards (eager).
    ``attention``: the static cache's graphed tree attention (sdpa, flex or auto; None: the device's
    default, see StaticTorchBackend)."""
    import torch

    from draftscope.engine.backends.pytorch.torch_backend import TorchBackend

    if cache not in ("auto", "static", "dynamic"):
        raise ValueError(f"unknown cache {cache!r}: choose auto, static or dynamic")
    on_cuda = torch.device(kwargs.get("device") or next(model.parameters()).device).type == "cuda"
    if answers_held("torch", "cuda" if on_cuda else "cpu", slots) > 1:
        from draftscope.engine.backends.pytorch.torch_slots import TorchSlotsBackend

        return TorchSlotsBackend(model, tokenizer, slots=slots, **kwargs)
    device = kwargs.get("device") or next(model.parameters()).device
    wanted = cache
    if cache == "auto":
        cache = "static" if torch.device(device).type == "cuda" else "dynamic"
    if cache == "static":
        try:  # its cache layers build on transformers' own (5.x)
            from draftscope.engine.backends.pytorch.torch_static import StaticTorchBackend
        except ImportError as exc:
            if wanted == "static":
                raise ValueError(f"the static cache needs a newer transformers: {exc}") from exc
            return TorchBackend(model, tokenizer, **kwargs)  # an older transformers: the dynamic cache
        return StaticTorchBackend(model, tokenizer, progress=progress, attention=attention, **kwargs)
    return TorchBackend(model, tokenizer, **kwargs)
