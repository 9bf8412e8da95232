"""``draftscope bench gpu``: what the backend's steps cost on this device, in six sections.

1. verify cost curve: one verify of [root] + a chain of 0-64 nodes, and of a 64-node wide tree,
   over caches of each ``--contexts`` length, as ms and as a ratio to the plain (0-node) step;
2. worst step: an answer-like run of 64-node tree steps, every cache length new (as in a
   conversation), committing 3 nodes + the root a step: median, 99th percentile and max;
3. plain decoding vs HF generate: Hugging Face's eager ``generate`` against the engine's plain
   loop (``Engine.generate`` with no drafters), greedy, alternated;
4. peer (llama.cpp only): llama.cpp's own llama-bench and llama-server on the same GGUF and layers,
   beside our plain loop (gpu_peer.py);
5. oracle limit: the engine with an oracle drafter replaying the plain answer (every draft right)
   at fixed depths and with the adaptive budget: the most drafting can buy here;
6. spec-bench: ``draftscope bench spec`` on the Spec-Bench questions (only with ``--model``).

``--backend llama.cpp --model FILE.gguf`` runs a GGUF as the app opens it on llama.cpp, its layers
on the card by ``--gpu-layers`` (gpu_llama.py): every section but HF generate, which needs torch.
With ``--shape`` instead, a GGUF of the shape with random weights is written in the block types of
the real files of that size (gpu_shape_gguf.py), for a machine no model file reaches.

``--shape`` builds a Qwen2.5-shaped model from its published config with random weights (no
download; the GPU machines have no network), sharpened so that greedy answers are not near-ties
and the oracle's drafts are accepted in bf16 too (see ``shape_model``). It has no tokenizer and needs
none: prompts are seeded random token ids, fed to the engine directly. Random weights measure
costs, not acceptance. Every time is the median of ``--reps`` runs after warm-ups, read after
synchronising the device.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import time
from pathlib import Path

import numpy as np

from draftscope.bench import gpu_llama
from draftscope.bench.gpu_decoding import oracle_limit, plain_vs_hf
from draftscope.bench.gpu_llama import BACKENDS
from draftscope.bench.gpu_models import SHAPES, SHARPEN, IdsOnly, shape_model
from draftscope.bench.gpu_peer import find_llama_bench, peer_section
from draftscope.bench.gpu_report import (
    SECTIONS,
    WARMUP,
    Report,
    device_name,
    timed,  # noqa: F401 - docs/gpu-runs/2026-11-26-h200/prof.py imports it here
)
from draftscope.bench.gpu_step_costs import COMMIT, verify_curve, worst_step
from draftscope.core import argtypes
from draftscope.optional_torch import require_torch

PROMPT_LEN = 128  # random-id prompt of a shape model (sections 3-5)
QUESTION = "Explain how a hash table works, with a short example in Python."  # a real model's prompt
# the app's drafting (auto) against HF's plain and prompt-lookup loops, with our plain loop and the oracle's limit
SPEC_METHODS = "hf,hf-pld,plain,auto,oracle"


def _contexts(text: str) -> list[int]:
    values = [argtypes.positive_int(x) for x in text.split(",") if x.strip()]
    if not values:
        raise argparse.ArgumentTypeError("give at least one context length, e.g. 256,2048")
    return values


def _sections(text: str) -> list[str]:
    chosen = [x.strip() for x in text.split(",") if x.strip()]
    unknown = [x for x in chosen if x not in SECTIONS]
    if unknown or not chosen:
        raise argparse.ArgumentTypeError(
            f"unknown section(s) {', '.join(map(repr, unknown)) or '(none given)'} (choose from {', '.join(SECTIONS)})"
        )
    return [k for k in SECTIONS if k in chosen]  # always in the documented order


def add_arguments(p: argparse.ArgumentParser) -> None:
    _add_model_arguments(p)
    _add_measure_arguments(p)
    _add_backend_arguments(p)
    _add_output_arguments(p)


def _add_model_arguments(p: argparse.ArgumentParser) -> None:
    """What runs: the device, a shape or a real model, and its precision."""
    p.add_argument(
        "--device", type=argtypes.device, default=None, help="cuda, mps or cpu (default: the best available)"
    )
    what = p.add_mutually_exclusive_group()
    what.add_argument(
        "--shape",
        choices=tuple(SHAPES),
        default="qwen2.5-1.5b",
        help="a Qwen2.5- or SmolLM2-shaped model with random weights (default: %(default)s); on llama.cpp a "
        "GGUF of it in the real files' block types, written once",
    )
    what.add_argument(
        "--model", default=None, help="a real model instead: catalogue name, folder or .gguf (on --backend)"
    )
    p.add_argument(
        "--dtype",
        type=argtypes.dtype,
        default=None,
        help="default: bf16 on CUDA, fp32 elsewhere for a shape; the app's choice for --model",
    )


def _add_measure_arguments(p: argparse.ArgumentParser) -> None:
    """How much is measured: answer lengths, cache lengths, bandwidth and repetitions."""
    p.add_argument(
        "--tokens",
        type=argtypes.positive_int,
        default=128,
        help="new tokens per answer, and steps of the worst-step run",
    )
    p.add_argument(
        "--contexts",
        type=_contexts,
        default=_contexts("256,2000,8000"),
        help="cache lengths of the verify cost curve (default: %(default)s, off the spans' boundaries)",
    )
    p.add_argument(
        "--bandwidth",
        type=float,
        default=None,
        metavar="GB/S",
        help="the device's memory bandwidth, for the share of it a step uses (default: from a table "
        "of cards by name; none for a CPU)",
    )
    p.add_argument("--reps", type=argtypes.positive_int, default=5, help="timed repetitions of each figure")


def _add_backend_arguments(p: argparse.ArgumentParser) -> None:
    """Which backend runs, and the torch backend's cache, attention and compilation, to compare their costs."""
    _add_llama_arguments(p)
    p.add_argument(
        "--cache",
        choices=("auto", "static", "dynamic"),
        default="auto",
        help="the torch backend's KV cache: static (CUDA graphs on CUDA), dynamic, or auto (static on "
        "CUDA, as the app runs); run both in one session to compare",
    )
    p.add_argument(
        "--attention",
        choices=("auto", "sdpa", "flex"),
        default=None,
        help="the static cache's graphed tree attention: FlexAttention, SDPA (cuDNN in graphs), or auto "
        "(both captured, the faster kept; the default on CUDA)",
    )
    p.add_argument(
        "--compiled",
        choices=("auto", "on", "off"),
        default="auto",
        help="the graphed steps through torch.compile: on, off, or auto (on where CUDA and Triton are, as "
        "the app runs); the capture's progress is printed with its times",
    )


