"""Reading big JSON arrays and JSONL files record by record, in bounded memory.

A JSON array is decoded one element at a time from a sliding buffer (memory ~ the largest
record, not the file). A record cut off at the end (as in PyPI's ShareGPT copy) or a syntax
error is reported to the skip log with its byte offset; a syntax error ends that file, since the
rest of an array cannot be resynchronised reliably. JSONL lines are independent: a bad line is
skipped and reading goes on.
"""

from __future__ import annotations

import codecs
import json
from collections.abc import Iterator
from pathlib import Path

from draftscope.datastore.records import SkipLog

_decoder = json.JSONDecoder()
_CHUNK = 1 << 20
_WS = " \t\r\n"


def first_char(path: Path) -> str:
    """First non-space character of a file ('[' for a JSON array, '{' for JSONL or an object)."""
    with open(path, "rb") as f:
        head = f.read(4096).decode("utf-8", errors="replace").lstrip(_WS + "\ufeff")
    return head[:1]


def iter_json_array(path: Path, skips: SkipLog, progress: list[int] | None = None) -> Iterator[tuple[object, str]]:
    """Yield (element, location) for each element of a top-level JSON array.

    ``progress``, when given, is a one-item list that receives the bytes consumed so far.
    """
    decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
    buf, pos, consumed_bytes, index = "", 0, 0, 0
    eof = False
    with open(path, "rb") as f:

        def more() -> bool:
            nonlocal buf, pos, eof, consumed_bytes
            if eof:
                return False
            raw = f.read(_CHUNK)
            consumed_bytes += len(raw)
            if progress is not None:
                progress[0] = consumed_bytes
            if not raw:
                eof = True
                buf += decoder.decode(b"", final=True)
                return False
            buf = buf[pos:] + decoder.decode(raw)
            pos = 0
            return True

        def skip_ws() -> None:
            nonlocal pos
            while True:
                while pos < len(buf) and buf[pos] in _WS + "\ufeff":
                    pos += 1
                if pos < len(buf) or not more():
                    return

        skip_ws()
        if pos >= len(buf) or buf[pos] != "[":
            skips.skip(str(path), "not a JSON array: expected '[' at the start")
            return
        pos += 1
        while True:
            skip_ws()
            if pos >= len(buf) or buf[pos] == "]":
                return
            while True:
                try:
                    obj, end = _decoder.raw_decode(buf, pos)
                    break
                except json.JSONDecodeError as exc:
                    if more():
                        continue
                    where = f"{path}[record {index}]"
                    # Input that simply stops (a cut-off download) fails at its very end, or inside
                    # a string that never closes; anything else is a real syntax error.
                    if exc.msg.startswith("Unterminated") or exc.pos >= len(buf.rstrip()):
                        skips.skip(where, "incomplete record: the file ends inside it")
                    else:
                        skips.skip(where, f"malformed JSON: {exc.msg}; the rest of the file was skipped")
                    return
            yield obj, f"{path}[record {index}]"
            index += 1
            pos = end
            skip_ws()
            if pos < len(buf) and buf[pos] == ",":
                pos += 1


def iter_jsonl(path: Path, skips: SkipLog, progress: list[int] | None = None) -> Iterator[tuple[object, str]]:
    """Yield (object, location) for each non-empty line that holds valid JSON."""
    done = 0
    with open(path, "rb") as f:
        for lineno, raw in enumerate(f, start=1):
            done += len(raw)
            if progress is not None:
                progress[0] = done
            if not raw.strip():
                continue
            where = f"{path}:{lineno}"
            try:
                line = raw.decode("utf-8")
            except UnicodeDecodeError as exc:
                skips.skip(where, f"undecodable bytes: not UTF-8 at byte {exc.start}")
                continue
            try:
                yield json.loads(line), where
            except json.JSONDecodeError as exc:
                skips.skip(where, f"malformed JSON: {exc.msg} at column {exc.colno}")
