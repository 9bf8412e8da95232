"""``draftscope bench``: the benchmarks that print figures (docs/benchmarks.md)."""

from __future__ import annotations

import argparse


def add_parser(sub) -> None:
    bench = sub.add_parser("bench", help="benchmarks that print figures")
    bench_sub = bench.add_subparsers(dest="bench_command", required=True)
    for add in (
        _add_retriever,
        _add_spec,
        _add_lossless,
        _add_gpu,
        _add_serve,
        _add_turns,
        _add_ttft,
        _add_project,
        _add_memory,
        _add_rpc,
        _add_structured,
    ):
        add(bench_sub)


def _add_bench(bench_sub, name: str, module, help: str, *, described: bool = True) -> None:
    """``bench NAME``: ``module``'s arguments and its run; its docstring as --help's description."""
    shown = dict(description=module.__doc__, formatter_class=argparse.RawDescriptionHelpFormatter) if described else {}
    p = bench_sub.add_parser(name, help=help, **shown)
    module.add_arguments(p)
    p.set_defaults(func=lambda a: module.run(a))


def _add_retriever(bench_sub) -> None:
    from draftscope.bench import retriever

    _add_bench(
        bench_sub, "retriever", retriever, "index build and search figures (docs/benchmarks.md)", described=False
    )


def _add_spec(bench_sub) -> None:
    from draftscope.bench import spec

    _add_bench(
        bench_sub,
        "spec",
        spec,
        "speculative decoding on Spec-Bench questions vs Hugging Face generate",
        described=False,
    )


def _add_lossless(bench_sub) -> None:
    from draftscope.bench import lossless

    _add_bench(bench_sub, "lossless", lossless, "exactness audit: greedy identity and sampling distribution tests")


def _add_gpu(bench_sub) -> None:
    from draftscope.bench import gpu

    _add_bench(
        bench_sub,
        "gpu",
        gpu,
        "step costs on this device (GPU or CPU): verify curve, worst step, plain vs HF generate, the oracle's limit",
    )


def _add_serve(bench_sub) -> None:
    from draftscope.bench import serve_clients

    _add_bench(
        bench_sub,
        "serve",
        serve_clients,
        "concurrent clients against one server: aggregate tokens/s and "
        "latencies, ours (drafting on and off) and llama-server",
    )


def _add_turns(bench_sub) -> None:
    from draftscope.bench import turns

    _add_bench(
        bench_sub,
        "turns",
        turns,
        "a conversation about a document, turn after turn: first token and "
        "decode rate per turn, ours against llama-server",
    )


def _add_ttft(bench_sub) -> None:
    from draftscope.bench import ttft

    _add_bench(
        bench_sub,
        "ttft",
        ttft,
        "the first token after Send, ours against llama-server: a question typed over a document, "
        "a restart, three conversations on one slot",
    )


def _add_project(bench_sub) -> None:
    from draftscope.bench import project

    _add_bench(
        bench_sub,
        "project",
        project,
        "a projection: acceptance traced here (bench spec --trace) "
        "replayed against another device's step costs (bench gpu --json)",
    )


def _add_memory(bench_sub) -> None:
    from draftscope.bench import memory

    _add_bench(bench_sub, "memory", memory, "peak memory of one answer: llama-cpp-python against ours")


def _add_rpc(bench_sub) -> None:
    from draftscope.bench import rpc_split

    _add_bench(
        bench_sub,
        "rpc",
        rpc_split,
        "a model split over local rpc workers against it whole and against llama-server on the same split",
    )


def _add_structured(bench_sub) -> None:
    from draftscope.bench import structured

    _add_bench(
        bench_sub,
        "structured",
        structured,
        "JSON answers held to a schema and required tool calls: writing rate, first token and validity, "
        "ours against llama-server, and the tokens the grammar forced",
    )
