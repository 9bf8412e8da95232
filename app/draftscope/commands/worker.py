"""``draftscope worker``: this computer's CPU served to llama.cpp RPC clients, so a model too large
for one machine can run with a share of its layers here (``--rpc host:port`` on the machine that
answers). The same as llama.cpp's own ``rpc-server`` of this llama.cpp version."""

from __future__ import annotations

import argparse
import sys

from draftscope.core import argtypes

LOOPBACK = {"127.0.0.1", "localhost", "::1"}


def add_parser(sub) -> None:
    p = sub.add_parser("worker", help="serve this computer's CPU to llama.cpp RPC clients (--rpc elsewhere)")
    p.add_argument(
        "--host",
        default="127.0.0.1",
        help="address to listen on (default: this machine only; "
        "RPC is unauthenticated: any other address only on a trusted network)",
    )
    p.add_argument("--port", type=argtypes.port, default=50052)
    p.add_argument("--threads", type=argtypes.positive_int, default=None, help="CPU threads (default: all cores)")
    p.set_defaults(func=cmd_worker)


def cmd_worker(args: argparse.Namespace) -> int:
    from draftscope.engine.backends import llama_cpp_available
    from draftscope.engine.backends.llama.llamacpp import default_threads
    from draftscope.engine.backends.llama.rpc import rpc_supported, serve_worker

    if not llama_cpp_available() or not rpc_supported():
        print(
            "error: this llama.cpp was built without RPC (bash scripts/setup.sh builds llama-cpp-python with "
            "GGML_RPC=ON)",
            file=sys.stderr,
        )
        return 2
    if args.host not in LOOPBACK:
        print(
            f"warning: llama.cpp RPC is unauthenticated: anyone who reaches {args.host}:{args.port} can run "
            "computations here. Keep this worker on a trusted network, never exposed beyond it.",
            file=sys.stderr,
        )
    threads = args.threads or default_threads()
    print(
        f"draftscope worker: serving this CPU ({threads} threads) on {args.host}:{args.port}; Ctrl-C stops",
        file=sys.stderr,
        flush=True,
    )
    serve_worker(args.host, args.port, threads)
    return 0
