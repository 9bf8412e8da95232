"""``draftscope chat`` (terminal chat, streaming, tau and tokens/s after each answer) and
``draftscope generate`` (one prompt)."""

from __future__ import annotations

import argparse
import signal
import sys
import threading

from draftscope.commands.model_options import add_model_arguments, runtime_from_args


def add_parser(sub) -> None:
    chat = sub.add_parser("chat", help="chat in the terminal")
    add_model_arguments(chat)
    chat.set_defaults(func=cmd_chat)
    gen = sub.add_parser("generate", help="answer one prompt")
    gen.add_argument("prompt")
    add_model_arguments(gen)
    gen.add_argument("--quiet-stats", action="store_true", help="do not print statistics to stderr")
    gen.set_defaults(func=cmd_generate)


def _answer(session, args, out=None):
    """The session's next answer, streamed to ``out``; Ctrl-C stops it (the answer so far stays)."""
    out = out or sys.stdout  # looked up per call: sys.stdout may be replaced after import
    cancel = threading.Event()
    previous = signal.signal(signal.SIGINT, lambda *_: cancel.set())
    def show(ev):
        out.write("".join(ev.pieces))
        out.flush()

    session.events.step.connect(show)  # the terminal is a view of the session's steps
    try:
        return session.run(session.request(budget=args.budget, cancel=cancel))
    finally:
        session.events.step.disconnect(show)
        signal.signal(signal.SIGINT, previous)


def _stats_line(final) -> str:
    from draftscope.core.session import answer_record
    from draftscope.core.words import answer_stats

    stats = answer_record(final, None)[0]
    stats.pop("finish_reason")  # said last, in the engine's word, which scripts read
    return f"[{answer_stats(stats, tau='tau')} · {final.finish_reason}]"


def cmd_generate(args: argparse.Namespace) -> int:
    from draftscope.core.session import ChatSession

    runtime = runtime_from_args(args)
    session = ChatSession(runtime)
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
    from draftscope.core.session import ChatSession

    return _chat_loop(ChatSession(runtime_from_args(args)), args)  # the conversation lives in memory


def _chat_loop(session, args: argparse.Namespace) -> int:
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
