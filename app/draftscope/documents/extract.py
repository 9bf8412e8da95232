"""A file as text the model can read: plain text and Markdown, any source file (its encoding
detected), HTML (its visible text), PDF (its text layer, by pypdf) and DOCX (its paragraphs, by
python-docx). What cannot be read so — a binary file, a PDF with no text layer, an empty file, one
too large — raises :class:`AttachmentError` naming the file and why; nothing is half-read."""

from __future__ import annotations

import io
import os
from dataclasses import dataclass
from html.parser import HTMLParser
from pathlib import Path

MAX_FILE_BYTES = 32 << 20  # a file past this is refused before it is read
_SNIFF = 8192  # bytes looked at to tell text from binary


class AttachmentError(ValueError):
    """Why a file cannot be given to the model, in words for the user (it names the file)."""


@dataclass(frozen=True)
class Attachment:
    """A file's text as the model reads it. ``kind``: text, html, pdf or docx."""

    name: str
    text: str
    kind: str = "text"

    @property
    def chars(self) -> int:
        return len(self.text)


def read_file(path: str | os.PathLike[str]) -> Attachment:
    """A file on disk, read to text (see the module's words for what is refused)."""
    path = Path(path)
    name = path.name
    try:
        size = path.stat().st_size
        if not path.is_file():
            raise AttachmentError(f"{name} is not a file")
        if size > MAX_FILE_BYTES:
            raise AttachmentError(
                f"{name} is {size / 2**20:.0f} MB: files up to {MAX_FILE_BYTES >> 20} MB can be attached"
            )
        data = path.read_bytes()
    except AttachmentError:
        raise
    except OSError as exc:
        raise AttachmentError(f"{name} could not be read: {exc.strerror or exc}") from exc
    return read_bytes(name, data)


def read_bytes(name: str, data: bytes, mime: str | None = None) -> Attachment:
    """A file's bytes (a drop, an upload), read to text by its kind: the name's suffix or ``mime``,
    else what the bytes look like."""
    if len(data) > MAX_FILE_BYTES:
        raise AttachmentError(
            f"{name} is {len(data) / 2**20:.0f} MB: files up to {MAX_FILE_BYTES >> 20} MB can be attached"
        )
    if not data.strip():
        raise AttachmentError(f"{name} is empty")
    kind = kind_of(name, data, mime)
    reader = {"pdf": _pdf_text, "docx": _docx_text, "html": _html_text}.get(kind, _plain_text)
    text = _tidy(reader(name, data))
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
    from charset_normalizer import from_bytes

    matches = from_bytes(data)
    best = matches.best()
    if best is None or _binaryish(str(best)):
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


class _VisibleText(HTMLParser):
    """An HTML page's text as a reader sees it: no scripts or styles, blocks on lines of their own."""

    SKIP = {"script", "style", "noscript", "template", "head"}
    BLOCKS = {
        "p",
        "div",
        "br",
        "li",
        "tr",
        "h1",
        "h2",
        "h3",
        "h4",
        "h5",
        "h6",
        "pre",
        "section",
        "article",
        "blockquote",
        "table",
        "ul",
        "ol",
        "dt",
        "dd",
        "hr",
        "title",
    }

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.parts: list[str] = []
        self.skipping = 0
        self.title = ""

    def handle_starttag(self, tag, attrs) -> None:
        if tag in self.SKIP:
            self.skipping += 1
        elif tag in self.BLOCKS:
            self.parts.append("\n")

    def handle_endtag(self, tag) -> None:
        if tag in self.SKIP:
            self.skipping = max(0, self.skipping - 1)
        elif tag in self.BLOCKS:
            self.parts.append("\n")

    def handle_data(self, data) -> None:
        if not self.skipping:
            self.parts.append(data)


def _html_text(name: str, data: bytes) -> str:
    parser = _VisibleText()
    parser.feed(_plain_text(name, data))
    parser.close()
    lines = (" ".join(line.split()) for line in "".join(parser.parts).splitlines())
    return "\n".join(line for line in lines if line)


def _pdf_text(name: str, data: bytes) -> str:
    from pypdf import PdfReader
    from pypdf.errors import PdfReadError

    try:
        reader = PdfReader(io.BytesIO(data))
        if reader.is_encrypted and not reader.decrypt(""):
            raise AttachmentError(f"{name} is a password-protected PDF")
        pages = [page.extract_text() or "" for page in reader.pages]
    except AttachmentError:
        raise
    except (PdfReadError, ValueError, KeyError, TypeError, OSError) as exc:
        raise AttachmentError(f"{name} is not a PDF that can be read: {exc}") from exc
    return "\n\n".join(p.strip() for p in pages if p.strip())


def _docx_text(name: str, data: bytes) -> str:
    import docx

    try:
        document = docx.Document(io.BytesIO(data))
    except Exception as exc:  # noqa: BLE001 - a damaged package raises zipfile's, lxml's or python-docx's errors
        raise AttachmentError(f"{name} is not a Word document that can be read: {exc}") from exc
    paragraphs = [p.text for p in document.paragraphs]
    for table in document.tables:
        paragraphs += [" | ".join(cell.text for cell in row.cells) for row in table.rows]
    return "\n".join(paragraphs)


def _tidy(text: str) -> str:
    """One newline convention, no NULs, no trailing spaces on lines; the text otherwise as written."""
    text = text.replace("\r\n", "\n").replace("\r", "\n").replace("\x00", "")
    return "\n".join(line.rstrip() for line in text.split("\n")).strip("\n")
