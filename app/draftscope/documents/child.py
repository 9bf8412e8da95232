"""The child process that parses one PDF, DOCX or HTML page (``python -m draftscope.documents.child``), so
that a hostile file costs a process that can be killed, never the window or the server.

It reads a header line (JSON: the file's name and kind, the limits) and then the file's bytes on
stdin (an HTML page already decoded to UTF-8), imports only the parser that kind needs, caps its own address space at its size after
those imports plus the memory limit (Linux; elsewhere only the parent's time limit holds), and
writes one answer on stdout: ``T`` and the text (UTF-8), ``E`` and why the file cannot be read
(naming it), or ``M`` when the memory limit was reached. Anything else — no answer, a signal —
the parent (:mod:`draftscope.documents.isolate`) reports as a reader that stopped."""

from __future__ import annotations

import io
import json
import logging
import os
import sys
import warnings

TEXT, REFUSED, OUT_OF_MEMORY = b"T", b"E", b"M"


class Refused(Exception):
    """The file cannot be read: the message names it and why."""


def main() -> int:
    header = json.loads(sys.stdin.buffer.readline())
    data = sys.stdin.buffer.read()
    logging.disable(logging.CRITICAL)  # a damaged PDF logs a warning per object: nobody reads them
    warnings.simplefilter("ignore")
    reader = {"pdf": _pdf_text, "docx": _docx_text, "html": _html_text}[header["kind"]]
    _import_parser(header["kind"])
    _limit_memory(header["memory_bytes"])
    try:
        answer = TEXT + reader(header["name"], data, header).encode("utf-8", "replace")
    except Refused as exc:
        answer = REFUSED + str(exc).encode("utf-8", "replace")
    except MemoryError:
        answer = OUT_OF_MEMORY
    except Exception as exc:  # a damaged file raises any of its parser's errors
        answer = OUT_OF_MEMORY if "memory" in str(exc).lower() else REFUSED + _damaged(header, exc)
    sys.stdout.buffer.write(answer)
    sys.stdout.buffer.flush()
    return 0


def _damaged(header: dict, exc: Exception) -> bytes:
    what = {"pdf": "a PDF", "docx": "a Word document", "html": "an HTML page"}[header["kind"]]
    why = str(exc) or type(exc).__name__
    return f"{header['name']} is not {what} that can be read: {why[:300]}".encode("utf-8", "replace")


def _import_parser(kind: str) -> None:
    """Everything the parser needs, imported before the memory cap (imports count against it)."""
    if kind == "pdf":
        import pypdf
        import pypdf.filters  # noqa: F401
    elif kind == "html":
        import draftscope.documents.html  # noqa: F401, PLC0415  # only the parser this kind needs, before the memory cap
    else:
        import docx
        import docx.text.paragraph  # noqa: F401


def _limit_memory(extra: int) -> None:
    """Cap the address space at what the process holds now plus ``extra``: an allocation past it
    fails (MemoryError) instead of the machine swapping."""
    try:
        import resource  # noqa: PLC0415  # Linux and Unix only: its ImportError is caught below

        with open("/proc/self/statm") as statm:
            held = int(statm.read().split()[0]) * os.sysconf("SC_PAGE_SIZE")
        cap = held + extra
        resource.setrlimit(resource.RLIMIT_AS, (cap, cap))
    except (ImportError, OSError, ValueError):  # not Linux: the parent's time limit still holds
        pass


def _pdf_text(name: str, data: bytes, limits: dict) -> str:
    """Each page's text layer, pages apart by a blank line; refused past the page or text limit."""
    from pypdf import PdfReader

    reader = PdfReader(io.BytesIO(data))
    if reader.is_encrypted and not reader.decrypt(""):
        raise Refused(f"{name} is a password-protected PDF")
    count = len(reader.pages)
    if count > limits["pdf_pages"]:
        raise Refused(f"{name} has {count:,} pages: PDFs of up to {limits['pdf_pages']:,} pages can be read")
    pages, chars = [], 0
    for page in reader.pages:
        text = (page.extract_text() or "").strip()
        chars += len(text)
        _check_chars(name, chars, limits)
        if text:
            pages.append(text)
    return "\n\n".join(pages)


def _check_chars(name: str, chars: int, limits: dict) -> None:
    if chars > limits["text_chars"]:
        raise Refused(
            f"{name} gives more than {limits['text_chars']:,} characters of text: "
            "no file may give more text than the largest text file accepted holds"
        )


def _html_text(name: str, data: bytes, limits: dict) -> str:
    """A page's visible text (the parent decoded it and sends it as UTF-8)."""
    from draftscope.documents.html import visible_text  # noqa: PLC0415  # imported by _import_parser, for HTML only

    return visible_text(data.decode("utf-8", "replace"))


def _docx_text(name: str, data: bytes, limits: dict) -> str:
    """The body's paragraphs and tables in reading order: a table row's cells joined by " | ".
    Cells are read from the XML as written: python-docx's own cell grid raises ValueError on
    merged cells it cannot place (a vMerge with no cell above), and repeats a merged cell's text."""
    import docx
    from docx.oxml.ns import qn
    from docx.text.paragraph import Paragraph

    document = docx.Document(io.BytesIO(data))
    body = document.element.body
    lines, chars = [], 0
    for block in body.iterchildren():
        if block.tag == qn("w:p"):
            found = [Paragraph(block, document).text]
        elif block.tag == qn("w:tbl"):
            found = [_row_text(row, document) for row in block.iterchildren(qn("w:tr"))]
        else:  # a content control or other wrapper: the paragraphs inside it
            found = [Paragraph(p, document).text for p in block.iter(qn("w:p"))]
        chars += sum(len(line) for line in found)
        _check_chars(name, chars, limits)
        lines += found
    return "\n".join(lines)


def _row_text(row, document) -> str:
    from docx.oxml.ns import qn
    from docx.text.paragraph import Paragraph

    cells = []
    for cell in row.iterchildren(qn("w:tc")):  # a nested table's paragraphs are its cell's text
        cells.append("\n".join(Paragraph(p, document).text for p in cell.iter(qn("w:p"))))
    return " | ".join(cells)


if __name__ == "__main__":
    sys.exit(main())
