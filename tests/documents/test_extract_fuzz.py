"""Fuzzing the one reader every face uses (issue 60): whatever bytes arrive — text in any
encoding or none, HTML made of tag fragments, real PDFs (fpdf2) and Word documents (python-docx)
with bytes flipped, inserted, cut or repeated, the XML inside a Word document mutated, zips of
random parts — ``read_bytes`` gives an Attachment or an AttachmentError naming the file, within
the time limit (and the child's memory limit), never another exception.

Reproducible in CI: derandomized, no example database; the examples are few enough that the
whole file runs in well under a minute (each PDF, DOCX or HTML example starts a reading child)."""

from __future__ import annotations

import functools
import io
import time
import zipfile

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from draftscope.documents.extract import Attachment, AttachmentError, ReadLimits, read_bytes

FUZZ_LIMITS = ReadLimits(seconds=5, memory_bytes=256 << 20)  # tighter than the app's: a hang shows fast
BOUND_S = FUZZ_LIMITS.seconds + 5  # the time limit, and a busy machine's start-up and teardown of the child


def fuzz(examples: int):
    return settings(
        max_examples=examples,
        deadline=None,  # the reader's own time limit is the bound asserted
        derandomize=True,
        database=None,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
    )


def read_or_refuse(name: str, data: bytes, mime: str | None = None) -> None:
    """The reader's promise, for one input."""
    started = time.monotonic()
    try:
        got = read_bytes(name, data, mime, limits=FUZZ_LIMITS)
    except AttachmentError as exc:
        assert name in str(exc), f"the error names the file: {exc}"
    else:
        assert isinstance(got, Attachment) and got.name == name and got.text.strip()
        assert "\x00" not in got.text and "\r" not in got.text
    assert time.monotonic() - started < BOUND_S


@st.composite
def mutated(draw, seed: bytes) -> bytes:
    """``seed`` with a few bytes flipped, runs inserted, cut or repeated, or its end cut off."""
    data = bytearray(seed)
    for _ in range(draw(st.integers(1, 6))):
        at = draw(st.integers(0, max(len(data) - 1, 0)))
        how = draw(st.sampled_from(["flip", "insert", "delete", "repeat", "truncate"]))
        if how == "flip" and data:
            data[at] = draw(st.integers(0, 255))
        elif how == "insert":
            data[at:at] = draw(st.binary(min_size=1, max_size=64))
        elif how == "delete":
            del data[at : at + draw(st.integers(1, 256))]
        elif how == "repeat":
            data[at:at] = data[at : at + draw(st.integers(1, 512))] * draw(st.integers(2, 50))
        else:
            del data[at:]
    return bytes(data)


@functools.cache
def seed_pdf(compress: bool) -> bytes:
    from fpdf import FPDF

    pdf = FPDF()
    pdf.set_compression(compress)
    pdf.set_font("helvetica", size=12)
    for text in ("The boiler is serviced every 18 months.", "Page two: the warranty lasts five years."):
        pdf.add_page()
        pdf.multi_cell(0, 10, text)
    return bytes(pdf.output())


@functools.cache
def seed_docx() -> bytes:
    from hostile_files import word_document

    return word_document(cells=(("owner", "Dana"), ("due", "Friday")))


HTML_PIECES = st.sampled_from(
    [
        "<html>",
        "<head>",
        "</head>",
        "<body>",
        "</body>",
        "<title>",
        "</title>",
        "<p>",
        "</p>",
        "<br/>",
        "<script>",
        "</script>",
        "<style>",
        "</style>",
        "<meta charset=utf-8>",
        "<a href='x'>",
        "</a>",
        "<a ",
        "<!--",
        "-->",
        "<![CDATA[",
        "]]>",
        "<!DOCTYPE html>",
        "&amp;",
        "&#",
        "&#x110000;",
        "<",
        ">",
        "</",
        "<table><tr><td>",
        "<template>",
        "<noscript>",
    ]  # fmt: skip
)


@fuzz(150)
@given(st.binary(max_size=2048), st.sampled_from(["fuzzed.txt", "fuzzed.py", "fuzzed"]))
def test_any_bytes_as_text(data, name):
    read_or_refuse(name, data)


@fuzz(20)
@given(st.lists(st.one_of(HTML_PIECES, st.text(max_size=12)), max_size=60).map("".join))
def test_any_html(page):
    read_or_refuse("fuzzed.html", page.encode("utf-8", "surrogatepass"))


@fuzz(25)
@given(st.data(), st.booleans())
def test_mutated_pdfs(data, compress):
    read_or_refuse("fuzzed.pdf", data.draw(mutated(seed_pdf(compress))))


@fuzz(15)
@given(st.data())
def test_mutated_docx_bytes(data):
    read_or_refuse("fuzzed.docx", data.draw(mutated(seed_docx())))


@fuzz(15)
@given(st.data())
def test_docx_with_mutated_xml_inside(data):
    from hostile_files import with_member

    source = zipfile.ZipFile(io.BytesIO(seed_docx()))
    part = data.draw(st.sampled_from(["word/document.xml", "[Content_Types].xml", "word/_rels/document.xml.rels"]))
    read_or_refuse("fuzzed.docx", with_member(seed_docx(), part, data.draw(mutated(source.read(part)))))


@pytest.mark.filterwarnings("ignore:Duplicate name")  # a zip may name a part twice: a case to read, not a fault
@fuzz(15)
@given(
    st.lists(
        st.tuples(
            st.one_of(
                st.sampled_from(["[Content_Types].xml", "_rels/.rels", "word/document.xml"]), st.text(max_size=20)
            ),
            st.binary(max_size=256),
        ),
        max_size=6,
    )
)
def test_zips_of_random_parts(members):
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as z:
        for name, content in members:
            try:
                z.writestr(name or "x", content)
            except (ValueError, UnicodeEncodeError):  # a name zipfile itself refuses to write
                continue
    read_or_refuse("fuzzed.docx", out.getvalue())
