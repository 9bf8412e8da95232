"""Tool calling's part in the session (issue 66's review): Continue on an answer that was shown tools
reads them again (its prompt token for token the cut answer's, the request showing them); Regenerate
after a stopped tool loop replaces the last answer, results and all; the results of one answer share
the context left, so the answer after them still fits."""

from __future__ import annotations

import copy
import json
from dataclasses import replace
from pathlib import Path

import pytest
from engine_fixtures import tiny_llama
from runtime_helpers import runtime_for

from draftscope.core.session import ChatSession
from draftscope.core.tool_turns import ToolTurns
from draftscope.engine.engine import Engine
from draftscope.storage import HistoryStore

QWEN_TEMPLATE = (Path(__file__).parent.parent / "data" / "qwen2.5_chat_template.jinja").read_text()
TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "read_note",
            "description": "a note by its name",
            "parameters": {"type": "object", "properties": {"name": {"type": "string"}}, "required": ["name"]},
        },
    }
]
CUT, WHOLE = 10, 20


def qwen_engine(tokenizer, context: int) -> Engine:
    qwen = copy.deepcopy(tokenizer)
    qwen.chat_template = QWEN_TEMPLATE
    engine = Engine(tiny_llama(len(qwen), seed=3, layers=1, hidden=32, max_positions=context), qwen, name="tiny")
    engine.eos_ids = set()  # every answer runs to its limit
    return engine


@pytest.fixture(scope="module")
def engine(tokenizer):
    return qwen_engine(tokenizer, 1024)


def session_on(engine, tmp_path, name="h.sqlite3", **settings) -> ChatSession:
    runtime = runtime_for(engine, **{"max_new_tokens": CUT, "temperature": 0.0, "stop_loops": False, **settings})
    return ChatSession(runtime, history=HistoryStore(tmp_path / name))


def shown_tools(session: ChatSession, limit: int):
    request = session.request(max_new_tokens=limit, drafters=[])
    request.tools = TOOLS
    return session.run(request)


def test_continue_shows_the_tools_the_cut_answer_was_shown(engine, tmp_path):
    session = session_on(engine, tmp_path)
    session.say("Read my note on Lisbon.")
    cut = shown_tools(session, CUT)
    assert cut.finish_reason == "length"
    request = session.continue_request(session.last_kept, tools=TOOLS)
    assert request.tools == TOOLS
    assert request.prompt_ids == engine.encode_chat(session.messages()[:-1], TOOLS) + cut.token_ids
    continued = session.run(request)
    reference = session_on(engine, tmp_path, "uncut.sqlite3")
    reference.say("Read my note on Lisbon.")
    assert cut.token_ids + continued.token_ids == shown_tools(reference, WHOLE).token_ids


def a_stopped_loop(session: ChatSession) -> None:
    session.say("Read my note on Lisbon.")
    call = {"id": "c1", "type": "function", "function": {"name": "read_note", "arguments": {"name": "lisbon"}}}
    session.say("", role="assistant", tool_fields={"tool_calls": [call]})
    session.say("(stopped)", role="tool", tool_fields={"tool_call_id": "c1", "name": "read_note"})


@pytest.mark.parametrize("stored", [True, False], ids=["history", "memory"])
def test_regenerate_after_a_stopped_loop_replaces_the_answer(engine, tmp_path, stored):
    session = session_on(engine, tmp_path) if stored else ChatSession(runtime_for(engine))
    a_stopped_loop(session)
    assert session.rewind()
    assert [t.role for t in session.turns()] == ["user"], "the answer and its results go (kept as a version)"


def test_results_share_the_context_left_so_the_next_answer_fits(tokenizer):
    """Three big results in a 2k context (each alone would be read up to a quarter of it): each a
    share of the room left, and the answer after them still has its room."""
    engine = qwen_engine(tokenizer, 2048)
    session = ChatSession(runtime_for(engine, max_new_tokens=100))
    turns = ToolTurns(session, TOOLS, None, None, allowed=lambda s, t: True)
    session.say("Read my notes a, b and c.")
    request = session.request()
    turns.prepare(request)
    calls = "".join(
        f"<tool_call>\n{json.dumps({'name': 'read_note', 'arguments': {'name': n}})}\n</tool_call>" for n in "abc"
    )
    turns.said(calls)
    for call in turns.after_answer():
        turns.give(call.id, "a long line of the note\n" * 2000)
    assert [t.role for t in session.turns()] == ["user", "assistant", "tool", "tool", "tool"]
    assert turns.wants_answer()
    follow_up = replace(session.request(), tools=TOOLS)
    used = len(engine.encode_chat(follow_up.messages, TOOLS))
    assert used + session.answer_room() <= engine.max_context, "the answer after the results has its room"
    assert all("left out]" in t.content for t in session.turns()[2:])
