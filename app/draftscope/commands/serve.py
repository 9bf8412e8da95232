"""``draftscope serve``: the OpenAI-compatible local server (see draftscope.server)."""

from __future__ import annotations

import argparse
import os
import sys

from draftscope.core import argtypes
from draftscope.server.protocol import MAX_BODY_BYTES


def add_parser(sub) -> None:
    from draftscope.commands.model_options import add_model_arguments

    p = sub.add_parser(
        "serve", help="an OpenAI-compatible server on this machine (/v1/chat/completions, /v1/completions, /v1/models)"
    )
    add_model_arguments(p)
    p.add_argument(
        "--host",
        default="127.0.0.1",
        help="address to listen on (default: this machine only; any other needs an API key)",
    )
    p.add_argument("--port", type=argtypes.port, default=8911, help="port to listen on (default: 8911)")
    p.add_argument(
        "--api-key",
        default=None,
        help="clients must send 'Authorization: Bearer KEY' (default: $DRAFTSCOPE_API_KEY; none on localhost)",
    )
    p.add_argument(
        "--parallel",
        type=argtypes.parallel,
        default=1,
        help="answers decoded at once (default: 1; "
        "llama.cpp: their steps share forwards; each holds a cache of the model's context)",
    )
    p.add_argument(
        "--queue-limit",
        type=argtypes.count,
        default=8,
        help="requests that may wait while --parallel are answered; more get HTTP 429 (default: 8)",
    )
    p.add_argument("--no-history", action="store_true", help="do not keep served answers in the app's history")
    p.add_argument(
        "--max-body-mb",
        type=argtypes.positive_int,
        default=MAX_BODY_BYTES >> 20,
        help="request bodies beyond this many MB are refused (HTTP 413) before they are read (default: "
        f"{MAX_BODY_BYTES >> 20}, room for a 32 MB file sent as base64)",
    )
    p.add_argument(
        "--documents",
        default=None,
        metavar="DIR",
        help="a folder of documents the answers search "
        "(indexed at start, kept up to date): the passages that best answer each request's last message "
        "go into its prompt",
    )
    p.set_defaults(func=cmd_serve)


def cmd_serve(args: argparse.Namespace) -> int:
    from draftscope.server import check_bind, listening_socket

    api_key = args.api_key or os.environ.get("DRAFTSCOPE_API_KEY") or None
    check_bind(args.host, api_key)  # before the model loads: a refusal costs nothing
    sock = listening_socket(args.host, args.port)  # so is a busy port
    try:
        return _serve_on(args, sock, api_key)
    finally:
        sock.close()


def _serve_on(args: argparse.Namespace, sock, api_key: str | None) -> int:
    from draftscope.commands.chat import open_documents
    from draftscope.commands.model_options import runtime_from_args
    from draftscope.server import ServerConfig, create_app, serve
    from draftscope.storage import HistoryStore

    runtime = runtime_from_args(args, slots=args.parallel)
    watcher = open_documents(runtime, args.documents)
    engine = runtime.engine
    history = None if args.no_history else HistoryStore()
    app = create_app(
        runtime,
        history=history,
        config=ServerConfig(
            api_key=api_key,
            queue_limit=args.queue_limit,
            parallel=args.parallel,
            keep_history=not args.no_history,
            budget=args.budget,
            max_body_bytes=args.max_body_mb << 20,
        ),
        on_request=lambda line: print(line, file=sys.stderr, flush=True),
    )
    at_once = f"; {args.parallel} answers at once" if engine.stepper.size > 1 else ""
    print(
        f"serving {engine.name} on http://{args.host}:{args.port}/v1 (OpenAI-compatible{at_once}; Ctrl-C stops)"
        + ("; an API key is required" if api_key else ""),
        file=sys.stderr,
    )
    try:
        serve(app, args.host, args.port, sock)
    finally:
        if watcher is not None:
            watcher.stop()
        runtime.unload()  # the engine closes: every slot's conversation is saved for the next start
    return 0
