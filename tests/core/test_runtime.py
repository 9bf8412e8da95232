"""The runtime (draftscope.core.runtime): built from Settings in one place, and a settings change
rebuilds what it must (and nothing else)."""

from __future__ import annotations

import dataclasses
from types import SimpleNamespace

import pytest
from engine_fixtures import tiny_llama

from draftscope import drafter_kinds
from draftscope.core.runtime import Runtime
from draftscope.core.session import ChatSession
from draftscope.drafters import ContextDrafter, RetrievalDrafter
from draftscope.drafters.model_drafter import ModelDrafter
from draftscope.engine.engine import Engine
from draftscope.retrieval import Writer
from draftscope.storage import Settings
from draftscope.storage.settings import changed_fields

OFF = {"retrieval": False, "learned": False, "context": False, "model": False, "recurrent": False}


@pytest.fixture(scope="module")
def engine(tokenizer):
    e = Engine(tiny_llama(len(tokenizer), seed=3, sharpen=4.0), tokenizer, name="tiny")
    e.eos_ids = set()
    return e


def datastore(path, tokenizer):
    from draftscope.datastore.fingerprint import tokenizer_fingerprint

    w = Writer(path, len(tokenizer), tokenizer_fingerprint=tokenizer_fingerprint(tokenizer))
    w.add_entries([[5, 6, 7, 8, 9]] * 4)
    w.finalize()
    return path


def test_settings_changes_rebuild_the_drafters_only_when_they_must(engine, tokenizer, tmp_path):
    store = datastore(tmp_path / "a.idx", tokenizer)
    runtime = Runtime(Settings(datastore=str(store), drafters=dict(OFF, retrieval=True, context=True)), engine)
    assert [type(d) for d in runtime.make_drafters()] == [RetrievalDrafter, ContextDrafter]
    setup = runtime.drafter_setup
    assert runtime.datastore_label == str(store)

    # sampling, limits and the system prompt are read at each request: the drafters stay
    notes = runtime.apply(
        dataclasses.replace(runtime.settings, temperature=0.8, seed=11, max_new_tokens=7, system_prompt="Be brief.")
    )
    assert runtime.drafter_setup is setup and notes == []
    session = ChatSession(runtime)
    session.say("hello")
    request = session.request()
    assert (request.sampling.temperature, request.sampling.seed, request.max_new_tokens) == (0.8, 11, 7)
    assert request.messages[0] == {"role": "system", "content": "Be brief."}

    # switches and the datastore are the drafters': rebuilt
    runtime.apply(dataclasses.replace(runtime.settings, drafters=dict(OFF, context=True)))
    assert [type(d) for d in runtime.make_drafters()] == [ContextDrafter] and runtime.datastore_label == "none"
    other = datastore(tmp_path / "b.idx", tokenizer)
    runtime.apply(dataclasses.replace(runtime.settings, datastore=str(other), drafters=dict(OFF, retrieval=True)))
    assert runtime.datastore_label == str(other) and [type(d) for d in runtime.make_drafters()] == [RetrievalDrafter]

    # retrieval switched on without a datastore: left out, and the note says why
    notes = runtime.apply(dataclasses.replace(runtime.settings, datastore=str(tmp_path / "missing.idx")))
    assert runtime.make_drafters() == [] and any("no datastore" in n for n in notes)


def test_what_needs_the_model_loaded_again(engine):
    runtime = Runtime(Settings(), engine)
    for field, value in (
        ("model", "other"),
        ("device", "cpu"),
        ("dtype", "float32"),
        ("backend", "torch"),
        ("draft_model", "small"),
        ("threads", 1),
    ):
        new = dataclasses.replace(runtime.settings, **{field: value})
        assert runtime.needs_reload(new), field
        with pytest.raises(ValueError, match="loaded again"):
            runtime.apply(new)
    assert not runtime.needs_reload(dataclasses.replace(runtime.settings, temperature=1.0, theme="dark"))
    # the model drafter switched on while no draft model is loaded: it has to be loaded
    with_draft = dataclasses.replace(runtime.settings, draft_model="small")
    runtime = Runtime(with_draft, engine)
    assert runtime.needs_reload(dataclasses.replace(with_draft, drafters=dict(with_draft.drafters, model=True)))
    assert changed_fields(with_draft, with_draft) == set()


