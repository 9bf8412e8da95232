"""The window hears a fast answer's steps in batches, at most ~30 a second (a view redrawn for every
step of a fast model starves the UI thread), and never loses one: tested on a clock of the test's
own, so the figures do not depend on how fast this machine runs."""

import pytest

pytest.importorskip("PySide6")

from draftscope.core.session import SessionEvents
from draftscope.gui.session_qt import UPDATE_INTERVAL_S, SessionSignals


class FakeSession:
    def __init__(self) -> None:
        self.events = SessionEvents()


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def bridge(qtbot):
    session, clock = FakeSession(), Clock()
    signals = SessionSignals(session, clock=clock)
    heard = {"batches": [], "ended": []}
    signals.steps.connect(heard["batches"].append)
    signals.answer_ended.connect(lambda final, message_id: heard["ended"].append((final, message_id)))
    yield session, clock, heard
    signals.disconnect_all()


def test_a_burst_of_steps_arrives_as_one_batch_after_the_first(bridge):
    session, clock, heard = bridge
    session.events.answer_started.emit(None)
    for step in range(200):  # 200 steps while the clock stands still
        session.events.step.emit(step)
    assert heard["batches"] == [[0]], "the first step shows at once, the burst waits"
    clock.now += UPDATE_INTERVAL_S + 1e-6
    session.events.step.emit(200)
    assert heard["batches"] == [[0], list(range(1, 201))]
    session.events.step.emit(201)
    session.events.answer_ended.emit("final", 7)
    assert heard["batches"][-1] == [201], "the end hands on what was still waiting"
    assert heard["ended"] == [("final", 7)]


def test_steps_at_a_thousand_a_second_reach_views_about_thirty_times_a_second(bridge):
    session, clock, heard = bridge
    session.events.answer_started.emit(None)
    for step in range(3000):  # three seconds of an answer at 1 ms a step
        clock.now += 0.001
        session.events.step.emit(step)
    session.events.answer_ended.emit("final", None)
    # 3 s at 30 batches a second: 90 (and one more for the first step, one for the end)
    assert 85 <= len(heard["batches"]) <= 95, len(heard["batches"])
    assert [s for batch in heard["batches"] for s in batch] == list(range(3000)), "every step, in order"


def test_each_answer_shows_its_first_step_at_once(bridge):
    session, clock, heard = bridge
    for answer in range(3):
        session.events.answer_started.emit(None)
        session.events.step.emit(("first", answer))
        assert heard["batches"][-1] == [("first", answer)]
        session.events.step.emit(("second", answer))
        session.events.answer_ended.emit("final", None)
        assert heard["batches"][-1] == [("second", answer)]
