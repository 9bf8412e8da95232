"""``draftscope history``: the conversations the app keeps, listed, exported (the app's JSON or
Markdown) and imported (the app's JSON or ChatGPT's conversations.json); storage/transfer.py."""

from __future__ import annotations

import argparse
import sys


def add_parser(sub) -> None:
    p = sub.add_parser("history", help="list, export and import the app's conversations")
    verbs = p.add_subparsers(dest="verb", required=True)
    ls = verbs.add_parser("list", help="the conversations, newest first: id, messages, title")
    ls.set_defaults(func=cmd_list)
    out = verbs.add_parser("export", help="write conversations to a file: .md as Markdown, else the app's JSON")
    out.add_argument("path")
    out.add_argument(
        "--id",
        dest="ids",
        type=int,
        action="append",
        default=None,
        metavar="N",
        help="a conversation's id (from `draftscope history list`); repeat for several (default: all)",
    )
    out.set_defaults(func=cmd_export)
    into = verbs.add_parser("import", help="read conversations from the app's JSON or ChatGPT's conversations.json")
    into.add_argument("path")
    into.set_defaults(func=cmd_import)


def cmd_list(args: argparse.Namespace) -> int:
    from draftscope.storage import HistoryStore

    store = HistoryStore()
    for c in store.conversations():
        print(f"{c.id:6d}  {len(store.messages(c.id)):4d} messages  {c.title}")
    return 0


def cmd_export(args: argparse.Namespace) -> int:
    from draftscope.storage import HistoryStore
    from draftscope.storage.transfer import write_export

    store = HistoryStore()
    if args.ids:
        missing = sorted(set(args.ids) - {c.id for c in store.conversations()})
        if missing:
            print(
                f"draftscope: no conversation {', '.join(map(str, missing))} (see `draftscope history list`)",
                file=sys.stderr,
            )
            return 2
    count = write_export(store, args.path, args.ids)
    print(f"Exported {count} conversation{'s' * (count != 1)} to {args.path}", file=sys.stderr)
    return 0


def cmd_import(args: argparse.Namespace) -> int:
    from draftscope.storage import HistoryStore
    from draftscope.storage.transfer import ImportError_, import_file

    try:
        report = import_file(HistoryStore(), args.path)
    except ImportError_ as exc:
        print(f"draftscope: {exc}", file=sys.stderr)
        return 2
    print(report.words(), file=sys.stderr)
    return 0
