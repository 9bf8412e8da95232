"""Conversations in and out: export then import gives the same conversations (their files and each
answer's statistics and seed too); a ChatGPT export written here imports with its titles, roles and
order (the current branch only); a truncated or foreign file imports nothing; the same file twice
adds nothing the second time; and `draftscope history` does it from the terminal."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from history_fixtures import chatgpt_export, filled

from draftscope.storage import HistoryStore
from draftscope.storage.transfer import ImportError_, import_file, write_export


def shape(store):
    return sorted(
        (c.title, [(m.role, m.content, m.stats, m.files) for m in store.messages(c.id)]) for c in store.conversations()
    )


def test_export_then_import_gives_the_same_conversations(tmp_path):
    source = filled(tmp_path / "a.sqlite3")
    assert write_export(source, tmp_path / "all.json") == 2
    target = HistoryStore(tmp_path / "b.sqlite3")
    report = import_file(target, tmp_path / "all.json")
    assert (report.added, report.duplicates) == (2, 0)
    assert shape(target) == shape(source)
    teal = next(m for c in target.conversations() for m in target.messages(c.id) if m.content == "Teal.")
    assert teal.stats["seed"] == 42 and teal.stats["tau"] == 1.5
    again = import_file(target, tmp_path / "all.json")
    assert (again.added, again.duplicates) == (0, 2) and len(target.conversations()) == 2, "no duplicates"
    write_export(source, tmp_path / "one.md", [source.conversations()[-1].id])
    markdown = (tmp_path / "one.md").read_text()
    assert markdown.startswith("# Colours") and "*Attached: palette.md*" in markdown and "Sums" not in markdown


def test_a_chatgpt_export_imports_with_its_titles_roles_and_order(tmp_path):
    (tmp_path / "conversations.json").write_text(json.dumps(chatgpt_export()))
    store = HistoryStore(tmp_path / "h.sqlite3")
    report = import_file(store, tmp_path / "conversations.json")
    assert (report.added, report.source) == (1, "ChatGPT")
    (conv,) = store.conversations()
    assert conv.title == "Trip to Lisbon" and conv.created == 1700000000.5
    assert [(m.role, m.content) for m in store.messages(conv.id)] == [
        ("user", "Plan a day in Lisbon"),
        ("assistant", "Start at Belém."),
        ("user", "And lunch?"),
        ("assistant", "Pastéis de nata."),
    ]


@pytest.mark.parametrize(
    "text, words",
    [
        (
            '{"format": "draftscope-conversations", "version": 1, "conversations": [{"title": "x", "mess',
            "not a complete JSON file",
        ),
        ('{"hello": "world"}', "neither a Draftscope export nor ChatGPT"),
        ('{"format": "draftscope-conversations", "version": 99, "conversations": []}', "newer Draftscope"),
        (
            '{"format": "draftscope-conversations", "version": 1, "conversations": [{"title": "ok", "messages": []}, '
            '{"title": "bad", "messages": [{"role": "robot", "content": "x"}]}]}',
            "conversation 2, message 1",
        ),
    ],
)
def test_a_damaged_or_foreign_file_imports_nothing(tmp_path, text, words):
    (tmp_path / "in.json").write_text(text)
    store = HistoryStore(tmp_path / "h.sqlite3")
    with pytest.raises(ImportError_, match=words):
        import_file(store, tmp_path / "in.json")
    assert store.conversations() == [], "nothing partial"


def test_history_export_and_import_from_the_terminal(tmp_path, monkeypatch, capsys):
    """In this process (the suite's time), but one run as a real program: its exit status and words."""
    from draftscope.cli import main

    monkeypatch.setenv("DRAFTSCOPE_DATA_DIR", str(tmp_path / "data"))
    filled(tmp_path / "data" / "history.sqlite3").close()

    def run(*args):
        code = main(["history", *args])
        said = capsys.readouterr()
        return subprocess.CompletedProcess(args, code, said.out, said.err)

    listed = run("list")
    assert listed.returncode == 0 and "Colours" in listed.stdout and "Sums" in listed.stdout, listed
    done = run("export", str(tmp_path / "out.json"))
    assert done.returncode == 0 and "Exported 2 conversations" in done.stderr
    assert len(json.loads((tmp_path / "out.json").read_text())["conversations"]) == 2
    (tmp_path / "gpt.json").write_text(json.dumps(chatgpt_export()))
    imported = run("import", str(tmp_path / "gpt.json"))
    assert imported.returncode == 0 and "Imported 1 conversation from a ChatGPT export" in imported.stderr
    (tmp_path / "cut.json").write_text((tmp_path / "out.json").read_text()[:-40])
    refused = subprocess.run(
        [sys.executable, "-m", "draftscope", "history", "import", str(tmp_path / "cut.json")],
        capture_output=True,
        text=True,
        timeout=120,
    )  # the environment (DRAFTSCOPE_DATA_DIR) as monkeypatched above
    assert refused.returncode == 2 and "nothing was imported" in refused.stderr
    assert "3 messages" not in run("list").stdout and len(run("list").stdout.splitlines()) == 3


def test_an_imported_answer_with_odd_figures_shows_those_it_has(tmp_path):
    """A file written by hand or by another tool may carry an answer's figures half or in the wrong
    kind: the answer's line shows what is there and is a number, and never fails to draw."""
    from draftscope.core.words import answer_stats

    source = HistoryStore(tmp_path / "a.sqlite3")
    c = source.create_conversation("Odd")
    source.add_message(c, "user", "hi")
    source.add_message(
        c,
        "assistant",
        "hello",
        stats={
            "tokens": 2,
            "tau": "fast",
            "tokens_per_second": None,
            "finish_reason": ["length"],
            "prompt_tokens": "9",
            "prompt_kept": 0,
            "speedup_estimate": 1.3,
        },
    )
    write_export(source, tmp_path / "odd.json")
    target = HistoryStore(tmp_path / "b.sqlite3")
    import_file(target, tmp_path / "odd.json")
    (conv,) = target.conversations()
    answer = target.messages(conv.id)[-1]
    assert answer_stats(answer.stats) == "2 tokens · 1.30x plain"
    assert answer_stats({}) == ""
    # a history written before imports were checked may hold figures no float holds
    assert answer_stats({"tokens": 10**400, "tau": float("nan"), "speedup_estimate": 1.3}) == "1.30x plain"
