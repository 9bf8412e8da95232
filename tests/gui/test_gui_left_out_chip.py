"""A sent file left out (the question named another) says so on its chip and in its dialog."""

from __future__ import annotations

from types import SimpleNamespace

from draftscope.documents.extract import Attachment
from draftscope.documents.prompt import prepare
from draftscope.gui.chat.attachments import sent_file_dialog
from draftscope.gui.chat.view import files_html


def test_the_chip_and_the_dialog_say_a_file_was_left_out(qtbot):
    big = "\n\n".join(f"paragraph {i} about parks and roads and budgets" for i in range(300))
    files = [Attachment("report.md", big, "text"), Attachment("minutes.txt", big, "text")]
    sent = prepare(files, "what does report.md say?", 900, lambda t: len(t.split()))
    message = SimpleNamespace(id=7, files=tuple(f.as_dict() for f in sent))
    chip = files_html(message)
    assert "minutes.txt</a> <small>(left out: the question names report.md)</small>" in chip
    dialog = sent_file_dialog(None, message.files[1])
    qtbot.addWidget(dialog)
    note = dialog.findChildren(type(dialog.layout().itemAt(0).widget()))[0].text()
    assert "left out: the question names report.md" in note and "whole file" not in note