@pytest.mark.parametrize("on", [True, False])
def test_a_switch_the_settings_leave_out_is_its_kinds_default(engine, tmp_path, monkeypatch, on):
    """Issue 64: the runtime reads every drafter switch through drafter_kinds.switched_on, so a switch
    the settings do not name has its kind's on_by_default and nothing else. The table is flipped here
    (every kind on, then every kind off): a default of the runtime's own fails one of the two."""
    flipped = tuple(dataclasses.replace(k, on_by_default=on) for k in drafter_kinds.KINDS)
    monkeypatch.setattr(drafter_kinds, "KINDS", flipped)
    wide = Writer(tmp_path / "wide.idx", engine.vocab + 100)  # another tokenizer's ids: passed over
    wide.add_entries([[5, 6, 7, 8]] * 2)
    wide.finalize()
    settings = Settings(datastore=str(tmp_path / "wide.idx"), draft_model="small", drafters={})
    runtime = Runtime(settings, engine)
    submitted = []
    runtime.learner = SimpleNamespace(submit=lambda prompt, answer: submitted.append(answer))
    stats = SimpleNamespace(brief=lambda: "2 answers", describe=lambda: "2 answers")
    runtime.learned = SimpleNamespace(stats=lambda: stats)

    runtime.learn([1], [2])
    assert (submitted == [[2]]) is on, "learned"
    assert runtime.learned_text().endswith(" (off)") is not on, "learned"
    passed_over = [n for n in runtime.drafter_setup.notes if "is not used with this model" in n]
    assert bool(passed_over) is on, ("retrieval", runtime.drafter_setup.notes)
    # a draft model set and not loaded: the model drafter's switch decides whether it must be loaded
    assert runtime.needs_reload(dataclasses.replace(settings, drafters={"context": True})) is on, "model"


def drafted(session):
    """(final event, draft tokens proposed, draft tokens accepted) of one answer, four drafts a step."""
    events = list(session.stream(session.request(budget=4), keep=False))
    return events[-1], sum(e.proposed for e in events[:-1]), sum(e.accepted for e in events[:-1])


def test_the_draft_model_samples_at_the_temperature_of_each_request(engine):
    """The drafters are built once; the request's sampling reaches the draft model at each answer.
    A model drafting for itself, coupled to the answer's seed, has every draft accepted at any
    temperature; a draft model stuck at the temperature it was built with (greedy) would not."""
    settings = Settings(draft_model="self", drafters=dict(OFF, model=True), max_new_tokens=24, temperature=0.0)
    runtime = Runtime(settings, engine, draft_model=engine.model)
    setup = runtime.drafter_setup
    runtime.apply(dataclasses.replace(settings, temperature=1.0, seed=5))
    assert runtime.drafter_setup is setup, "a temperature change alone does not rebuild the drafters"
    session = ChatSession(runtime)
    session.say("hello")
    final, proposed, accepted = drafted(session)
    plain = session.run(session.request(drafters=[]), keep=False)
    assert final.token_ids == plain.token_ids, "the seed decides the answer, whatever drafts"
    assert proposed >= 12 and accepted == proposed, (proposed, accepted)


def test_a_draft_model_at_another_temperature_is_caught(engine, monkeypatch):
    """The check above can fail: a draft model that ignores the request's sampling (greedy drafts
    at T = 1) has most of its drafts rejected."""
    monkeypatch.setattr(ModelDrafter, "set_sampling", lambda self, params, noise: None)
    settings = Settings(draft_model="self", drafters=dict(OFF, model=True), max_new_tokens=24, temperature=1.0, seed=5)
    runtime = Runtime(settings, engine, draft_model=engine.model)
    session = ChatSession(runtime)
    session.say("hello")
    _final, proposed, accepted = drafted(session)
    assert accepted < 0.5 * proposed, (proposed, accepted)


def test_the_session_is_the_one_answer_loop_and_keeps_answers(engine, tmp_path):
    from draftscope.storage import HistoryStore

    history = HistoryStore(tmp_path / "h.sqlite3")
    runtime = Runtime(Settings(drafters=dict(OFF, context=True), max_new_tokens=8), engine)
    session = ChatSession(runtime, history=history, defer=True, title_prefix="API · ")
    session.say("a question")
    assert history.conversations() == [], "deferred: nothing is written before an answer is kept"
    events = list(session.stream(session.request()))
    assert events[-1].finish_reason == "length" and all(e.step for e in events[:-1])
    [conversation] = history.conversations()
    assert conversation.title == "API · a question"
    roles = [(m.role, m.id) for m in history.messages(conversation.id)]
    assert [r for r, _ in roles] == ["user", "assistant"] and session.last_kept == roles[-1][1]
    assert len(history.steps(session.last_kept)) == len(events) - 1, "the steps are kept with the answer"


