"""Drafting through tools: a tool's result is part of the conversation the model reads, so an answer
that quotes it is drafted from it by the conversation drafter, and its steps say so."""

from __future__ import annotations

from engine_fixtures import Scripted
from runtime_helpers import runtime_for

from draftscope.core.session import ChatSession
from draftscope.engine.engine import Engine
from draftscope.engine.events import FinalEvent, StepEvent

CALL = {"id": "call_7", "type": "function", "function": {"name": "read_note", "arguments": '{"name": "harbour"}'}}
NOTE = (
    "Harbour log, entry seven: the lighthouse keeper counted forty-one gulls on the northern breakwater, "
    "and the wind stayed north-north-east at force five until the evening tide turned."
)


def test_an_answer_that_quotes_a_tools_result_is_drafted_from_it(tokenizer):
    backend = Scripted(tokenizer, 0, [], eos=tokenizer.eos_token_id, vocab=len(tokenizer))
    engine = Engine(backend=backend)
    session = ChatSession(runtime_for(engine))
    session.say("What does my harbour note say?")
    session.say("", role="assistant")
    session.keep_calls("", [CALL])
    session.say(NOTE, role="tool", tool_fields={"tool_call_id": "call_7", "name": "read_note"})
    # the model (scripted) answers by quoting the result it read
    backend.prompt_len = len(engine.encode_chat(session.messages()))
    backend.script = tokenizer("It says: " + NOTE, add_special_tokens=False)["input_ids"]
    events = list(session.stream(session.request(max_new_tokens=200, budget=64)))
    final = events[-1]
    assert isinstance(final, FinalEvent) and NOTE in final.text
    steps = [e for e in events if isinstance(e, StepEvent)]
    drafted = sum(1 for s in steps for p in s.provenance if p == "context")
    assert drafted >= 0.6 * len(backend.script), f"{drafted} of {len(backend.script)} tokens drafted from the result"
    assert len(steps) <= len(backend.script) // 3, "the quote is written in a few steps, not a token a step"
