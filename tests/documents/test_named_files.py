"""A message that names one of its attached files takes passages from that file only: by its whole
name, or by its stem where no other file shares it and the stem is no ordinary word; a message
naming none shares the room as before. A file it does not name that cannot go whole is kept, as a
note both the model and the user read."""

from __future__ import annotations

from draftscope.documents.extract import Attachment
from draftscope.documents.prompt import SentFile, files_named, left_out_note, prepare, render


def words(text: str) -> int:
    return len(text.split())


def long_file(name: str, topic: str) -> Attachment:
    paragraphs = [f"{topic} paragraph {i}: the budget for {topic} grew by {i} percent this year." for i in range(200)]
    return Attachment(name, "\n\n".join(paragraphs), "text")


REPORT, MINUTES = long_file("report.md", "roads"), long_file("minutes.txt", "parks")


def test_a_question_naming_a_file_takes_passages_from_that_file_only():
    sent = prepare([REPORT, MINUTES], "How did the budget grow according to report.md?", 1200, words)
    assert [f.name for f in sent] == ["report.md", "minutes.txt"]
    assert sent[0].passages and "roads" in sent[0].text and "parks" not in sent[0].text
    assert sent[1].left_out and "parks" not in sent[1].text


def test_a_question_naming_no_file_takes_passages_from_every_file():
    sent = prepare([REPORT, MINUTES], "How did the budget grow this year?", 1200, words)
    assert [f.name for f in sent] == ["report.md", "minutes.txt"]
    assert all(f.passages for f in sent)


def test_a_file_the_question_does_not_name_still_goes_whole_where_it_fits():
    note = Attachment("note.txt", "parks are closed on Mondays", "text")
    sent = prepare([REPORT, note], "What does the report say about the budget?", 1200, words)
    assert [f.name for f in sent] == ["report.md", "note.txt"]
    assert sent[0].passages and sent[1].whole


def test_a_file_the_question_does_not_name_and_too_big_to_go_whole_is_kept_as_a_note():
    question = "How did the budget grow according to report.md?"
    sent = prepare([REPORT, MINUTES], question, 1200, words)
    assert [f.name for f in sent] == ["report.md", "minutes.txt"]  # the chip stays
    minutes = sent[1]
    assert minutes.left_out == "left out: the question names report.md"
    assert "parks" not in minutes.text and sum(f.tokens for f in sent) <= 1200
    assert "left out: the question names report.md" in render(question, sent)  # the model knows it was attached
    stored = SentFile.from_dict(minutes.as_dict())  # as the history keeps it
    assert left_out_note(stored.as_dict()) == minutes.left_out and not sent[0].left_out


def test_names_and_stems_are_matched_as_words_and_an_ambiguous_stem_names_nothing():
    notes_md, notes_txt, report = (Attachment(n, "x", "text") for n in ("notes.md", "notes.txt", "report.md"))
    assert files_named("Summarise Report.MD please", [notes_md, report]) == [report]
    assert files_named("what is in `report`?", [notes_md, report]) == [report]
    assert files_named("what do the notes say?", [notes_md, notes_txt]) == []
    assert files_named("what do the notes.txt say?", [notes_md, notes_txt]) == [notes_txt]
    assert files_named("read the footnotes and reporting", [notes_md, report]) == []


def test_a_stem_that_is_an_ordinary_word_names_no_file_unless_quoted():
    test, data, q3 = (Attachment(n, "x", "text") for n in ("test.py", "data.csv", "q3_report-v2.md"))
    files = [test, data, q3]
    assert files_named("write a test that loads the data and checks the notes", files) == []
    assert files_named('what does "data" hold?', files) == [data]
    assert files_named("summarise q3_report-v2 for me", files) == [q3]
    sent = prepare([REPORT, MINUTES], "what does the report say about the budget?", 1200, words)
    assert all(f.passages and not f.left_out for f in sent)  # no file named: both share the room
