"""A file written on one line without spaces (minified JSON of some hundreds of KB) is cut into
passages that fit: a documents folder finds and sends the part that answers, and an attachment too
long to send whole sends its part instead of being refused. Counted with the tests' real tokenizer."""

from __future__ import annotations

import json

import pytest

from draftscope.documents.extract import read_file
from draftscope.documents.folder import FolderIndex
from draftscope.documents.passages import split_passages
from draftscope.documents.prompt import from_documents, prepare

BUDGET = 1500  # the session's room for a documents folder's passages (core/session.py DOCUMENT_TOKENS)


@pytest.fixture
def minified(tmp_path):
    """A real minified JSON file (no line break, no space) with one record that answers."""
    records = [{"id": i, "city": f"town{i}", "code": f"c{i * 7919 % 100003}", "open": i % 3 == 0} for i in range(9000)]
    records[5000] = {"id": 5000, "city": "Reykjavik", "code": "kestrel-42", "open": True}
    path = tmp_path / "docs" / "sites.json"
    path.parent.mkdir()
    path.write_text(json.dumps(records, separators=(",", ":")))
    assert path.stat().st_size > 300_000 and " " not in path.read_text() and "\n" not in path.read_text()
    return path


@pytest.fixture
def count(tokenizer):
    return lambda text: len(tokenizer(text, add_special_tokens=False)["input_ids"])


def test_a_minified_file_is_cut_into_passages_that_together_are_the_file(minified, count):
    text = minified.read_text()
    passages = split_passages("sites.json", text)
    assert len(passages) > 100 and "".join(p.text for p in passages) == text
    assert max(count(p.text) for p in passages) < BUDGET, "each passage fits a folder's budget"


def test_a_documents_folder_sends_the_part_of_a_minified_file_that_answers(minified, count, tmp_path):
    index = FolderIndex(minified.parent, tmp_path / "index.sqlite3")
    report = index.refresh()
    assert report.files == 1 and not report.problems
    sent = from_documents(index, "What is the code of Reykjavik?", BUDGET, count)
    assert sent is not None and "Reykjavik" in sent.text and "kestrel-42" in sent.text
    assert sent.tokens <= BUDGET
    index.close()


def test_an_attached_minified_file_too_long_to_send_whole_sends_its_part(minified, count):
    attachment = read_file(minified)
    assert count(attachment.text) > 4000
    (sent,) = prepare([attachment], "What is the code of Reykjavik?", 4000, count)
    assert not sent.whole and sent.tokens <= 4000
    assert "kestrel-42" in sent.text
    bodies = [part.split("\n", 1)[1] for part in sent.text.split("\n\n")]
    assert all(body in attachment.text for body in bodies), "each part sent is the file's own text"
