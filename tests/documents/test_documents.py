"""The user's files as the model reads them: each format's text read from a real file the test
writes (a PDF written by fpdf2, a Word document by python-docx, an HTML page, UTF-16 and Latin-1
text), what cannot be read refused with its reason, a file too long for the context sent as the
passages that hold the answer, and the attachments kept with their message in the history."""

from __future__ import annotations

import pytest

from draftscope.documents.extract import AttachmentError, read_bytes, read_file
from draftscope.documents.passages import best_passages, split_passages
from draftscope.documents.prompt import SentFile, prepare, render


def words(text: str) -> int:  # a stand-in tokenizer for the budget: a token a word
    return len(text.split())


def test_text_files_in_their_encodings(tmp_path):
    (tmp_path / "notes.md").write_text("# Plan\n\nShip **it**.\n", encoding="utf-8")
    (tmp_path / "wide.txt").write_text("Grüße aus Köln\r\nzweite Zeile", encoding="utf-16")
    (tmp_path / "old.py").write_bytes("# café crème brûlée, à la carte\nprint('déjà vu')\n".encode("latin-1"))
    assert read_file(tmp_path / "notes.md").text == "# Plan\n\nShip **it**."
    assert read_file(tmp_path / "wide.txt").text == "Grüße aus Köln\nzweite Zeile"
    assert "print('déjà vu')" in read_file(tmp_path / "old.py").text


def test_an_html_page_gives_its_visible_text(tmp_path):
    page = (
        "<html><head><title>T</title><style>p{color:red}</style><script>var secret = 1;</script></head>"
        "<body><h1>Release notes</h1><p>Fixed the <b>parser</b> &amp; the lexer.</p><ul><li>one</li>"
        "<li>two</li></ul></body></html>"
    )
    (tmp_path / "notes.html").write_text(page)
    got = read_file(tmp_path / "notes.html")
    assert got.kind == "html"
    assert got.text == "Release notes\nFixed the parser & the lexer.\none\ntwo"


def test_a_pdf_gives_its_text_layer_and_a_scan_is_refused(tmp_path):
    from fpdf import FPDF

    pdf = FPDF()
    pdf.add_page()
    pdf.set_font("helvetica", size=12)
    pdf.multi_cell(0, 10, "The boiler must be serviced every 18 months.\nCall 555-0100 for service.")
    pdf.add_page()
    pdf.multi_cell(0, 10, "Page two: the warranty lasts five years.")
    pdf.output(str(tmp_path / "manual.pdf"))
    got = read_file(tmp_path / "manual.pdf")
    assert got.kind == "pdf"
    assert "serviced every 18 months" in got.text and "warranty lasts five years" in got.text
    scan = FPDF()
    scan.add_page()
    scan.rect(20, 20, 100, 60, style="F")  # a picture of a page: no text layer
    scan.output(str(tmp_path / "scan.pdf"))
    with pytest.raises(AttachmentError, match=r"scan\.pdf holds no text .*no text layer"):
        read_file(tmp_path / "scan.pdf")


def test_a_word_document_gives_its_paragraphs_and_tables(tmp_path):
    import docx

    document = docx.Document()
    document.add_heading("Minutes", level=1)
    document.add_paragraph("Decided: the release moves to Thursday.")
    table = document.add_table(rows=1, cols=2)
    table.rows[0].cells[0].text, table.rows[0].cells[1].text = "owner", "Dana"
    document.save(tmp_path / "minutes.docx")
    got = read_file(tmp_path / "minutes.docx")
    assert got.kind == "docx"
    assert "Decided: the release moves to Thursday." in got.text and "owner | Dana" in got.text


