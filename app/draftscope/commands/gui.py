"""``draftscope gui`` (and ``draftscope`` alone): the desktop app."""

from __future__ import annotations

import argparse
import sys


def add_parser(sub) -> None:
    gui = sub.add_parser("gui", help="open the desktop app (the default with no command)")
    gui.add_argument("--model", help="model for this run (default: the one in the settings)")
    gui.add_argument(
        "--quit-after",
        type=int,
        metavar="MS",
        help="smoke test: quit MS milliseconds after the main window shows; exit 1 if it never does",
    )
    gui.add_argument(
        "--screenshot",
        metavar="PATH",
        help="with --quit-after: save the main window as the screen shows it to PATH (PNG) before quitting",
    )
    gui.set_defaults(func=cmd_gui)


def cmd_gui(args: argparse.Namespace | None = None) -> int:
    try:
        from draftscope.gui.launcher import main as gui_main
    except ImportError as exc:  # PySide6 or its system libraries missing
        print(
            f"draftscope: the desktop app cannot start ({exc}); `draftscope chat` works in the terminal",
            file=sys.stderr,
        )
        return 2
    screenshot = getattr(args, "screenshot", None)
    if screenshot and getattr(args, "quit_after", None) is None:
        print(
            "draftscope: error: --screenshot needs --quit-after MS (it is taken just before quitting)", file=sys.stderr
        )
        return 2
    return gui_main(
        model=getattr(args, "model", None), quit_after_ms=getattr(args, "quit_after", None), screenshot=screenshot
    )