def _add_llama_arguments(p: argparse.ArgumentParser) -> None:
    """llama.cpp instead of torch: a GGUF, its layers on the card, and the peer it is measured against."""
    p.add_argument(
        "--backend",
        choices=BACKENDS,
        default="torch",
        help="torch (default), or llama.cpp: a GGUF --model as the app opens it, or a --shape written as a "
        "GGUF with random weights; its layers on the card by --gpu-layers",
    )
    p.add_argument(
        "--gpu-layers",
        type=argtypes.gpu_layers,
        default="auto",
        metavar="N|auto|all",
        help="llama.cpp's layers on the card (default: auto, as many as fit; 0: none; all)",
    )
    p.add_argument(
        "--llama-bench",
        default=None,
        metavar="PATH",
        help="llama.cpp's llama-bench for the peer section (default: beside LLAMA_CPP_LIB_PATH's libraries, "
        "else beside llama-server); llama-server is the one beside it",
    )


def _add_output_arguments(p: argparse.ArgumentParser) -> None:
    """Where figures go, which sections run, and the spec-bench section's inputs."""
    from draftscope.bench.spec import DEFAULT_QUESTIONS

    p.add_argument("--json", dest="json_out", default=None, help="also write every figure as JSON lines here")
    p.add_argument("--sections", type=_sections, default=list(SECTIONS), help=f"a subset of {','.join(SECTIONS)}")
    p.add_argument(
        "--questions",
        default=os.environ.get("DRAFTSCOPE_SPEC_BENCH", str(DEFAULT_QUESTIONS)),
        help="Spec-Bench question file for the spec-bench section",
    )
    p.add_argument(
        "--spec-methods",
        default=SPEC_METHODS,
        help="bench spec's methods in the spec-bench section (default: %(default)s)",
    )
    p.add_argument(
        "--datastore",
        default=None,
        help="the retrieval index for the spec-bench section (default: the model's default datastore)",
    )


