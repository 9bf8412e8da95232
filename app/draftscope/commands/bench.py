"""``draftscope bench``: the benchmarks that print figures (docs/benchmarks.md)."""

from __future__ import annotations

import argparse


def add_parser(sub) -> None:
    bench = sub.add_parser("bench", help="benchmarks that print figures")
    bench_sub = bench.add_subparsers(dest="bench_command", required=True)
    from draftscope.bench.retriever import add_arguments

    retr = bench_sub.add_parser("retriever", help="index build and search figures (docs/benchmarks.md)")
    add_arguments(retr)
    retr.set_defaults(func=_retriever)

    from draftscope.bench import spec

    spec_p = bench_sub.add_parser("spec", help="speculative decoding on Spec-Bench questions vs Hugging Face generate")
    spec.add_arguments(spec_p)
    spec_p.set_defaults(func=lambda a: spec.run(a))

    from draftscope.bench import lossless

    lossless_p = bench_sub.add_parser("lossless", help="exactness audit: greedy identity and sampling distribution tests",
                                      description=lossless.__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    lossless.add_arguments(lossless_p)
    lossless_p.set_defaults(func=lambda a: lossless.run(a))

    from draftscope.bench import gpu

    gpu_p = bench_sub.add_parser("gpu", help="step costs on this device (GPU or CPU): verify curve, worst step, "
                                 "plain vs HF generate, the oracle's limit", description=gpu.__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    gpu.add_arguments(gpu_p)
    gpu_p.set_defaults(func=lambda a: gpu.run(a))

    from draftscope.bench import concurrent as serve_bench

    serve_p = bench_sub.add_parser("serve", help="concurrent clients against one server: aggregate tokens/s and "
                                   "latencies, ours (drafting on and off) and llama-server", description=serve_bench.__doc__,
                                   formatter_class=argparse.RawDescriptionHelpFormatter)
    serve_bench.add_arguments(serve_p)
    serve_p.set_defaults(func=lambda a: serve_bench.run(a))

    from draftscope.bench import turns

    turns_p = bench_sub.add_parser("turns", help="a conversation about a document, turn after turn: first token and "
                                   "decode rate per turn, ours against llama-server", description=turns.__doc__,
                                   formatter_class=argparse.RawDescriptionHelpFormatter)
    turns.add_arguments(turns_p)
    turns_p.set_defaults(func=lambda a: turns.run(a))

    from draftscope.bench import projection

    project_p = bench_sub.add_parser("project", help="a projection: acceptance traced here (bench spec --trace) "
                                     "replayed against another device's step costs (bench gpu --json)",
                                     description=projection.__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    projection.add_arguments(project_p)
    project_p.set_defaults(func=lambda a: projection.run(a))

    from draftscope.bench import memory

    memory_p = bench_sub.add_parser("memory", help="peak memory of one answer: llama-cpp-python against ours",
                                    description=memory.__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    memory.add_arguments(memory_p)
    memory_p.set_defaults(func=lambda a: memory.run(a))

    from draftscope.bench import split

    rpc_p = bench_sub.add_parser("rpc", help="a model split over local rpc workers against it whole and against "
                                 "llama-server on the same split", description=split.__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    split.add_arguments(rpc_p)
    rpc_p.set_defaults(func=lambda a: split.run(a))


def _retriever(args: argparse.Namespace) -> int:
    from draftscope.bench.retriever import run

    return run(args)
