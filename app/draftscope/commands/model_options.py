"""The options ``draftscope chat``, ``generate`` and ``serve`` share: which model, how it runs, what
it drafts with and how it samples. They become Settings, and the runtime is built from those as
the app builds it (draftscope.core.runtime)."""

from __future__ import annotations

import argparse
import sys

from draftscope.commands.sampling_options import add_sampling_options, given_sampling
from draftscope.core import argtypes
from draftscope.drafter_kinds import drafter_switches, drafters_help, kind
from draftscope.rules import BACKENDS, NO_SEED, UNTIL_STOP


def add_model_arguments(p: argparse.ArgumentParser) -> None:
    _add_model_choice(p)
    _add_drafting_arguments(p)
    _add_sampling_arguments(p)
    _add_running_arguments(p)


def _add_model_choice(p: argparse.ArgumentParser) -> None:
    """Which model answers, and the datastore its retrieval drafts come from."""
    p.add_argument(
        "--model",
        default="default",
        help="a catalogue name (draftscope models list; default: SmolLM2-135M), "
        "a model folder, a .gguf file or a hub id",
    )
    p.add_argument(
        "--datastore", default=None, help="index for retrieval drafts (default: the default chat datastore if built)"
    )


def _add_drafting_arguments(p: argparse.ArgumentParser) -> None:
    """Which drafters run, their draft model and head, and how many draft tokens a step verifies."""
    p.add_argument(
        "--drafters",
        default="auto",
        help=drafters_help(),
    )
    p.add_argument(
        "--draft-model",
        default=None,
        help="small model with the same tokenizer for the model drafter (a catalogue name, folder or .gguf)",
    )
    p.add_argument(
        "--head",
        default=None,
        help="recurrent head for the recurrent drafter (default: the app's head "
        "for --model, when one was trained: draftscope drafter train)",
    )
    p.add_argument(
        "--budget",
        type=argtypes.count,
        default=None,
        help="draft tokens verified per step, the most the model checks in one forward (default: "
        "adaptive, from the measured cost of a forward and how often drafts are accepted)",
    )


def _add_sampling_arguments(p: argparse.ArgumentParser) -> None:
    """How the answer is sampled, how long it may be, and the system prompt before it. A sampling
    option left out is the model's recommendation where its files carry one (--no-model-sampling:
    never), else the app's default; one given is used as given."""
    add_sampling_options(p)  # one per field of SamplingParams (commands/sampling_options.py)
    p.add_argument(
        "--no-model-sampling",
        action="store_true",
        help="ignore the sampling the model's files recommend (GGUF metadata, generation_config.json)",
    )
    p.add_argument(
        "--seed",
        type=int,
        default=None,
        help="a sampled answer's seed: the same seed, the same answer (default: a new one each answer, shown with it)",
    )
    p.add_argument(
        "--max-new-tokens",
        type=argtypes.count,
        default=UNTIL_STOP,
        help="the answer's length limit in tokens (default: 0, until the model stops, within the context)",
    )
    p.add_argument("--system", default=None, help="system prompt")


def _add_running_arguments(p: argparse.ArgumentParser) -> None:
    """Where and how the model runs (device, precision, backend, workers, threads, context), and what it reports."""
    p.add_argument(
        "--device", type=argtypes.device, default=None, help="cuda, mps or cpu (default: the best available)"
    )
    p.add_argument(
        "--dtype",
        type=argtypes.dtype,
        default=None,
        help="float32, bfloat16 or float16 (default: bf16 where the hardware has it natively, else float32)",
    )
    p.add_argument(
        "--backend",
        choices=BACKENDS,
        default="auto",
        help="what runs the model: llama.cpp (GGUF files, computed in their own quantisation, on the CPU "
        "and on cards its build has a backend for) or torch (Hugging Face folders, any CUDA card); auto: "
        "llama.cpp for a GGUF it can run",
    )
    p.add_argument(
        "--gpu-layers",
        type=argtypes.gpu_layers,
        default="auto",
        metavar="N|auto|all",
        help="a GGUF's layers llama.cpp puts on the graphics card (default: auto, as many as fit in its "
        "free memory; 0: none, the CPU only; all: every layer); needs llama.cpp built with CUDA",
    )
    p.add_argument(
        "--rpc",
        default=None,
        metavar="HOST:PORT,...",
        help="llama.cpp RPC workers that take a share of the model's layers (start one with "
        "`draftscope worker`; RPC is unauthenticated: a trusted network only)",
    )
    p.add_argument(
        "--threads",
        type=argtypes.count,
        default=0,
        help="CPU threads the model computes on (default: 0, automatic: all cores or one left free, "
        "whichever writes faster, timed at load; fewer leave room for other work)",
    )
    p.add_argument(
        "--context",
        type=argtypes.context,
        default=0,
        metavar="TOKENS",
        help="tokens the model reads at once: the conversation, --system and the answer (default: 0, "
        "the model's default; never more than it was trained on); more costs memory",
    )
    p.add_argument(
        "--kv-cache-mb",
        type=argtypes.count,
        default=1024,
        metavar="MB",
        help="room on disk for conversations' caches, kept when a conversation is replaced or the command "
        "ends and restored instead of read again (default: 1024; 0: none kept)",
    )
    p.add_argument("--verbose", action="store_true", help="say which precision and why, the datastore and draft model")


