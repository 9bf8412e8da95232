"""Files from anywhere must not hurt (issue 60): real hostile files, read by the one reader every
face uses. A DOCX bomb is refused from its zip directory, naming the limit; a Word table
python-docx cannot lay out is read; a PDF whose pages loop over one content stream is given up at
the time limit, or at once when cancelled; a PDF past the page limit, a reader past its memory
limit and a reader that crashes are each an AttachmentError naming the file; an HTML page that
leaves out its optional </head> gives its body."""

from __future__ import annotations

import io
import random
import sys
import threading
import time
import zipfile

import pytest
from hostile_files import blank_pdf, first_row_merged_down, looping_pdf, with_member, word_document

from draftscope.documents import isolate
from draftscope.documents.extract import AttachmentError, ReadCancelled, ReadLimits, read_bytes, read_file
from draftscope.documents.limits import MAX_PDF_PAGES


def test_a_docx_that_unpacks_to_252_mb_is_refused_before_it_is_unpacked(tmp_path):
    bomb = tmp_path / "invoice.docx"
    bomb.write_bytes(with_member(word_document(), "word/document.xml", padding=252 << 20))
    assert bomb.stat().st_size < 1 << 20, "a few hundred KB packed"
    started = time.monotonic()
    with pytest.raises(
        AttachmentError, match=r"invoice\.docx would unpack its part word/document\.xml to 252 MB"
    ) as err:
        read_file(bomb)
    assert "at most 64 MB" in str(err.value)
    assert time.monotonic() - started < 5, "refused from the zip's directory, nothing unpacked"


def test_a_part_packed_a_thousand_times_over_too_many_parts_or_too_much_in_all_are_refused():
    packed_tight = with_member(word_document(), "word/document.xml", padding=20 << 20)  # under 64 MB, ~1000x
    with pytest.raises(AttachmentError, match=r"a\.docx would unpack its part word/document\.xml .* times over"):
        read_bytes("a.docx", packed_tight)
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w") as z, zipfile.ZipFile(io.BytesIO(word_document())) as source:
        for member in source.namelist():
            z.writestr(member, source.read(member))
        for i in range(1001):
            z.writestr(f"extra/part{i}.xml", b"<a/>")
    with pytest.raises(AttachmentError, match=r"b\.docx holds 1,0\d\d files inside: .* up to 1,000"):
        read_bytes("b.docx", out.getvalue())
    incompressible = random.Random(0).randbytes(2 << 20)  # packs ~1x: no ratio to blame
    with pytest.raises(
        AttachmentError, match=r"c\.docx would unpack to 2\.\d MB: a Word document may unpack to at most 1\.0 MB"
    ):
        read_bytes(
            "c.docx",
            with_member(word_document(), "word/media/big.bin", incompressible),
            limits=ReadLimits(unpacked_bytes=1 << 20),
        )


def test_a_word_table_python_docx_cannot_lay_out_is_read_in_reading_order():
    data = first_row_merged_down(word_document(cells=(("owner", "Dana"), ("due", "Friday"))))
    import docx

    with pytest.raises(ValueError):  # what the reader used to let escape (not an AttachmentError)
        [c.text for t in docx.Document(io.BytesIO(data)).tables for r in t.rows for c in r.cells]
    got = read_bytes("minutes.docx", data)
    assert got.text == "Before the table.\nowner | Dana\ndue | Friday\nAfter."


def test_a_pdf_looping_over_one_content_stream_is_given_up_at_the_time_limit():
    data = looping_pdf(pages=200)  # seconds a page: most of an hour, were it read whole
    assert len(data) < 100_000
    started = time.monotonic()
    with pytest.raises(AttachmentError, match=r"drawing\.pdf took more than 1 s to read and was given up"):
        read_bytes("drawing.pdf", data, limits=ReadLimits(seconds=1))
    assert time.monotonic() - started < 10, "its reader was killed at the limit"


def test_a_read_is_cancelled_at_once_from_another_thread():
    data = looping_pdf(pages=200)
    cancel = threading.Event()
    threading.Timer(0.5, cancel.set).start()  # the user presses Cancel half a second in
    started = time.monotonic()
    with pytest.raises(ReadCancelled, match=r"reading drawing\.pdf was cancelled"):
        read_bytes("drawing.pdf", data, cancel=cancel)
    assert time.monotonic() - started < 10, "not the minutes the whole file would take"


def test_a_pdf_past_the_page_limit_is_refused_naming_it(tmp_path):
    (tmp_path / "archive.pdf").write_bytes(blank_pdf(MAX_PDF_PAGES + 1))
    with pytest.raises(AttachmentError, match=rf"archive\.pdf has {MAX_PDF_PAGES + 1:,} pages: PDFs of up to "):
        read_file(tmp_path / "archive.pdf")


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the memory cap is Linux's address-space limit")
def test_a_reader_past_its_memory_limit_is_refused_naming_it():
    big = with_member(word_document(), "word/document.xml", padding=40 << 20)  # 40 MB of XML to parse
    with pytest.raises(AttachmentError, match=r"long\.docx needs more than 16 MB of memory to read"):
        read_bytes("long.docx", big, limits=ReadLimits(ratio=10_000, memory_bytes=16 << 20))


def test_a_reader_that_crashes_is_an_attachment_error(monkeypatch):
    crash = "import os, signal; os.kill(os.getpid(), signal.SIGSEGV)"
    monkeypatch.setattr(isolate, "CHILD_COMMAND", [sys.executable, "-c", crash])
    with pytest.raises(AttachmentError, match=r"scan\.pdf could not be read: its reader crashed \(SIGSEGV\)"):
        read_bytes("scan.pdf", b"%PDF-1.4 whatever")


@pytest.mark.parametrize(
    "page",
    [
        "<!DOCTYPE html><html><head><title>Notes</title><meta charset=utf-8><body><p>Ship it Friday.</p></body></html>",
        "<html><head><title>Notes</title><link rel=stylesheet href=a.css><p>Ship it Friday.",
        "<head><meta name=x content=y>\nShip it Friday.",
    ],
)
def test_an_html_page_without_its_optional_head_end_tag_gives_its_body(page):
    got = read_bytes("notes.html", page.encode())
    assert got.text == "Ship it Friday."


def test_an_html_page_that_makes_the_parser_quadratic_is_given_up_at_the_time_limit():
    page = b"<html><body>" + b"<a " * 20_000  # 60 KB: minutes for Python's HTMLParser
    started = time.monotonic()
    with pytest.raises(AttachmentError, match=r"links\.html took more than 1 s to read"):
        read_bytes("links.html", page, limits=ReadLimits(seconds=1))
    assert time.monotonic() - started < 10