def test_views_observe_the_session_answer_by_answer(engine, tmp_path):
    """The session tells what its answers do (start, each step, end with the message it was kept
    as), in order, to every view connected; a refused request is told as a failure."""
    from draftscope.storage import HistoryStore

    history = HistoryStore(tmp_path / "h.sqlite3")
    session = ChatSession(
        Runtime(Settings(drafters=dict(OFF, context=True), max_new_tokens=12), engine), history=history
    )
    seen = []
    session.events.answer_started.connect(lambda request: seen.append(("started", request)))
    session.events.step.connect(lambda ev: seen.append(("step", ev)))
    session.events.answer_ended.connect(lambda final, message_id: seen.append(("ended", final, message_id)))
    session.events.answer_failed.connect(lambda message: seen.append(("failed", message)))
    session.say("hello")
    request = session.request()
    yielded = list(session.stream(request))
    assert seen[0] == ("started", request)
    assert [e[1] for e in seen[1:-1]] == yielded[:-1] and all(e[0] == "step" for e in seen[1:-1])
    assert seen[-1] == ("ended", yielded[-1], session.last_kept) and session.last_kept is not None
    assert history.messages(session.conversation_id)[-1].id == session.last_kept, "kept before it is told"

    seen.clear()
    too_long = session.request(prompt_ids=[5] * (engine.max_context + 1))
    with pytest.raises(ValueError, match="prompt has"):
        list(session.stream(too_long))
    assert [e[0] for e in seen] == ["started", "failed"] and "prompt has" in seen[-1][1]


def test_views_hear_of_notices_from_the_runtime(engine, tokenizer, tmp_path):
    """A datastore replaced on disk between answers is told to whoever observes the runtime (the
    window's status bar, the terminal's stderr)."""
    import os

    store = datastore(tmp_path / "a.idx", tokenizer)
    runtime = Runtime(Settings(datastore=str(store), drafters=dict(OFF, retrieval=True), max_new_tokens=4), engine)
    heard = []
    runtime.events.notice.connect(heard.append)
    session = ChatSession(runtime)
    session.say("hello")
    session.run(session.request(), keep=False)
    assert heard == []
    datastore(tmp_path / "b.idx", tokenizer)
    os.replace(tmp_path / "b.idx", store)
    session.run(session.request(), keep=False)
    assert len(heard) == 1 and "a.idx changed on disk" in heard[0], heard


def test_a_cancelled_answer_is_not_learned_a_finished_one_is(engine, tmp_path):
    """Only answers that ended (end token, length, stop string) reach the model's learned answers: a
    stopped answer is cut anywhere, and drafting its cut-off ending later would teach the wrong
    continuation. Through the one answer loop, into a real learned store."""
    import threading

    from draftscope.drafters.learned import LearnedStore
    from draftscope.engine.events import FinalEvent

    runtime = Runtime(Settings(drafters=dict(OFF, learned=True), max_new_tokens=8), engine)
    runtime.learned = LearnedStore("tiny", engine.vocab, tmp_path)
    runtime.start_learning()
    try:
        session = ChatSession(runtime)
        session.say("hello")
        cancel = threading.Event()
        events = []
        for ev in session.stream(session.request(cancel=cancel, drafters=[])):
            events.append(ev)
            cancel.set()  # Stop, once the first step is shown
        stopped = events[-1]
        assert isinstance(stopped, FinalEvent) and stopped.finish_reason == "cancel", stopped.finish_reason
        from draftscope.engine.stepper import MAX_LEAD  # the steps already under way when Stop came

        assert 2 <= len(events) <= 2 + MAX_LEAD and stopped.token_ids and stopped.text.strip(), "text to learn"
        assert runtime.learner.wait_idle(10)
        assert runtime.learned.stats().answers == 0, "the cancelled answer was learned"

        session.rewind()
        finished = session.run(session.request(drafters=[]))
        assert finished.finish_reason == "length" and len(finished.token_ids) == 8
        assert runtime.learner.wait_idle(10)
        assert runtime.learned.stats().answers == 1, "the finished answer is learned, and it alone"
        [learned] = runtime.learned.read_answers()
        assert learned.tolist()[-len(finished.token_ids) :] == list(finished.token_ids)
    finally:
        runtime.close(5)
