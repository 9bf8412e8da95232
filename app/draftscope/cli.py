"""``draftscope`` command line. With no arguments it opens the desktop app. Each command group
lives in draftscope/commands/; this module only assembles them and maps errors to exit codes."""

from __future__ import annotations

import argparse
import sys

from draftscope.commands import (
    bench,
    chat,
    chat_history,
    datastore,
    doctor,
    drafter,
    gui,
    index_info,
    models,
    serve,
    worker,
)
from draftscope.optional_torch import TorchMissing

TORCH_MODULES = ("torch", "accelerate")  # what the draftscope[torch] extra installs
GROUPS = (
    index_info,
    gui,
    datastore,
    chat,
    serve,
    worker,
    models,
    drafter,
    bench,
    doctor,
    chat_history,
)  # in `draftscope --help`'s order


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="draftscope",
        description="Draftscope: chat with a local model, answered fast "
        "through speculative decoding. With no command it opens the desktop app.",
    )
    sub = parser.add_subparsers(dest="command")
    for group in GROUPS:
        group.add_parser(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.command is None:
        from draftscope.commands.gui import cmd_gui

        return cmd_gui()
    try:
        if args.command != "models":
            from draftscope.commands.models import fetch_named_models

            fetch_named_models(args)
        return args.func(args)
    except (FileNotFoundError, ValueError, OSError, TorchMissing) as exc:  # TorchMissing: what needs it, how to install
        print(f"draftscope: error: {exc}", file=sys.stderr)
        return 2
    except RuntimeError as exc:  # a failed download (AssetFetchError), a device torch does not know
        print(f"draftscope: error: {exc}", file=sys.stderr)
        return 1
    except ModuleNotFoundError as exc:
        if (exc.name or "").partition(".")[0] not in TORCH_MODULES:
            raise
        # a torch path that did not ask first (optional_torch): the same words, never a traceback
        print(f"draftscope: error: {TorchMissing(f'draftscope {args.command}')}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("draftscope: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    raise SystemExit(main())
