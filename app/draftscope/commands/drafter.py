"""``draftscope drafter train`` (a recurrent head for a model) and ``draftscope drafter info``."""

from __future__ import annotations

import argparse
import json
import signal
import sys
import threading

from draftscope.core import argtypes
from draftscope.rules import BACKENDS


def add_parser(sub) -> None:
    drafter = sub.add_parser("drafter", help="the recurrent drafter: train a head for a model, inspect one")
    drafter_sub = drafter.add_subparsers(dest="drafter_command", required=True)
    train = drafter_sub.add_parser("train", help="train a recurrent draft head for a model (distilled from the model)")
    train.add_argument("--model", default="default", help="a catalogue name, a model folder, a .gguf file or a hub id")
    train.add_argument(
        "--data",
        action="append",
        default=None,
        help="training text: chat:FILE, text:PATH, jsonl:PATH, code:DIR or answers:FILE (distilled "
        "answers); repeat for several (default: the ShareGPT corpus)",
    )
    train.add_argument("--out", default=None, help="head file (default: the app's head for this model)")
    train.add_argument(
        "--tokens", type=argtypes.positive_int, default=200_000, help="training positions to see (default 200,000)"
    )
    train.add_argument("--seq-len", type=argtypes.positive_int, default=256)
    train.add_argument("--batch", type=argtypes.positive_int, default=8, help="sequences per step")
    train.add_argument("--length", type=argtypes.positive_int, default=4, help="draft depths trained")
    train.add_argument(
        "--draft-vocab",
        type=argtypes.positive_int,
        default=8192,
        help="the head's vocabulary: the most frequent tokens",
    )
    train.add_argument("--lr", type=float, default=2e-3)
    train.add_argument("--seed", type=int, default=0)
    train.add_argument("--resume", action="store_true", help="continue a cancelled run from its checkpoint")
    train.add_argument("--device", type=argtypes.device, default=None)
    train.add_argument("--dtype", type=argtypes.dtype, default=None)
    train.add_argument(
        "--backend",
        choices=BACKENDS,
        default="auto",
        help="what runs the model while the head learns it: llama.cpp (a GGUF as it is: its hidden "
        "states read by llama.cpp, no torch copy) or torch; auto: as the app opens the model",
    )
    train.set_defaults(func=cmd_train)
    info = drafter_sub.add_parser("info", help="what a head file was trained for and how well")
    info.add_argument("head", nargs="?", default=None, help="head file (default: the app's head for --model)")
    info.add_argument("--model", default="default")
    info.add_argument("--json", action="store_true")
    info.set_defaults(func=cmd_info)


def _eta(seconds: float | None) -> str:
    if seconds is None:
        return "--:--"
    seconds = int(seconds)
    return (
        f"{seconds // 3600}:{seconds % 3600 // 60:02d}:{seconds % 60:02d}"
        if seconds >= 3600
        else f"{seconds // 60:02d}:{seconds % 60:02d}"
    )


def cmd_train(args: argparse.Namespace) -> int:
    from draftscope.drafters.recurrent.files import HeadError, default_head_path, require_torch_for
    from draftscope.drafters.recurrent.heads import training_target
    from draftscope.drafters.recurrent.train_options import TrainError

    try:  # before the corpus is fetched and the model loads: a head is a torch module
        require_torch_for("Training a recurrent head (draftscope drafter train)")
        options = _train_options(args)
        options.validate()
    except (HeadError, TrainError) as exc:
        print(f"draftscope: {exc}", file=sys.stderr)
        return 2
    from draftscope.engine.engine import Engine

    out = args.out or str(default_head_path(args.model))
    print(f"loading {args.model} ...", file=sys.stderr)
    engine = Engine.load(args.model, device=args.device, dtype=args.dtype, backend=args.backend, measure=False)
    try:
        target = training_target(engine)
    except HeadError as exc:
        print(f"draftscope: {exc}", file=sys.stderr)
        return 2
    print(f"{engine.name} on {engine.backend.describe()}", file=sys.stderr)
    return _train_and_report(args, engine, target, options, out)


