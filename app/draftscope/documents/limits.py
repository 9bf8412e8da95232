"""How much reading one file may cost, and the errors that say which limit a file went past.

A file attached, posted to ``serve`` or found in a documents folder may come from anyone: a
DOCX that unpacks to gigabytes or a small PDF whose pages make its parser loop for hours must be
refused, naming the file and the limit, before they cost the user their window or their memory.
Each limit below says why it is that number; :class:`ReadLimits` gathers them so that a caller
(or a test) can ask for tighter ones."""

from __future__ import annotations

from dataclasses import dataclass

MAX_FILE_BYTES = 32 << 20
"""A file past this is refused before it is read: 32 MB is a long book as text, far more than any
model's context, and what the server accepts in one body."""

MAX_TEXT_CHARS = MAX_FILE_BYTES
"""The text one file may give: no more characters than the largest plain-text file accepted holds,
so a PDF whose pages repeat one huge content stream cannot turn 3 KB into gigabytes of text."""

MAX_PACKAGE_MEMBERS = 1000
"""Files inside one zip-based document (DOCX): a Word document holds 10-30 parts, one full of
pictures a few hundred; thousands are a crafted archive, each costing the reader memory."""

MAX_MEMBER_BYTES = 64 << 20
"""One part of a package, unpacked: the main text of a 1,000-page Word document is ~30 MB of XML."""

MAX_UNPACKED_BYTES = 256 << 20
"""All parts of a package together, unpacked: python-docx holds every part in memory at once."""

MAX_RATIO = 100
"""Unpacked over packed size, for a part of more than :data:`RATIO_FLOOR_BYTES`: Word's XML packs
5-20 times, repetitive text up to ~50; a zip bomb's parts pack ~1,000 times (deflate's ceiling)."""

RATIO_FLOOR_BYTES = 1 << 20
"""Parts smaller than this unpack to too little to harm, however well they pack (a blank style
sheet packs 200 times), so the ratio is not asked of them."""

MAX_PDF_PAGES = 2000
"""Pages of one PDF: a long book is under 1,000; each page is parsed on its own, so a crafted
PDF of thousands of pages sharing one content stream is parsed thousands of times."""

MAX_READ_SECONDS = 60.0
"""Wall-clock time to read one PDF or DOCX: pypdf reads a 1,000-page book in ~30 s on one slow
core; past a minute the file is hostile or not worth the wait, and its reader is killed."""

MAX_READER_MEMORY = 1 << 30
"""Memory the reading child may take beyond its own start-up (its address space, so the kernel
refuses the allocation): 1 GB holds the largest package allowed above parsed by lxml, and keeps an
8 GB machine from swapping for one file."""


class AttachmentError(ValueError):
    """Why a file cannot be given to the model, in words for the user (it names the file)."""


class ReadCancelled(AttachmentError):
    """The caller cancelled the read (the user pressed Cancel): nothing to show them."""


@dataclass(frozen=True)
class ReadLimits:
    """The limits one read runs under (the constants above unless a caller asks for tighter)."""

    file_bytes: int = MAX_FILE_BYTES
    text_chars: int = MAX_TEXT_CHARS
    package_members: int = MAX_PACKAGE_MEMBERS
    member_bytes: int = MAX_MEMBER_BYTES
    unpacked_bytes: int = MAX_UNPACKED_BYTES
    ratio: int = MAX_RATIO
    ratio_floor_bytes: int = RATIO_FLOOR_BYTES
    pdf_pages: int = MAX_PDF_PAGES
    seconds: float = MAX_READ_SECONDS
    memory_bytes: int = MAX_READER_MEMORY


LIMITS = ReadLimits()


def megabytes(n: int) -> str:
    """A size in words: "1.5 MB", "256 MB"."""
    mb = n / 2**20
    return f"{mb:.1f} MB" if mb < 10 else f"{mb:.0f} MB"
