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
    with open(path, "rb") as f:
        text = _SlidingText(f, progress)
        text.skip_ws()
        if not text.at("["):
            skips.skip(str(path), "not a JSON array: expected '[' at the start")
            return
        text.pos += 1
        index = 0
        while True:
            text.skip_ws()
            if text.pos >= len(text.buf) or text.at("]"):
                return
            try:
                obj = text.decode()
            except json.JSONDecodeError as exc:
                skips.skip(f"{path}[record {index}]", _why_undecodable(exc, text.buf))
                return
            yield obj, f"{path}[record {index}]"
            index += 1
            text.skip_ws()
            if text.at(","):
                text.pos += 1


def _why_undecodable(exc: json.JSONDecodeError, buf: str) -> str:
    """Input that simply stops (a cut-off download) fails at its very end, or inside a string that
    never closes; anything else is a real syntax error."""
    if exc.msg.startswith("Unterminated") or exc.pos >= len(buf.rstrip()):
        return "incomplete record: the file ends inside it"
    return f"malformed JSON: {exc.msg}; the rest of the file was skipped"


class _SlidingText:
    """A file's text from ``pos`` on, read a chunk at a time: what was decoded before ``pos`` is
    dropped at the next read."""

    def __init__(self, f, progress: list[int] | None) -> None:
        self.f, self.progress = f, progress
        self.decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
        self.buf, self.pos, self.consumed_bytes, self.eof = "", 0, 0, False

    def more(self) -> bool:
        """Read the next chunk; False at the end of the file."""
        if self.eof:
            return False
        raw = self.f.read(_CHUNK)
        self.consumed_bytes += len(raw)
        if self.progress is not None:
            self.progress[0] = self.consumed_bytes
        if not raw:
            self.eof = True
            self.buf += self.decoder.decode(b"", final=True)
            return False
        self.buf = self.buf[self.pos :] + self.decoder.decode(raw)
        self.pos = 0
        return True

    def skip_ws(self) -> None:
        while True:
            while self.pos < len(self.buf) and self.buf[self.pos] in _WS + "\ufeff":
                self.pos += 1
            if self.pos < len(self.buf) or not self.more():
                return

    def at(self, char: str) -> bool:
        return self.pos < len(self.buf) and self.buf[self.pos] == char

    def decode(self):
        """The JSON value at ``pos`` (reading on while it may be cut by the chunk's end), ``pos``
        moved past it; JSONDecodeError when the file ends first or it is malformed."""
        while True:
            try:
                obj, end = _decoder.raw_decode(self.buf, self.pos)
            except json.JSONDecodeError:
                if self.more():
                    continue
                raise
            self.pos = end
            return obj


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
