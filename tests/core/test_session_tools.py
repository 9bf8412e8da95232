"""A session keeps tool calls wherever its conversation lives: an answer that called becomes its
prose and its calls (its figures and steps kept), each result is a "tool" message, the model reads
them back (without the history's own server, status and size), a restarted session over the same
history has them, and a served conversation written with its first answer keeps them too."""

from __future__ import annotations

import pytest
from engine_fixtures import tiny_llama
from runtime_helpers import runtime_for

from draftscope.core.session import ChatSession
from draftscope.engine.engine import Engine
from draftscope.storage import HistoryStore

CALL = {"id": "call_1", "type": "function", "function": {"name": "read_note", "arguments": '{"name": "lisbon"}'}}
READ = {**CALL, "function": {"name": "read_note", "arguments": {"name": "lisbon"}}}  # as the template reads it
RESULT = {"tool_call_id": "call_1", "name": "read_note", "server": "files", "status": "ok", "chars": 31}


@pytest.fixture(scope="module")
def engine(tokenizer):
    engine = Engine(tiny_llama(len(tokenizer), seed=3, layers=1, hidden=32, max_positions=512), tokenizer, name="tiny")
    engine.eos_ids = set()
    return engine


def called_a_tool(session: ChatSession) -> None:
    """A question, an answer (really generated) that turned out to call read_note, and its result."""
    session.say("What does my Lisbon note say?")
    session.run(session.request(max_new_tokens=3, drafters=[]))
    session.keep_calls("Let me look.", [CALL])
    kept = session.say("Pastéis de nata at Belém.", role="tool", tool_fields=RESULT)
    assert kept == session.turns()[-1].id, "its message id (None in memory)"


@pytest.mark.parametrize("stored", [True, False], ids=["history", "memory"])
def test_the_model_reads_the_calls_and_results_without_the_historys_own_fields(engine, tmp_path, stored):
    history = HistoryStore(tmp_path / "h.sqlite3") if stored else None
    session = ChatSession(runtime_for(engine, max_new_tokens=8), history=history)
    called_a_tool(session)
    assert session.messages()[1:] == [
        {"role": "assistant", "content": "Let me look.", "tool_calls": [READ]},
        {"role": "tool", "content": "Pastéis de nata at Belém.", "tool_call_id": "call_1", "name": "read_note"},
    ]
    assert session.turns()[-1].tool_fields == RESULT, "the views get the server, status and size"
    prompt = engine.tokenizer.decode(engine.encode_chat(session.messages()))
    assert "Pastéis de nata at Belém." in prompt and "Let me look." in prompt


def test_a_restarted_session_has_the_calls_and_the_answer_keeps_its_figures(engine, tmp_path):
    session = ChatSession(runtime_for(engine, max_new_tokens=8), history=HistoryStore(tmp_path / "h.sqlite3"))
    called_a_tool(session)
    answer_id = session.last_kept
    history = HistoryStore(tmp_path / "h.sqlite3")
    again = ChatSession(runtime_for(engine), history=history, conversation_id=session.conversation_id)
    assert [(t.role, t.content, t.tool_fields) for t in again.turns()[1:]] == [
        ("assistant", "Let me look.", {"tool_calls": [READ]}),
        ("tool", "Pastéis de nata at Belém.", RESULT),
    ]
    answer = history.messages(session.conversation_id)[1]
    assert answer.id == answer_id and answer.stats["tokens"] == 3 and history.has_steps(answer_id)


def test_calls_never_overwrite_an_earlier_answer(engine, tmp_path):
    """No answer kept since the question (``last_kept`` None): the calls are a new answer."""
    session = ChatSession(runtime_for(engine, max_new_tokens=8), history=HistoryStore(tmp_path / "h.sqlite3"))
    session.say("First question")
    first = session.run(session.request(max_new_tokens=3, drafters=[]))
    session.say("Second question")
    session.last_kept = None
    session.keep_calls("", [CALL])
    turns = session.turns()
    assert [t.role for t in turns] == ["user", "assistant", "user", "assistant"]
    assert turns[1].content == first.text and turns[1].tool_fields == {}
    assert turns[3].tool_fields == {"tool_calls": [READ]}


def test_a_served_conversation_is_written_with_its_calls(engine, tmp_path):
    """Deferred (the server): the turns live in memory until the first kept answer writes them all."""
    history = HistoryStore(tmp_path / "h.sqlite3")
    session = ChatSession(runtime_for(engine, max_new_tokens=3), history=history, defer=True, title_prefix="API · ")
    session.say("What does my Lisbon note say?")
    session.say("", role="assistant", tool_fields={"tool_calls": [READ]})
    session.say("Pastéis de nata at Belém.", role="tool", tool_fields={"tool_call_id": "call_1", "name": "read_note"})
    assert history.conversations() == []
    session.run(session.request(drafters=[]))
    (conversation,) = history.conversations()
    kept = history.messages(conversation.id)
    assert [m.role for m in kept] == ["user", "assistant", "tool", "assistant"]
    assert kept[1].tool_fields == {"tool_calls": [READ]} and kept[2].tool_fields["tool_call_id"] == "call_1"