# ----------------------------------------------------------------------------- the model


def open_engine(args, longest: int):
    """(engine, prompt for sections 3-5): the real model as the app loads it (a GGUF on llama.cpp with
    room for ``longest`` cached tokens), or a shape model."""
    if args.backend == "llama.cpp":
        return gpu_llama.open_llama_engine(args, longest, QUESTION, PROMPT_LEN)
    import torch

    from draftscope.engine.backends import torch_backend_for
    from draftscope.engine.backends.pytorch.loader import load_model
    from draftscope.engine.backends.pytorch.precision import pick_device
    from draftscope.engine.engine import Engine
    from draftscope.models.resolve import resolve_model

    if args.model:
        loaded = load_model(resolve_model(args.model), device=args.device, dtype=args.dtype)
        engine = Engine(
            backend=torch_backend_for(
                loaded.model,
                loaded.tokenizer,
                name=loaded.name,
                device=loaded.device,
                cache=args.cache,
                attention=args.attention,
                **_capture_options(args),
            )
        )
        return engine, engine.encode_chat([{"role": "user", "content": QUESTION}])
    device = pick_device(args.device)
    if device.type == "cuda" and not torch.cuda.is_available():
        raise ValueError("--device cuda: torch sees no CUDA device here")
    if args.dtype and args.dtype != "auto":
        dtype = getattr(torch, args.dtype)
    else:
        dtype = torch.bfloat16 if device.type == "cuda" else torch.float32
    engine = Engine(
        backend=torch_backend_for(
            shape_model(args.shape, device, dtype),
            IdsOnly(),
            name=args.shape,
            cache=args.cache,
            attention=args.attention,
            **_capture_options(args),
        )
    )
    prompt = np.random.default_rng(1).integers(0, engine.vocab, PROMPT_LEN).tolist()
    return engine, prompt


def _capture_options(args) -> dict:
    """The static cache's capture as asked (--compiled), its progress printed with the seconds since
    the capture began: what each graph's capture (and compile) costs shows in the printout."""
    started = time.perf_counter()

    def progress(text: str) -> None:
        print(f"  [{time.perf_counter() - started:7.1f} s] {text}", flush=True)

    import torch

    options: dict = {"progress": progress}
    static = args.cache == "static" or (args.cache == "auto" and torch.cuda.is_available())
    if args.compiled != "auto" and static:
        options["compiled"] = args.compiled == "on"
    return options


def header(engine, args, report: Report) -> None:
    import torch
    import transformers

    if args.backend == "llama.cpp":
        gpu_llama.header(engine, args, report, device_name(engine.device))
        _times_line(args, report)
        return
    what = f"model {args.model}" if args.model else f"shape {args.shape}"
    report.figures(
        "header",
        f"draftscope bench gpu: {what} on {device_name(engine.device)}; "
        f"torch {torch.__version__}, transformers {transformers.__version__}, {engine.precision}; "
        f"backend {engine.backend.describe()}; {time.strftime('%Y-%m-%d')}",
        device=device_name(engine.device),
        torch=torch.__version__,
        transformers=transformers.__version__,
        dtype=engine.precision,
        model=args.model,
        shape=None if args.model else args.shape,
        backend=engine.backend.describe(),
        random_weights=not args.model,
        tokens=args.tokens,
        reps=args.reps,
    )
    if not args.model:
        report.line(
            "random weights: these figures measure costs, not acceptance "
            f"(embeddings x{SHARPEN:g}, the head a shuffled copy: greedy answers walk a fixed permutation "
            "of the vocabulary; prompts are seeded random token ids: no tokenizer is needed)"
        )
    _times_line(args, report)