def _train_options(args: argparse.Namespace):
    """The command's training options; without --data, the ShareGPT chats (fetched once)."""
    from draftscope.drafters.recurrent.train_options import TrainOptions
    from draftscope.models import assets

    data = args.data or [f"chat:{assets.fetch(assets.SHAREGPT_JSON, quiet=True)}"]
    return TrainOptions(
        data=data,
        tokens=args.tokens,
        seq_len=args.seq_len,
        batch=args.batch,
        length=args.length,
        draft_vocab=args.draft_vocab,
        lr=args.lr,
        seed=args.seed,
    )


def _train_and_report(args: argparse.Namespace, engine, target, options, out: str) -> int:
    """Trains the head (Ctrl-C cancels it, keeping what can be resumed), then closes the engine."""
    from draftscope.datastore.progress import CancelToken
    from draftscope.drafters.recurrent.train import TrainCancelled, TrainError, train_head

    cancel = CancelToken()
    previous = None
    if threading.current_thread() is threading.main_thread():
        previous = signal.signal(signal.SIGINT, lambda *_: cancel.cancel())
    try:
        report = train_head(
            target,
            engine.tokenizer,
            options,
            out,
            model_name=engine.name,
            resume=args.resume,
            progress=_show_training,
            cancel=cancel,
            log=lambda s: print(f"\n{s}", file=sys.stderr),
        )
    except TrainCancelled as exc:
        print(f"\n{exc}", file=sys.stderr)
        return 130
    except TrainError as exc:
        print(f"\ndraftscope: {exc}", file=sys.stderr)
        return 2
    finally:
        if previous is not None:
            signal.signal(signal.SIGINT, previous)
        engine.backend.close()
    _print_trained(report)
    return 0


def _show_training(p) -> None:
    if p.phase in ("training", "validating"):
        val = f" · val τ {p.validation['tau_chain']:.2f}" if p.validation else ""
        loss = f" · loss {p.loss:.3f}" if p.loss is not None else ""
        print(
            f"\r{p.phase:10} step {p.step}/{p.steps} · {p.tokens:,} tokens · {p.tokens_per_second:,.0f} tokens/s · "
            f"ETA {_eta(p.eta_seconds)}{loss}{val}   ",
            end="",
            file=sys.stderr,
            flush=True,
        )


def _print_trained(report) -> None:
    v = report.validation
    print(
        f"\nwrote {report.out} ({report.head_parameters / 1e6:.1f}M parameters): {report.tokens:,} tokens in "
        f"{report.seconds / 60:.1f} min ({report.tokens_per_second:,.0f} tokens/s); validation τ {v['tau_chain']:.2f} "
        f"(greedy chain), top-1 by depth {', '.join(f'{x:.2f}' for x in v['top1_by_depth'])}",
        file=sys.stderr,
    )


def cmd_info(args: argparse.Namespace) -> int:
    from draftscope.drafters.recurrent.files import HeadError, default_head_path, read_meta

    path = args.head or str(default_head_path(args.model))
    try:
        meta = read_meta(path)
    except HeadError as exc:
        print(f"draftscope: {exc}", file=sys.stderr)
        return 2
    if args.json:
        print(json.dumps(meta, indent=2))
        return 0
    cfg, target, training = meta["config"], meta.get("target", {}), meta.get("training", {})
    print(
        f"{path}: recurrent head for {target.get('name') or target.get('architecture')} "
        f"(hidden {cfg['hidden']}, draft vocabulary {cfg['draft_vocab']:,} of {cfg['target_vocab']:,}, "
        f"{cfg['layers']} MLP blocks)"
    )
    if training:
        v = training.get("validation") or {}
        print(
            f"trained on {', '.join(training.get('data', []))}: {training.get('tokens', 0):,} tokens in "
            f"{training.get('seconds', 0) / 60:.1f} min on {training.get('device')} ({training.get('dtype')})"
        )
        if v:
            print(f"validation: τ {v.get('tau_chain')} (greedy chain), top-1 by depth {v.get('top1_by_depth')}")
    return 0
