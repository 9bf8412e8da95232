"""What Send would send, built without sending it (ChatSession.outgoing): the window's read ahead
reads exactly this, so it must be the conversation the model reads once the message is sent — the
system prompt, the turns so far (up to a message being edited), the files whole or as passages, the
text last — and building it must leave the conversation as it was."""

from __future__ import annotations

import pytest
from engine_fixtures import tiny_llama
from runtime_helpers import runtime_for

from draftscope.core.session import ChatSession
from draftscope.documents.extract import Attachment
from draftscope.engine.engine import Engine
from draftscope.engine.events import FinalEvent
from draftscope.storage import HistoryStore


@pytest.fixture(scope="module")
def engine(tokenizer):
    engine = Engine(tiny_llama(len(tokenizer), seed=3, layers=1, hidden=32, max_positions=512), tokenizer, name="tiny")
    engine.eos_ids = set()
    return engine


def fed_prompt(session: ChatSession) -> list[int]:
    """The tokens the engine reads for the session's next request (as Engine.generate takes them)."""
    return session.engine._prompt(session.request(max_new_tokens=1, drafters=[]))


def answered(session: ChatSession, text: str) -> None:
    session.say(text)
    final = session.run(session.request(max_new_tokens=3, drafters=[]))
    assert isinstance(final, FinalEvent) and final.error is None


@pytest.mark.parametrize("stored", [True, False], ids=["history", "memory"])
def test_what_send_would_send_is_what_the_model_reads_once_it_is_sent(engine, tmp_path, stored):
    history = HistoryStore(tmp_path / "h.sqlite3") if stored else None
    session = ChatSession(runtime_for(engine, max_new_tokens=8, system_prompt="Be brief."), history=history)
    answered(session, "What is a cache?")
    before = session.turns()
    files = [Attachment("notes.md", "A cache keeps what was computed.\nReading it again is slow.")]

    out = session.outgoing("And a kept prefix?", files)

    assert session.turns() == before, "building it records nothing"
    assert out.messages[0] == {"role": "system", "content": "Be brief."}
    assert out.messages[-1]["content"].endswith("And a kept prefix?") and "notes.md" in out.messages[-1]["content"]
    session.say("And a kept prefix?", files=out.sent)
    assert out.messages == session.messages()
    assert engine.encode_chat(out.messages) == fed_prompt(session), "token for token what the engine is fed"


def test_an_edit_sends_the_conversation_up_to_the_message_it_replaces(engine, tmp_path):
    session = ChatSession(runtime_for(engine, max_new_tokens=8), history=HistoryStore(tmp_path / "h.sqlite3"))
    for text in ("First question", "Second question"):
        answered(session, text)
    second = next(t for t in session.turns() if t.content == "Second question")

    out = session.outgoing("Second question, edited", [], replacing=second.id)

    assert len(session.turns()) == 4, "nothing is rewound until it is sent"
    assert [m["content"] for m in out.messages][-2:][1] == "Second question, edited"
    assert len(out.messages) == 3, "the first question, its answer, the edit"
    session.rewind(second.id)
    session.say("Second question, edited", files=out.sent)
    assert engine.encode_chat(out.messages) == fed_prompt(session)


def test_a_file_too_long_goes_as_the_passages_send_would_choose(engine, tmp_path):
    """The tiny model reads 512 tokens: a long file goes as passages chosen for the text, the same
    ones attach() gives Send; the text typed so far is what chooses them."""
    long_file = "\n".join(
        f"Line {i}: the spare key is in the blue cabinet." if i == 300 else f"Line {i}: minutes of a meeting."
        for i in range(600)
    )
    session = ChatSession(runtime_for(engine, max_new_tokens=64), history=HistoryStore(tmp_path / "h.sqlite3"))
    question = "Where is the spare key kept?"
    out = session.outgoing(question, [Attachment("minutes.txt", long_file)])
    (sent,) = out.sent
    assert not sent.whole and "blue cabinet" in sent.text
    assert out.sent == session.attach(question, [Attachment("minutes.txt", long_file)])
    assert len(engine.encode_chat(out.messages)) <= engine.max_context - 64
    with pytest.raises(ValueError):  # files that cannot fit at all are refused in words, as at Send
        session.outgoing("x " * 600, [Attachment("minutes.txt", long_file)])
