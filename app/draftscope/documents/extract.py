"""A file as text the model can read: plain text and Markdown, any source file (its encoding
detected), HTML (its visible text), PDF (its text layer, by pypdf) and DOCX (its paragraphs and
tables, by python-docx). What cannot be read so — a binary file, a PDF with no text layer, an
empty file — raises :class:`AttachmentError` naming the file and why; nothing is half-read.

One reader for the window, the terminal, the server and documents folders, and every file is read
as hostile input, within :mod:`draftscope.documents.limits`: a file past 32 MB is refused before
it is read; a DOCX's zip directory is checked (parts, unpacked sizes, packing ratio) before it is
unpacked (:mod:`draftscope.documents.package`); PDF, DOCX and HTML are parsed in a child process
that is killed past the time limit, capped in memory, and ended by the caller's ``cancel`` (a
``threading.Event``; :mod:`draftscope.documents.isolate`). Plain text is decoded here, bounded by
its size. ``read_file`` and ``read_bytes`` return an :class:`Attachment` or raise
:class:`AttachmentError` (:class:`ReadCancelled` when cancelled), never another exception."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from charset_normalizer import from_bytes

from draftscope.documents.isolate import Cancel, parse_in_child
from draftscope.documents.limits import (
    LIMITS,
    MAX_FILE_BYTES,
    AttachmentError,
    ReadCancelled,
    ReadLimits,
)
from draftscope.documents.package import check_package

__all__ = [
    "MAX_FILE_BYTES",
    "Attachment",
    "AttachmentError",
    "ReadCancelled",
    "ReadLimits",
    "kind_of",
    "read_bytes",
    "read_file",
]
_SNIFF = 8192  # bytes looked at to tell text from binary


@dataclass(frozen=True)
class Attachment:
    """A file's text as the model reads it. ``kind``: text, html, pdf or docx."""

    name: str
    text: str
    kind: str = "text"

    @property
    def chars(self) -> int:
        return len(self.text)


def read_file(path: str | os.PathLike[str], *, cancel: Cancel | None = None, limits: ReadLimits = LIMITS) -> Attachment:
    """A file on disk, read to text (see the module's words for what is refused)."""
    path = Path(path)
    name = path.name
    try:
        size = path.stat().st_size
        if not path.is_file():
            raise AttachmentError(f"{name} is not a file")
        _check_size(name, size, limits)
        with path.open("rb") as f:  # at most one byte past the limit, should it have grown since
            data = f.read(limits.file_bytes + 1)
        _check_size(name, len(data), limits)
    except AttachmentError:
        raise
    except OSError as exc:
        raise AttachmentError(f"{name} could not be read: {exc.strerror or exc}") from exc
    return read_bytes(name, data, cancel=cancel, limits=limits)


def _check_size(name: str, size: int, limits: ReadLimits) -> None:
    if size > limits.file_bytes:
        raise AttachmentError(
            f"{name} is {size / 2**20:.0f} MB: files up to {limits.file_bytes >> 20} MB can be attached"
        )


def read_bytes(
    name: str, data: bytes, mime: str | None = None, *, cancel: Cancel | None = None, limits: ReadLimits = LIMITS
) -> Attachment:
    """A file's bytes (a drop, an upload), read to text by its kind: the name's suffix or ``mime``,
    else what the bytes look like."""
    _check_size(name, len(data), limits)
    if not data.strip():
        raise AttachmentError(f"{name} is empty")
    kind = kind_of(name, data, mime)
    reader = {"pdf": _pdf_text, "docx": _docx_text, "html": _html_text}.get(kind)
    text = _tidy(reader(name, data, limits, cancel) if reader else _plain_text(name, data))
    if not text.strip():
        raise AttachmentError(
            f"{name} holds no text" + (" (a scanned PDF has no text layer to read)" if kind == "pdf" else "")
        )
    return Attachment(name, text, kind)


def kind_of(name: str, data: bytes, mime: str | None = None) -> str:
    suffix = Path(name).suffix.lower()
    mime = (mime or "").split(";")[0].strip().lower()
    if suffix == ".pdf" or mime == "application/pdf" or data.startswith(b"%PDF-"):
        return "pdf"
    if suffix == ".docx" or mime.endswith("wordprocessingml.document"):
        return "docx"
    if suffix in (".html", ".htm", ".xhtml") or mime in ("text/html", "application/xhtml+xml"):
        return "html"
    return "text"


def _plain_text(name: str, data: bytes) -> str:
    """Text in whatever encoding it was written (UTF-8, UTF-16 with its mark, Latin-1, ...)."""
    if data.startswith((b"\xff\xfe", b"\xfe\xff")):
        try:
            return data.decode("utf-16")
        except UnicodeDecodeError as exc:
            raise AttachmentError(f"{name} says it is UTF-16 but is not: {exc.reason}") from exc
    if data.startswith(b"\xef\xbb\xbf"):
        data = data[3:]
    head = data[:_SNIFF]
    if b"\x00" in head:
        raise AttachmentError(f"{name} is a binary file, not text (attach text, source code, HTML, PDF or DOCX)")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        pass
    try:
        matches = from_bytes(data)
        best = matches.best()
        if best is not None and _binaryish(str(best)):
            best = None
    except (LookupError, UnicodeError, ValueError):  # a code page guessed that cannot decode the bytes after all
        best = None
    if best is None:
        raise AttachmentError(f"{name} is a binary file, not text (attach text, source code, HTML, PDF or DOCX)")
    # a short text often fits several code pages equally well: Windows-1252, the most common for
    # files that are not UTF-8, wins such a tie
    tied = [m for m in matches if (m.chaos, m.coherence) == (best.chaos, best.coherence)]
    return str(next((m for m in tied if m.encoding == "cp1252"), best))


def _binaryish(text: str) -> bool:
    """Mostly control characters: a binary file some encoding happened to decode."""
    sample = text[:_SNIFF]
    controls = sum(1 for c in sample if ord(c) < 32 and c not in "\n\r\t\f")
    return controls > len(sample) * 0.05


def _html_text(name: str, data: bytes, limits: ReadLimits, cancel: Cancel | None) -> str:
    page = _plain_text(name, data)  # decoded here (bounded by size), parsed in the child (not bounded)
    return parse_in_child(name, "html", page.encode("utf-8", "replace"), limits, cancel)


def _docx_text(name: str, data: bytes, limits: ReadLimits, cancel: Cancel | None) -> str:
    check_package(name, data, limits)  # a bomb is refused from the zip's directory, before any unpacking
    return parse_in_child(name, "docx", data, limits, cancel)


def _pdf_text(name: str, data: bytes, limits: ReadLimits, cancel: Cancel | None) -> str:
    return parse_in_child(name, "pdf", data, limits, cancel)


def _tidy(text: str) -> str:
    """One newline convention, no NULs, no trailing spaces on lines; the text otherwise as written."""
    text = text.replace("\r\n", "\n").replace("\r", "\n").replace("\x00", "")
    return "\n".join(line.rstrip() for line in text.split("\n")).strip("\n")
