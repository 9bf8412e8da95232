"""An answer's figures say how its prompt came to be in the model's cache before Send (issue 61):
"prompt 3,240 tokens: 3,210 read ahead", "restored from disk (0.04 s)"; the plain case keeps its
words, and a conversation file carries the new figures in and out, checked like the others."""

from __future__ import annotations

from draftscope.core.words import answer_stats, prompt_read
from draftscope.storage import HistoryStore
from draftscope.storage.transfer import import_file, write_export


def test_the_prompt_says_what_was_read_ahead_restored_and_kept_from_the_turns_before():
    assert prompt_read({"prompt_tokens": 3240, "prompt_kept": 3210, "prompt_read_ahead": 3210}) == [
        "prompt 3,240 tokens: 3,210 read ahead"
    ]
    restored = {"prompt_tokens": 3240, "prompt_kept": 3239, "prompt_restored": 3000, "restore_seconds": 0.041}
    assert prompt_read({**restored, "prompt_read_ahead": 200}) == [
        "prompt 3,240 tokens: 200 read ahead, 3,000 restored from disk (0.04 s), 39 from cache"
    ]
    plain = {"prompt_tokens": 1480, "prompt_kept": 1268, "prompt_read_ahead": 0, "prompt_restored": 0}
    assert prompt_read(plain) == ["prompt 1,480 tokens, 1,268 from cache"]
    assert prompt_read({"prompt_tokens": 1480, "prompt_kept": 1268}) == ["prompt 1,480 tokens, 1,268 from cache"]


def test_a_conversation_file_carries_the_figures_and_drops_those_out_of_range(tmp_path):
    source = HistoryStore(tmp_path / "a.sqlite3")
    c = source.create_conversation("Read ahead")
    source.add_message(c, "user", "what does the licence say?")
    figures = {"prompt_tokens": 3240, "prompt_kept": 3239, "prompt_read_ahead": 3210, "prompt_restored": 0}
    source.add_message(c, "assistant", "that you may", stats={**figures, "restore_seconds": 0.0})
    odd = source.create_conversation("Odd")
    source.add_message(odd, "user", "hi")
    source.add_message(odd, "assistant", "hello", stats={**figures, "prompt_read_ahead": -5, "restore_seconds": "x"})
    write_export(source, tmp_path / "out.json")
    target = HistoryStore(tmp_path / "b.sqlite3")
    import_file(target, tmp_path / "out.json")
    lines = {conv.title: answer_stats(target.messages(conv.id)[-1].stats) for conv in target.conversations()}
    assert lines["Read ahead"] == "prompt 3,240 tokens: 3,210 read ahead, 29 from cache"
    assert lines["Odd"] == "prompt 3,240 tokens, 3,239 from cache", "a figure out of range was kept"
