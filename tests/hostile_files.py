"""Real files that hurt a naive reader, written by the tests: a DOCX that unpacks hundreds of times
over, a Word table python-docx cannot lay out, a small PDF whose pages all share one long content
stream of text operators, a PDF past the page limit."""

from __future__ import annotations

import io
import zipfile


def word_document(*, before: str = "Before the table.", cells=(("owner", "Dana"),), after: str = "After.") -> bytes:
    """A real .docx (python-docx): a paragraph, a table, a paragraph."""
    import docx

    document = docx.Document()
    document.add_paragraph(before)
    table = document.add_table(rows=len(cells), cols=len(cells[0]))
    for row, texts in zip(table.rows, cells):
        for cell, text in zip(row.cells, texts):
            cell.text = text
    document.add_paragraph(after)
    out = io.BytesIO()
    document.save(out)
    return out.getvalue()


def with_member(data: bytes, name: str, content: bytes | None = None, *, padding: int = 0) -> bytes:
    """``data`` (a zip) with member ``name`` replaced by ``content`` (or added), and ``padding``
    spaces inserted after its XML declaration, written a MB at a time (a bomb costs the test
    no memory)."""
    source = zipfile.ZipFile(io.BytesIO(data))
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as target:
        names = source.namelist() + ([name] if name not in source.namelist() else [])
        for member in names:
            body = content if member == name and content is not None else source.read(member)
            if member != name or not padding:
                target.writestr(member, body)
                continue
            cut = body.index(b"?>") + 2 if body.startswith(b"<?xml") else 0
            with target.open(member, "w", force_zip64=True) as f:
                f.write(body[:cut])
                for _ in range(padding >> 20):
                    f.write(b" " * (1 << 20))
                f.write(body[cut:])
    return out.getvalue()


def first_row_merged_down(data: bytes) -> bytes:
    """The document's table with its first cell marked as continuing a vertical merge from the row
    above it, which does not exist: Word shows the cell, python-docx's ``row.cells`` raises
    ValueError ("no tr above topmost tr")."""
    xml = zipfile.ZipFile(io.BytesIO(data)).read("word/document.xml")
    first_cell = xml.index(b"<w:tc>") + len(b"<w:tc>")
    properties = xml.index(b"</w:tcPr>", first_cell)  # after its width, where Word writes a merge
    return with_member(data, "word/document.xml", xml[:properties] + b"<w:vMerge/>" + xml[properties:])


def looping_pdf(pages: int, repeats: int = 20_000) -> bytes:
    """A real PDF (fpdf2, then pypdf) of ``pages`` pages sharing one content stream of ``repeats``
    text-showing operators (~800 KB unpacked, a few KB packed): pypdf takes seconds a page (16 s
    for 50,000 on this project's 2-core machine) and parses the stream again for every page."""
    from fpdf import FPDF
    from pypdf import PdfReader, PdfWriter
    from pypdf.generic import DecodedStreamObject, NameObject

    pdf = FPDF()
    pdf.add_page()
    pdf.set_font("helvetica", size=12)  # the font the operators name (fpdf2 calls it F1)
    pdf.cell(0, 10, "x")
    writer = PdfWriter()
    writer.append(PdfReader(io.BytesIO(bytes(pdf.output()))))
    stream = DecodedStreamObject()
    stream.set_data(b"BT /F1 12 Tf 1 0 0 1 10 10 Tm (ab) Tj ET\n" * repeats)
    shared = writer._add_object(stream.flate_encode())
    first = writer.pages[0]
    first[NameObject("/Contents")] = shared
    for _ in range(pages - 1):
        page = writer.add_blank_page(100, 100)
        page[NameObject("/Resources")] = first["/Resources"]
        page[NameObject("/Contents")] = shared
    out = io.BytesIO()
    writer.write(out)
    return out.getvalue()


def blank_pdf(pages: int) -> bytes:
    from pypdf import PdfWriter

    writer = PdfWriter()
    for _ in range(pages):
        writer.add_blank_page(100, 100)
    out = io.BytesIO()
    writer.write(out)
    return out.getvalue()