def settings_from_args(args: argparse.Namespace):
    """The command's options as Settings (what the app would have for them)."""
    from draftscope.storage import Settings

    switches, _named = drafter_switches(args.drafters, draft_model=bool(args.draft_model))
    settings = Settings(
        model=args.model,
        datastore=args.datastore or "",
        drafters=switches,
        draft_model=args.draft_model or "",
        **given_sampling(args),
        model_sampling=not args.no_model_sampling,
        max_new_tokens=args.max_new_tokens,
        system_prompt=args.system or "",
        seed=NO_SEED if args.seed is None else args.seed,
        device=args.device or "auto",
        dtype=args.dtype or "auto",
        backend=args.backend,
        workers=args.rpc or "",
        threads=args.threads,
        context_length=args.context,
        gpu_layers=args.gpu_layers,
        kv_cache_budget_mb=args.kv_cache_mb,
    )
    problems = settings.problems()
    if problems:
        raise ValueError("; ".join(problems))
    if args.datastore:
        check_datastore(args.datastore)
    return settings


def check_datastore(path: str) -> None:
    """A datastore named on the command line is an index file that opens, checked before the model
    loads (otherwise it would be found missing only after, and only if retrieval was asked for)."""
    from pathlib import Path

    from draftscope.retrieval import Reader

    where = Path(path).expanduser()
    if where.is_dir():
        raise ValueError(
            f"--datastore {path}: a folder, not a datastore (a datastore is one .idx file; build one with "
            "draftscope datastore build --out FILE.idx)"
        )
    if not where.is_file():
        raise ValueError(f"--datastore {path}: no such file (build one with draftscope datastore build-default)")
    try:
        Reader(str(where), in_memory=False)
    except Exception as exc:  # the reader names what is wrong with the file
        raise ValueError(f"--datastore {path}: not a readable datastore ({exc})") from None


def runtime_from_args(args: argparse.Namespace, *, slots: int = 1):
    """The runtime for the command's options. A drafter named in ``--drafters``, a ``--draft-model``
    or a ``--head`` that cannot be used is an error naming why; what ``auto`` leaves out is a note."""
    from draftscope.core.runtime import load_runtime

    settings = settings_from_args(args)
    _switches, named = drafter_switches(args.drafters, draft_model=bool(args.draft_model))
    from draftscope.engine.stages import new_stages_only

    # each stage once, as it begins: its fractions would be a line each
    runtime = load_runtime(settings, head=args.head, strict=True, log=new_stages_only(_err), slots=slots)
    runtime.events.notice.connect(_err)  # e.g. the datastore changed on disk between answers
    setup = runtime.drafter_setup
    missing = [n for n in named if n not in setup.names]
    if missing:
        why = setup.notes + [kind(n).needs_message() for n in missing if kind(n).off_note() is None]
        raise ValueError(f"drafter(s) {', '.join(missing)} cannot run: " + "; ".join(why))
    from draftscope.core.sampling_defaults import described, effective_sampling

    if runtime.recommended is not None:  # what the command line sets is used as given
        runtime.recommended = runtime.recommended.without(given_sampling(args))
    if model_says := described(effective_sampling(settings, runtime.recommended)):
        _err(f"sampling: {model_says}")
    engine = runtime.engine
    _err(
        f"{engine.name} on {engine.backend.describe()}; drafters: {', '.join(setup.names) or 'none (plain decoding)'}; "
        f"plain decoding {engine.baseline_tokens_per_second:.1f} tokens/s"
    )
    if args.verbose:
        _err(f"precision: {engine.precision} ({engine.dtype_reason or 'as loaded'})")
        _err(
            f"datastore: {setup.label}; draft model: {args.draft_model if runtime.draft_model is not None else 'none'}"
        )
    for note in [*runtime.notices, *setup.notes] if args.verbose else runtime.notices:
        _err(f"note: {note}")
    return runtime


def _err(text: str) -> None:
    print(text, file=sys.stderr)
