"""The word under a regenerated answer (offscreen Qt, real SQLite, a tiny real model): the same text
again at temperature 0, where a greedy version departs from version 1 and why (a near-tie the
arithmetic flipped), or that a sampled version was drawn anew with its seed."""

import os

import pytest

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
pytest.importorskip("PySide6")

from test_answer_versions import make_window

from draftscope.gui.chat.versions import first_difference
from draftscope.storage import HistoryStore


def regenerated(store, texts_and_seeds) -> int:
    """A conversation whose one answer has a version per (text, seed), the last shown."""
    c = store.create_conversation()
    store.add_message(c, "user", "Write a line about owls")
    for n, (text, seed) in enumerate(texts_and_seeds):
        if n:
            store.hide_version(store.messages(c)[-1].id)
        store.add_message(c, "assistant", text, stats={"tokens": 5, "seed": seed})
    return c


def test_the_first_differing_word_is_found():
    assert first_difference("a lone owl calls", "a lone owl calls") is None
    assert first_difference("a lone owl calls", "a lone hawk calls") == 3
    assert first_difference("a lone owl", "a lone owl calls") == 4


@pytest.mark.parametrize(
    ("versions", "said", "not_said"),
    [
        ([("a lone owl calls at night", None), ("a lone owl calls at night", None)], "same text as version 1", "word"),
        (
            [("a lone owl calls at night", None), ("a lone owl hoots at dusk", None)],
            "differs from version 1 at word 4: at temperature 0 a near-tie",
            "same text",
        ),
        ([("a lone owl calls", 7), ("the moon rises", 1234)], "sampled anew with seed 1234", "near-tie"),
    ],
)
def test_the_note_under_a_version_says_how_it_compares(qtbot, conversation_engine, tmp_path, versions, said, not_said):
    db = tmp_path / "h.sqlite3"
    c = regenerated(HistoryStore(db), versions)
    w = make_window(qtbot, conversation_engine, db)
    w.show_conversation(c)
    view = w.chat_view.toPlainText()
    assert f"{len(versions)} / {len(versions)}" in view and said in view and not_said not in view
