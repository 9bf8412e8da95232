"""A damaged conversations file gets the import's own error, naming what is wrong, and imports
nothing (the history as it was): numbers past a float's range, NaN, infinity, text with broken
characters, a ChatGPT author that is not an object, JSON nested past Python's recursion limit. And
an answer's figure of the wrong kind, imported or already stored, never breaks an export."""

from __future__ import annotations

import json

import pytest
from history_fixtures import chatgpt_export, filled

from draftscope.storage.transfer import ImportError_, import_file, write_export


def ours(message: dict | None = None, **conversation) -> str:
    """The app's own export of one conversation: a question and ``message`` as its answer."""
    answer = {"role": "assistant", "content": "Teal.", **(message or {})}
    conv = {"title": "Colours", "messages": [{"role": "user", "content": "Pick a colour"}, answer], **conversation}
    return json.dumps({"format": "draftscope-conversations", "version": 1, "conversations": [conv]})


def chatgpt_with(author) -> str:
    export = chatgpt_export()
    export[0]["mapping"]["a1"]["message"]["author"] = author
    return json.dumps(export)


DAMAGED = {
    "a 400-digit time": (ours(created=10**400), "conversation 1: 'created' must be a time"),
    "a time that is NaN": (ours({"created": float("nan")}), "message 2: 'created' must be a time"),
    "an infinite token count": (
        ours({"files": [{"name": "a.md", "text": "x", "tokens": float("inf")}]}),
        "file 1: 'tokens' must be a count",
    ),
    "a token count that is NaN": (
        ours({"files": [{"name": "a.md", "text": "x", "tokens": float("nan")}]}),
        "file 1: 'tokens' must be a count",
    ),
    "a broken character": (ours({"content": "Te\ud800al"}), "message 2: 'content' holds a broken character"),
    "a ChatGPT author that is text": (chatgpt_with("assistant"), "node 'a1': 'author' must be an object"),
    "JSON nested 100,000 deep": ("[" * 100_000 + "]" * 100_000, "nested too deeply"),
    "a 5,000-digit number": (ours(created="@").replace('"@"', "9" * 5000), "cannot be read"),
    "drafter settings nested 900 deep": (
        ours({"drafters": {"x": json.loads("[" * 900 + "]" * 900)}}),
        "'drafters' is nested more than",
    ),
}


@pytest.mark.parametrize("name", list(DAMAGED))
def test_a_damaged_file_says_what_is_wrong_and_imports_nothing(tmp_path, name):
    text, words = DAMAGED[name]
    (tmp_path / "in.json").write_text(text, encoding="utf-8", errors="surrogatepass")
    store = filled(tmp_path / "h.sqlite3")
    before = [(c.title, [m.content for m in store.messages(c.id)]) for c in store.conversations()]
    with pytest.raises(ImportError_) as refused:
        import_file(store, tmp_path / "in.json")
    assert "in.json" in str(refused.value) and "nothing was imported" in str(refused.value)
    assert words in str(refused.value)
    assert [(c.title, [m.content for m in store.messages(c.id)]) for c in store.conversations()] == before


def test_an_answer_whose_figures_are_of_the_wrong_kind_exports_with_the_others(tmp_path):
    """The τ of one answer written as text (by hand, another tool, an older Draftscope) is left out
    on import; one already stored never stops "Export all as Markdown" for every conversation."""
    (tmp_path / "in.json").write_text(ours({"stats": {"tokens": 3, "tau": "fast", "tokens_per_second": 10**400}}))
    store = filled(tmp_path / "h.sqlite3")
    import_file(store, tmp_path / "in.json")
    c = store.create_conversation("Stored before")
    store.add_message(c, "user", "hi")
    store.add_message(c, "assistant", "hello", stats={"tokens": 2, "tau": "fast", "speedup_estimate": 10**400})
    assert write_export(store, tmp_path / "all.md") == 4
    markdown = (tmp_path / "all.md").read_text()
    assert "# Sums" in markdown and "# Colours" in markdown and "# Stored before" in markdown
    assert "*3 tokens*" in markdown and "*2 tokens*" in markdown
    imported = next(c for c in store.conversations() if store.messages(c.id)[0].content == "Pick a colour")
    assert store.messages(imported.id)[1].stats == {"tokens": 3}


def test_speed_figures_of_the_wrong_kind_are_left_out_on_import(tmp_path):
    """The speedup panel scales its axis by the plain rate kept with an answer (1.2 x it): a file's
    "plain_tokens_per_second": "x" is left out, as are a busy that is not true/false and a drafting
    note that is not text; figures of the right kind stay."""
    damaged = {"plain_tokens_per_second": "x", "decode_tokens_per_second": [1], "busy": "yes", "drafting": 3}
    good = {"tokens": 3, "plain_tokens_per_second": 30.5, "busy": True, "drafting": "drafting paused"}
    (tmp_path / "in.json").write_text(ours({"stats": {"tokens": 3, **damaged}}, title="Damaged"))
    (tmp_path / "good.json").write_text(ours({"content": "Blue.", "stats": good}, title="Good"))
    store = filled(tmp_path / "h.sqlite3")
    import_file(store, tmp_path / "in.json")
    import_file(store, tmp_path / "good.json")
    stats = {c.title: store.messages(c.id)[1].stats for c in store.conversations()}
    assert stats["Damaged"] == {"tokens": 3} and stats["Good"] == good
