"""``draftscope index``: what a datastore index file holds."""

from __future__ import annotations

import argparse
import json


def add_parser(sub) -> None:
    index = sub.add_parser("index", help="inspect datastore index files")
    index_sub = index.add_subparsers(dest="index_command", required=True)
    info = index_sub.add_parser("info", help="print an index's header")
    info.add_argument("path")
    info.add_argument("--verify", action="store_true", help="also check the body checksum")
    info.set_defaults(func=cmd_index_info)


def cmd_index_info(args: argparse.Namespace) -> int:
    from draftscope.retrieval import Reader

    reader = Reader(args.path, in_memory=False)  # the header is enough; --verify reads it all anyway
    if args.verify:
        reader.verify()
    info = reader.info()
    if args.verify:
        info["checksum"] = "ok"
    print(json.dumps(info, indent=2))
    return 0
