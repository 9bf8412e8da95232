"""A message that names one of its attached files takes passages from that file only: by its whole
name, or by its stem where no other file shares it; a message naming none shares the room as before."""

from __future__ import annotations

from draftscope.documents.extract import Attachment
from draftscope.documents.prompt import files_named, prepare


def words(text: str) -> int:
    return len(text.split())


def long_file(name: str, topic: str) -> Attachment:
    paragraphs = [f"{topic} paragraph {i}: the budget for {topic} grew by {i} percent this year." for i in range(200)]
    return Attachment(name, "\n\n".join(paragraphs), "text")


REPORT, MINUTES = long_file("report.md", "roads"), long_file("minutes.txt", "parks")


def test_a_question_naming_a_file_takes_passages_from_that_file_only():
    sent = prepare([REPORT, MINUTES], "How did the budget grow according to report.md?", 1200, words)
    assert [f.name for f in sent] == ["report.md"]
    assert sent[0].passages and "roads" in sent[0].text and "parks" not in sent[0].text


def test_a_question_naming_no_file_takes_passages_from_every_file():
    sent = prepare([REPORT, MINUTES], "How did the budget grow this year?", 1200, words)
    assert [f.name for f in sent] == ["report.md", "minutes.txt"]
    assert all(f.passages for f in sent)


def test_a_file_the_question_does_not_name_still_goes_whole_where_it_fits():
    note = Attachment("note.txt", "parks are closed on Mondays", "text")
    sent = prepare([REPORT, note], "What does the report say about the budget?", 1200, words)
    assert [f.name for f in sent] == ["report.md", "note.txt"]
    assert sent[0].passages and sent[1].whole


def test_names_and_stems_are_matched_as_words_and_an_ambiguous_stem_names_nothing():
    notes_md, notes_txt, report = (Attachment(n, "x", "text") for n in ("notes.md", "notes.txt", "report.md"))
    assert files_named("Summarise Report.MD please", [notes_md, report]) == [report]
    assert files_named("what is in the report?", [notes_md, report]) == [report]
    assert files_named("what do the notes say?", [notes_md, notes_txt]) == []
    assert files_named("what do the notes.txt say?", [notes_md, notes_txt]) == [notes_txt]
    assert files_named("read the footnotes and reporting", [notes_md, report]) == []
