"""``draftscope`` command line. With no arguments it opens the desktop app."""

from __future__ import annotations

import argparse
import json
import sys


def _cmd_index_info(args: argparse.Namespace) -> int:
    from draftscope.retrieval import Reader

    reader = Reader(args.path, in_memory=False)  # the header is enough; --verify reads it all anyway
    if args.verify:
        reader.verify()
    info = reader.info()
    if args.verify:
        info["checksum"] = "ok"
    print(json.dumps(info, indent=2))
    return 0


def _cmd_bench_retriever(args: argparse.Namespace) -> int:
    from draftscope.bench.retriever import run

    return run(args)


def _cmd_gui(args: argparse.Namespace | None = None) -> int:
    try:
        from draftscope.gui.app import main as gui_main
    except ImportError as exc:  # PySide6 or its system libraries missing
        print(f"draftscope: the desktop app cannot start ({exc}); `draftscope chat` works in the terminal",
              file=sys.stderr)
        return 2
    screenshot = getattr(args, "screenshot", None)
    if screenshot and getattr(args, "quit_after", None) is None:
        print("draftscope: error: --screenshot needs --quit-after MS (it is taken just before quitting)",
              file=sys.stderr)
        return 2
    return gui_main(model=getattr(args, "model", None), quit_after_ms=getattr(args, "quit_after", None),
                    screenshot=screenshot)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="draftscope", description=__doc__)
    sub = parser.add_subparsers(dest="command")

    index = sub.add_parser("index", help="inspect datastore index files")
    index_sub = index.add_subparsers(dest="index_command", required=True)
    info = index_sub.add_parser("info", help="print an index's header")
    info.add_argument("path")
    info.add_argument("--verify", action="store_true", help="also check the body checksum")
    info.set_defaults(func=_cmd_index_info)

    gui = sub.add_parser("gui", help="open the desktop app (the default with no command)")
    gui.add_argument("--model", help="model for this run (default: the one in the settings)")
    gui.add_argument("--quit-after", type=int, metavar="MS",
                     help="smoke test: quit MS milliseconds after the main window shows; exit 1 if it never does")
    gui.add_argument("--screenshot", metavar="PATH",
                     help="with --quit-after: save the main window as the screen shows it to PATH (PNG) before quitting")
    gui.set_defaults(func=_cmd_gui)

    from draftscope.commands import chat, datastore, drafter, models, serve, worker

    datastore.add_parser(sub)
    chat.add_parser(sub)
    serve.add_parser(sub)
    worker.add_parser(sub)
    models.add_parser(sub)
    drafter.add_parser(sub)

    bench = sub.add_parser("bench", help="benchmarks that print figures")
    bench_sub = bench.add_subparsers(dest="bench_command", required=True)
    from draftscope.bench.retriever import add_arguments

    retr = bench_sub.add_parser("retriever", help="index build and search figures (docs/benchmarks.md)")
    add_arguments(retr)
    retr.set_defaults(func=_cmd_bench_retriever)

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

    from draftscope.bench import serve as serve_bench

    serve_p = bench_sub.add_parser("serve", help="concurrent clients against one server: aggregate tokens/s and "
                                   "latencies, ours (drafting on and off) and llama-server", description=serve_bench.__doc__,
                                   formatter_class=argparse.RawDescriptionHelpFormatter)
    serve_bench.add_arguments(serve_p)
    serve_p.set_defaults(func=lambda a: serve_bench.run(a))
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.command is None:
        return _cmd_gui()
    try:
        if args.command != "models":
            from draftscope.commands.models import fetch_named_models

            fetch_named_models(args)
        return args.func(args)
    except (FileNotFoundError, ValueError, OSError) as exc:
        print(f"draftscope: error: {exc}", file=sys.stderr)
        return 2
    except RuntimeError as exc:  # a failed download (AssetFetchError), a device torch does not know
        print(f"draftscope: error: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("draftscope: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    raise SystemExit(main())
