"""``draftscope chat`` (terminal chat, streaming, tau and tokens/s after each answer) and
``draftscope generate`` (one prompt)."""

from __future__ import annotations

import argparse
import signal
import sys
import threading
from pathlib import Path

from draftscope.commands import argtypes


def _common(p: argparse.ArgumentParser) -> None:
    p.add_argument("--model", default="default", help="a catalogue name (draftscope models list; default: SmolLM2-135M), "
                   "a model folder, a .gguf file or a hub id")
    p.add_argument("--datastore", default=None, help="index for retrieval drafts (default: the default chat datastore if built)")
    p.add_argument("--drafters", default="auto", help="comma list of retrieval, context, model; 'auto' = all whose inputs exist; 'none' = plain decoding")
    p.add_argument("--draft-model", default=None, help="small model with the same tokenizer for the model drafter "
                   "(a catalogue name, folder or .gguf)")
    p.add_argument("--head", default=None, help="recurrent head for the recurrent drafter (default: the app's head "
                   "for --model, when one was trained: draftscope drafter train)")
    p.add_argument("--budget", type=argtypes.count, default=None, help="draft nodes per step (default: adaptive)")
    p.add_argument("--temperature", type=float, default=0.0, help="0 = greedy")
    p.add_argument("--top-p", type=float, default=1.0)
    p.add_argument("--top-k", type=argtypes.count, default=0)
    p.add_argument("--repetition-penalty", type=float, default=1.0)
    p.add_argument("--seed", type=int, default=None)
    p.add_argument("--max-new-tokens", type=argtypes.positive_int, default=512)
    p.add_argument("--system", default=None, help="system prompt")
    p.add_argument("--device", type=argtypes.device, default=None, help="cuda, mps or cpu (default: the best available)")
    p.add_argument("--dtype", type=argtypes.dtype, default=None, help="float32, bfloat16 or float16 (default: bf16 where the hardware has it "
                   "natively, else float32)")
    p.add_argument("--backend", choices=("auto", "torch", "llama.cpp"), default="auto",
                   help="what runs the model: llama.cpp (GGUF files, computed in their own quantisation) or torch "
                   "(Hugging Face folders, CUDA); auto: llama.cpp for a GGUF on the CPU")
    p.add_argument("--verbose", action="store_true", help="say which precision and why, the datastore and draft model")


def add_parser(sub) -> None:
    chat = sub.add_parser("chat", help="chat in the terminal")
    _common(chat)
    chat.set_defaults(func=cmd_chat)
    gen = sub.add_parser("generate", help="answer one prompt")
    gen.add_argument("prompt")
    _common(gen)
    gen.add_argument("--quiet-stats", action="store_true", help="do not print statistics to stderr")
    gen.set_defaults(func=cmd_generate)


def _learned(model: str, engine):
    """The answers the app learned for this model, if there are any (the terminal reads them, the
    app records them)."""
    from draftscope.datastore.learned import LearnedStore, learned_dir, model_key

    key = model_key(model)
    if not (learned_dir() / f"{key}.tokens").exists():
        return None
    try:
        return LearnedStore(key, engine.vocab)
    except Exception:  # noqa: BLE001 - unreadable: chat without it
        return None


def _recurrent(args, engine):
    """The recurrent head (--head, else the app's head for the model when one exists). A head that
    cannot be used is an error when asked for by --head, a note otherwise."""
    from draftscope.engine.drafters.recurrent import find_recurrent
    from draftscope.recurrent.files import HeadError

    try:
        return find_recurrent(args.model, engine, args.head)
    except HeadError as exc:
        if args.head:
            raise
        print(f"note: recurrent drafter not used: {exc}", file=sys.stderr)
        return None