def _times_line(args, report: Report) -> None:
    report.line(
        f"times: median of {args.reps} reps after {WARMUP} warm-ups, the device synchronised before each clock reading"
    )


# ----------------------------------------------------------------------------- section 5


def spec_bench(args, report: Report) -> int:
    """``bench spec`` itself (its questions, methods and table), run after this run's model is gone."""
    import tempfile

    from draftscope.bench import spec

    key = "spec-bench"
    report.heading(key)
    why = (
        "needs --model: random weights accept no real drafts"
        if not args.model
        else None
        if Path(args.questions).is_file()
        else f"no questions at {args.questions} (pass --questions)"
    )
    if why:
        report.figures(key, f"skipped: {why}", skipped=why)
        return 0
    parser = argparse.ArgumentParser()
    spec.add_arguments(parser)
    with tempfile.TemporaryDirectory(prefix="draftscope-bench-gpu-") as scratch:
        summary = Path(scratch) / "spec.json"
        argv = [
            "--model",
            args.model,
            "--questions",
            args.questions,
            "--backend",
            args.backend,
            "--methods",
            args.spec_methods,
            "--max-new-tokens",
            str(args.tokens),
            "--json",
            str(summary),
        ]
        argv += ["--datastore", args.datastore] if args.datastore else []
        argv += ["--device", args.device] if args.device else []
        argv += ["--dtype", args.dtype] if args.dtype else []
        code = spec.run(parser.parse_args(argv))
        overall = json.loads(summary.read_text())["summary"]["overall"]
    for method, v in overall.items():
        report.figures(key, None, method=method, **v)
    return code


# ----------------------------------------------------------------------------- run


def engine_sections(args, report: Report) -> None:
    longest = max(args.contexts) + 1 + args.tokens * (1 + len(COMMIT)) + 65
    # llama.cpp holds what it is opened for: the answers of sections 3-5 too (prompts of <= PROMPT_LEN tokens)
    engine, prompt = open_engine(args, max(longest, PROMPT_LEN + args.tokens + 65))
    if longest > engine.max_context:
        raise ValueError(
            f"--contexts and --tokens reach {longest:,} cached tokens; {engine.name} holds {engine.max_context:,}"
        )
    header(engine, args, report)
    plain = None
    if "verify" in args.sections:
        verify_curve(engine, args, report)
    if "worst" in args.sections:
        worst_step(engine, args, report)
    if "plain" in args.sections:
        plain = plain_vs_hf(engine, prompt, args, report)
    if "peer" in args.sections:
        peer_section(engine, prompt, args, report)
    if "oracle" in args.sections:
        oracle_limit(engine, prompt, plain, args, report)
    engine.backend.close()


def refuse_early(args) -> None:
    """What cannot run, said before a model opens: llama.cpp with torch's options, or a --llama-bench
    that is not there."""
    if args.backend == "llama.cpp":
        problem = gpu_llama.llama_problems(args)
        if problem:
            raise ValueError(problem)
        if "peer" in args.sections:
            find_llama_bench(args.llama_bench)  # a path given that names no file is an error


def run(args: argparse.Namespace) -> int:
    # its clocks wait on the card through torch, on llama.cpp too: said before a model opens
    require_torch("draftscope bench gpu (it times the steps with torch's device clocks)")
    refuse_early(args)
    report = Report(args.json_out)
    try:
        if set(args.sections) - {"spec-bench"}:
            engine_sections(args, report)
        if "spec-bench" in args.sections:
            gc.collect()  # this run's model is gone before bench spec loads its own
            import torch

            if torch.cuda.is_available():
                torch.cuda.empty_cache()
            return spec_bench(args, report)
    finally:
        report.close()
    return 0