@pytest.mark.parametrize(
    "name, data, why",
    [
        ("photo.png", b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR" + bytes(200), "photo.png is a binary file"),
        ("empty.txt", b"", "empty.txt is empty"),
        ("blank.txt", b"  \n\n\t ", "blank.txt is empty"),
        ("broken.pdf", b"%PDF-1.4\nnot really", "broken.pdf"),
        ("broken.docx", b"PK\x03\x04 not a zip", "broken.docx is not a Word document"),
    ],
)
def test_what_cannot_be_read_is_refused_naming_the_file_and_why(name, data, why):
    with pytest.raises(AttachmentError, match=why.replace(".", r"\.")):
        read_bytes(name, data)


def test_a_missing_file_and_a_folder_are_refused(tmp_path):
    with pytest.raises(AttachmentError, match="nope.txt could not be read"):
        read_file(tmp_path / "nope.txt")
    with pytest.raises(AttachmentError, match="is not a file"):
        read_file(tmp_path)


def long_document(fact_at: int = 37, paragraphs: int = 60) -> str:
    filler = (
        "The committee reviewed the quarterly figures for the northern depots and found nothing of note "
        "beyond the usual seasonal variation in freight volumes and staffing levels at each site. "
    )
    out = []
    for i in range(paragraphs):
        if i == fact_at:
            out.append("The spare key to the archive room is kept in the blue cabinet behind reception.")
        else:
            out.append(f"Section {i}. " + filler * 2)
    return "\n\n".join(out)


def test_the_passages_that_hold_the_answer_are_the_ones_chosen():
    text = long_document()
    passages = split_passages("minutes.txt", text)
    assert len(passages) >= 15
    assert "\n\n".join(p.text for p in passages).split() == text.split(), "the passages cover the text once"
    chosen = best_passages(passages, "Where is the spare key to the archive room kept?", 300, words)
    assert any("blue cabinet" in p.text for p in chosen)
    assert sum(words(p.text) for p in chosen) <= 300
    assert [p.first_line for p in chosen] == sorted(p.first_line for p in chosen), "in reading order"


def test_files_go_whole_while_they_fit_and_as_passages_when_not():
    from draftscope.documents.extract import Attachment

    small = Attachment("todo.md", "buy milk\nfix the fence")
    big = Attachment("minutes.txt", long_document())
    sent = prepare([small, big], "Where is the spare key to the archive room kept?", 1000, words)
    assert [f.name for f in sent] == ["todo.md", "minutes.txt"]
    assert sent[0].whole and sent[0].text == small.text
    assert not sent[1].whole and "blue cabinet" in sent[1].text and sent[1].passages
    assert sum(f.tokens for f in sent) <= 1000
    assert all(f.whole for f in prepare([small, big], "anything", 10_000, words))
    with pytest.raises(ValueError, match="minutes.txt does not fit"):
        prepare([big], "the key", 10, words)
    model_text = render("Where is the key?", sent)
    assert model_text.startswith('<file name="todo.md">\nbuy milk')
    assert '<file name="minutes.txt" passages="' in model_text and model_text.endswith("Where is the key?")
    assert SentFile.from_dict(sent[1].as_dict()) == sent[1]


def test_attachments_are_kept_with_their_message(tmp_path):
    from draftscope.storage import HistoryStore

    path = tmp_path / "h.sqlite3"
    store = HistoryStore(path)
    conv = store.create_conversation("c")
    sent = SentFile("notes.md", "text", "# Plan", 5)
    store.add_message(conv, "user", "summarise", files=[sent.as_dict()])
    store.add_message(conv, "assistant", "A plan.")
    store.close()
    again = HistoryStore(path)
    user, answer = again.messages(conv)
    assert [SentFile.from_dict(f) for f in user.files] == [sent] and answer.files == ()
    assert "*Attached: notes.md*" in again.export_markdown(conv)
    again.delete_messages_from(user.id)
    assert again._read("SELECT COUNT(*) FROM message_files")[0][0] == 0, "an edited message's files go with it"


def test_a_documents_folder_is_indexed_changed_files_read_again_removed_ones_forgotten(tmp_path):
    import os
    import time

    from draftscope.documents.folder import FolderIndex

    folder = tmp_path / "docs"
    (folder / "sub").mkdir(parents=True)
    (folder / "minutes.txt").write_text(long_document())
    (folder / "sub" / "recipes.md").write_text("# Bread\nKnead the dough for ten minutes, then let it rise.\n")
    (folder / "photo.png").write_bytes(b"\x89PNG\r\n\x1a\n" + bytes(100))
    (folder / ".git").mkdir()
    (folder / ".git" / "config").write_text("archive room key\n")
    index = FolderIndex(folder, tmp_path / "index.sqlite3")
    seen = []
    report = index.refresh(lambda done, total, name: seen.append(name))
    assert (report.files, report.read) == (2, 3) and "photo.png is a binary file" in report.problems[0]
    assert "minutes.txt" in seen and not any(".git" in s for s in seen), "hidden folders are not read"
    found = index.search("Where is the spare key to the archive room kept?", 400, words)
    assert found and "blue cabinet" in found[0].text and found[0].source == "minutes.txt"
    assert index.refresh().read == 0, "nothing changed: nothing read again"

    recipes = folder / "sub" / "recipes.md"
    recipes.write_text("# Bread\nBake at 230 degrees for thirty minutes.\n")
    os.utime(recipes, (time.time() + 5, time.time() + 5))
    assert index.refresh().read == 1
    assert "230 degrees" in index.search("how hot to bake bread", 400, words)[0].text
    assert not index.search("knead the dough", 400, words), "the old text is gone"
    (folder / "minutes.txt").unlink()
    assert index.refresh().forgotten == 1
    assert not index.search("spare key archive room", 400, words), "a removed file is forgotten"
    index.close()


def test_a_documents_folder_answers_each_question_with_its_passages(tmp_path, tokenizer):
    """The session's attach adds the folder's passages for the question (named, with where they
    came from) before the message's own files, within the context."""
    from engine_fixtures import tiny_llama
    from runtime_helpers import runtime_for

    from draftscope.core.session import ChatSession
    from draftscope.documents.folder import FolderIndex
    from draftscope.engine.engine import Engine

    folder = tmp_path / "manuals"
    folder.mkdir()
    (folder / "boiler.txt").write_text(long_document())
    engine = Engine(tiny_llama(len(tokenizer), max_positions=4096), tokenizer, name="tiny")
    runtime = runtime_for(engine, max_new_tokens=64)
    runtime.documents = FolderIndex(folder, tmp_path / "index.sqlite3")
    runtime.documents.refresh()
    session = ChatSession(runtime)
    (sent,) = session.attach("Where is the spare key to the archive room kept?", [])
    assert sent.name == "manuals (documents)" and "blue cabinet" in sent.text
    assert sent.passages and sent.passages[0].startswith("boiler.txt, lines ")
    assert session.attach("Where is the spare key?", [], documents=False) == []
