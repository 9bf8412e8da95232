"""``draftscope bench gpu --backend llama.cpp``: a GGUF opened as the app opens it (open_backend, its
layers on the card by ``--gpu-layers``), for the sections that run on any backend (the verify cost
curve, the worst step, the plain loop, the oracle) and the peer section (gpu_peer.py). What a step
must read of the memory comes from the GGUF's own tensor sizes (GgufMemory), the layers where they
went, since llama.cpp has no torch module to count. Apart from gpu.py, which runs the sections.
"""

from __future__ import annotations

import functools
import os

from draftscope.bench.gpu_report import Report

BACKENDS = ("torch", "llama.cpp")
# the torch backend's options, which mean nothing to llama.cpp: (argument, its value when not given)
TORCH_ONLY = (("dtype", None), ("cache", "auto"), ("attention", None), ("compiled", "auto"))


def llama_problems(args) -> str | None:
    """Why these arguments cannot run on llama.cpp, in words (None: they can)."""
    given = [f"--{name}" for name, unset in TORCH_ONLY if getattr(args, name, unset) != unset]
    if given:
        return (
            f"{', '.join(given)}: the torch backend's options; llama.cpp computes in the GGUF's own "
            "quantisation with its own cache and kernels"
        )
    return None


def open_llama_engine(args, longest: int, question: str, prompt_len: int):
    """(engine, prompt) with room for ``longest`` cached tokens: --model's GGUF through open_backend, as
    the app opens it, asked ``question`` as a chat turn (as a real model on torch is asked); or the
    --shape's random GGUF (gpu_shape_gguf.py) with ``prompt_len`` random ids, as a torch shape is."""
    from draftscope.engine.backends import open_backend
    from draftscope.engine.engine import Engine
    from draftscope.engine.load_spec import LoadSpec

    if not args.model:
        from draftscope.bench.gpu_shape_gguf import open_shape_engine

        return open_shape_engine(args, longest, prompt_len)
    spec = LoadSpec.of(args.model, backend="llama.cpp", device=args.device, gpu_layers=args.gpu_layers, context=longest)
    engine = Engine(backend=open_backend(spec))
    return engine, engine.encode_chat([{"role": "user", "content": question}])


def library_words() -> tuple[str, dict]:
    """Which llama.cpp runs: llama-cpp-python's version and where its libraries came from."""
    import llama_cpp

    where = os.environ.get("LLAMA_CPP_LIB_PATH")
    words = f"llama-cpp-python {llama_cpp.__version__}" + (
        f" (libraries from LLAMA_CPP_LIB_PATH={where})" if where else " (its own libraries)"
    )
    return words, {"llama_cpp_python": llama_cpp.__version__, "llama_cpp_lib_path": where}


def layers_on_card(backend) -> int:
    """llama.cpp's n_gpu_layers of the opened model: what the peers are given (0 on the CPU)."""
    offload = getattr(backend, "offload", None)
    return offload.layers if offload is not None else 0


@functools.lru_cache(maxsize=8)
def _sizes(path: str):
    from draftscope.engine.backends.llama.gguf_memory import GgufMemory

    return GgufMemory.read(path)


def step_bytes(backend, context: int) -> dict[str, int]:
    """Bytes a llama.cpp step over ``context`` cached positions reads of the memory it computes in:
    with layers on a card, the weights there (the output head too when all are) and their layers' KV
    cache; on the CPU, every layer, the head and the whole KV cache. The token embeddings are looked
    up a row at a time and left out."""
    sizes = _sizes(str(backend.path))
    layers = layers_on_card(backend)
    if layers:
        weights = sizes.weights_on_card(layers)
        kv_layers = min(sizes.clamp(layers), sizes.count)
    else:
        weights = sum(sizes.layers) + sizes.output
        kv_layers = sizes.count
    return {"weights": int(weights), "kv": int(kv_layers * context * sizes.kv_per_position)}


def header(engine, args, report: Report, device: str) -> None:
    """The first lines of a llama.cpp run: the file, the card or CPU, the library, where the layers went."""
    import time

    words, library = library_words()
    backend = engine.backend
    what = f"model {args.model}" if args.model else f"shape {args.shape} ({backend.path.name})"
    report.figures(
        "header",
        f"draftscope bench gpu: {what} on {device}; {words}, {engine.precision}; "
        f"backend {backend.describe()}; {time.strftime('%Y-%m-%d')}",
        device=device,
        dtype=engine.precision,
        model=args.model,
        shape=None if args.model else args.shape,
        gguf=str(backend.path),
        backend=backend.describe(),
        gpu_layers=layers_on_card(backend),
        threads=backend.threads,
        random_weights=not args.model,
        tokens=args.tokens,
        reps=args.reps,
        **library,
    )
    if not args.model:
        report.line(
            "random weights: these figures measure costs, not acceptance (random blocks in the block types of "
            "the real files of this size, the end token never chosen; prompts are seeded random token ids)"
        )
    notice = getattr(backend, "notice", None) or getattr(backend, "offload_notice", None)
    if notice:
        report.line(f"loading said: {notice}")