def _setup(args):
    from draftscope.datastore.default import default_datastore_path
    from draftscope.engine.drafters.factory import setup_drafters
    from draftscope.engine.engine import Engine
    from draftscope.engine.loader import load_draft_model
    from draftscope.engine.sampling import SamplingParams

    sampling = SamplingParams(args.temperature, args.top_k, args.top_p, args.repetition_penalty, args.seed)
    datastore = Path(args.datastore) if args.datastore else default_datastore_path(args.model)
    wants_draft = bool(args.draft_model) and (args.drafters == "auto" or "model" in [n.strip() for n in args.drafters.split(",")])
    print(f"loading {args.model} ...", file=sys.stderr)
    engine = Engine.load(args.model, device=args.device, dtype=args.dtype, backend=args.backend)
    draft_model = load_draft_model(args.draft_model, engine, device=args.device, dtype=args.dtype).model if wants_draft else None
    setup = setup_drafters(args.drafters, datastore=datastore, draft_model=draft_model,
                           eos_token_id=engine.tokenizer.eos_token_id, vocab_size=engine.vocab,
                           learned=_learned(args.model, engine), recurrent=_recurrent(args, engine),
                           tokenizer=engine.tokenizer, notify=lambda text: print(text, file=sys.stderr))
    print(f"{engine.name} on {engine.backend.describe()}; drafters: {', '.join(setup.names) or 'none (plain decoding)'}; "
          f"plain decoding {engine.baseline_tokens_per_second:.1f} tokens/s", file=sys.stderr)
    if args.verbose:
        print(f"precision: {_dtype_name(engine)} ({engine.dtype_reason or 'as loaded'})", file=sys.stderr)
        print(f"datastore: {setup.label}; draft model: {args.draft_model if draft_model is not None else 'none'}",
              file=sys.stderr)
        for note in setup.notes:
            print(f"note: {note}", file=sys.stderr)
    return engine, setup.make, sampling


def _dtype_name(engine) -> str:
    return engine.precision


def _settings_of(args):
    """The command's options as the session's settings (its sampling and limits)."""
    from draftscope.storage import Settings

    return Settings(temperature=args.temperature, top_p=args.top_p, top_k=args.top_k,
                    repetition_penalty=args.repetition_penalty, max_new_tokens=args.max_new_tokens,
                    system_prompt=args.system or "")


def _answer(session, args, out=None):
    """The session's next answer, streamed to ``out``; Ctrl-C stops it (the answer so far stays)."""
    from draftscope.session import sampling_from

    out = out or sys.stdout  # looked up per call: sys.stdout may be replaced after import
    cancel = threading.Event()
    previous = signal.signal(signal.SIGINT, lambda *_: cancel.set())
    try:
        request = session.request(sampling=sampling_from(session.settings, seed=args.seed), budget=args.budget,
                                  cancel=cancel)

        def show(ev):
            out.write("".join(ev.pieces))
            out.flush()

        return session.run(request, show)
    finally:
        signal.signal(signal.SIGINT, previous)


def _stats_line(final) -> str:
    s = final.stats
    speed = f" · {s.speedup_estimate:.2f}x plain" if s.speedup_estimate else ""
    return (f"[{s.tokens} tokens · tau {s.tau:.2f} · {s.tokens_per_second:.1f} tokens/s{speed} · "
            f"first token {s.time_to_first_token_ms:.0f} ms{f' · seed {s.seed}' if s.seed is not None else ''} · "
            f"{final.finish_reason}]")


def cmd_generate(args: argparse.Namespace) -> int:
    from draftscope.session import ChatSession

    engine, drafters, _sampling = _setup(args)
    session = ChatSession(engine, _settings_of(args), drafters)
    session.say(args.prompt)
    final = _answer(session, args)
    print()
    if final.finish_reason == "error":
        print(f"draftscope: {final.error}", file=sys.stderr)
        return 1
    if not args.quiet_stats:
        print(_stats_line(final), file=sys.stderr)
    return 0


def cmd_chat(args: argparse.Namespace) -> int:
    from draftscope.session import ChatSession

    engine, drafters, _sampling = _setup(args)
    session = ChatSession(engine, _settings_of(args), drafters)  # the conversation lives in memory
    print("Type a message; /reset starts over, /exit (or Ctrl-D) quits, Ctrl-C stops an answer.", file=sys.stderr)
    while True:
        try:
            line = input("\nyou> ").strip()
        except EOFError:
            print()
            return 0
        except KeyboardInterrupt:
            print()
            continue
        if not line:
            continue
        if line in ("/exit", "/quit"):
            return 0
        if line == "/reset":
            session.reset()
            print("(conversation cleared)", file=sys.stderr)
            continue
        session.say(line)
        print("assistant> ", end="", flush=True)
        try:
            final = _answer(session, args)
        except ValueError as exc:  # e.g. the conversation outgrew the context window
            session.drop_last()
            print(f"\n[{exc}]", file=sys.stderr)
            continue
        print()
        if final.finish_reason == "error":
            print(f"[error: {final.error}]", file=sys.stderr)
            session.drop_last()
            continue
        print(_stats_line(final), file=sys.stderr)
