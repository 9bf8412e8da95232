"""Plain decoding's speed by context length (engine/plain_rate.py) and the words an answer's speed is
said in: a speedup compares with plain decoding at the answer's own context, says "no drafts used"
when nothing was accepted, and "the computer was busy" when plain steps ran far below their rate."""

import pytest

from draftscope.core.words import BUSY, NO_DRAFTS, answer_stats, speedup_words, writing_rate
from draftscope.engine.answer_speed import unused_drafters_note
from draftscope.engine.plain_rate import SETTLE_ANSWERS, AnswerPlainSteps, PlainRate

# Measured-like: Qwen2.5-Coder-1.5B on llama.cpp, 2 cores: 31 tokens/s on a short prompt, 20 at 3,600.
SHORT, LONG = 128, 3600
SHORT_S, LONG_S = 1 / 31, 1 / 20


def measured_curve() -> PlainRate:
    """The load-time measurement (32 steps on a short prompt), then an answer's plain steps at 3,600."""
    curve = PlainRate()
    for i in range(32):
        curve.observe(SHORT + i, SHORT_S, at=float(i))
    for i in range(40):
        curve.observe(LONG + i, LONG_S, at=100.0 + i)
    return curve


def test_the_plain_rate_falls_with_the_context_and_a_speedup_compares_at_the_same_length():
    curve = measured_curve()
    assert curve.tokens_per_second(SHORT) == pytest.approx(31, rel=0.03)
    assert curve.tokens_per_second(LONG) == pytest.approx(20, rel=0.03)
    assert curve.tokens_per_second(2000) == pytest.approx(
        1 / (SHORT_S + (LONG_S - SHORT_S) * (2000 - SHORT) / (LONG - SHORT)), rel=0.03
    )
    # an answer writing at plain speed at 3,600 is 1.00x plain there, not 20 / 31 = 0.64x
    assert 20 / curve.tokens_per_second(LONG) == pytest.approx(1.0, abs=0.03)


def test_an_answer_levels_the_curve_with_its_own_plain_steps():
    """Only the short measurement known: an answer at 3,600 whose plain steps ran at 20 tokens/s
    compares with 20 (its own context), and teaches the curve the slope."""
    curve = PlainRate()
    for i in range(32):
        curve.observe(SHORT + i, SHORT_S, at=float(i))
    steps = AnswerPlainSteps(curve)
    for i in range(30):
        steps.add(LONG + i, LONG_S)
    assert not steps.busy(), "1.6x slower at 3,600 tokens is the context, not a busy computer"
    assert steps.tokens_per_second(LONG + 15) == pytest.approx(20, rel=0.03)
    assert curve.tokens_per_second(LONG) == pytest.approx(31, rel=0.03), "not learned before the answer ends"
    curve.learn_answer(steps)
    assert curve.tokens_per_second(LONG) == pytest.approx(20, rel=0.03)
    assert curve.tokens_per_second(SHORT) == pytest.approx(31, rel=0.03)


def test_plain_steps_far_below_the_rate_say_busy_and_are_not_learned_until_they_last():
    curve = measured_curve()
    slow = AnswerPlainSteps(curve)
    for i in range(20):  # another program took a core: 3 tokens/s
        slow.add(SHORT + i, 1 / 3)
    assert slow.busy()
    assert slow.tokens_per_second(SHORT) == pytest.approx(31, rel=0.03), "compared with what it was"
    curve.learn_answer(slow)
    assert curve.tokens_per_second(SHORT) == pytest.approx(31, rel=0.03), "one busy answer is not the machine"
    few = AnswerPlainSteps(curve)
    for _ in range(3):
        few.add(SHORT, 1 / 3)
    assert not few.busy(), "three steps are too few to tell"
    for _ in range(SETTLE_ANSWERS - 1):  # slow answer after slow answer: slower is the machine's speed now
        again = AnswerPlainSteps(curve)
        for i in range(20):
            again.add(SHORT + i, 1 / 3)
        curve.learn_answer(again)
    assert curve.tokens_per_second(SHORT) < 10


def test_drafted_steps_are_judged_against_what_their_tree_cost_at_load():
    """An answer that drafts at every step has no plain step to judge: a drafted forward is compared
    with a plain step at its context plus what its nodes added at load (each node's reading of a longer
    context at the curve's slope), so a busy computer is said and a calm long context is not."""
    curve = measured_curve()
    assert curve.spread() >= 3000
    nodes, per_node = 8, 0.002  # at load (256 tokens): 8 nodes add 16 ms to a 30 ms verify
    curve.costs_measured({0: 0.030, 4: 0.038, 8: 0.030 + nodes * per_node, 64: 0.2}, 256)
    slope = curve.line()[1]
    assert curve.verify_seconds(nodes, 256) == pytest.approx(curve.step_seconds(256) + nodes * per_node)
    assert curve.verify_seconds(nodes, LONG) == pytest.approx(
        LONG_S + nodes * per_node + nodes * slope * (LONG - 256), rel=0.03
    )
    assert curve.verify_seconds(6, SHORT) == pytest.approx(curve.step_seconds(SHORT) + 0.012)  # between sizes
    assert curve.verify_seconds(96, SHORT) == pytest.approx(
        curve.step_seconds(SHORT) + 0.17 + 32 * 0.154 / 56
    )  # past: the last stretch
    calm, busy = AnswerPlainSteps(curve), AnswerPlainSteps(curve)
    for i in range(12):
        calm.add_drafted(SHORT + 3 * i, nodes, 1.3 * (SHORT_S + nodes * per_node))
        calm.add_drafted(LONG + 3 * i, nodes, LONG_S + nodes * per_node + nodes * 0.5 * slope * LONG)
        busy.add_drafted(SHORT + 3 * i, nodes, 6 * (SHORT_S + nodes * per_node))
    assert not calm.busy() and busy.busy() and calm.count == 24
    assert calm.steps == busy.steps == 0, "a drafted step is no plain step: the curve learns nothing from it"
    unmeasured = AnswerPlainSteps(measured_curve())  # no verify costs measured (plain speed only)
    for i in range(12):
        unmeasured.add_drafted(SHORT + i, nodes, 1.0)
    assert unmeasured.count == 0 and not unmeasured.busy()


def test_contexts_too_close_to_tell_a_slope_give_a_flat_rate_never_a_rising_one():
    curve = PlainRate()
    curve.observe(100, 0.030, at=0.0)
    curve.observe(400, 0.031, at=1.0)
    assert curve.line()[1] == 0.0
    falling = PlainRate()  # noise that makes a longer context look cheaper: no negative slope
    falling.observe(100, 0.040, at=0.0)
    falling.observe(2000, 0.030, at=1.0)
    assert falling.line()[1] == 0.0 and falling.tokens_per_second(5000) == pytest.approx(1 / 0.030)
    assert PlainRate().tokens_per_second(100) is None


def test_the_words_of_a_speedup():
    assert speedup_words(1.05, 1.0) == NO_DRAFTS == "no drafts used"
    # a live answer's first steps are the model's own tokens before any draft could be tried
    assert speedup_words(1.05, 1.0, steps=1) is None and speedup_words(None, 1.0, steps=3) is None
    assert speedup_words(1.05, 1.0, steps=4) == NO_DRAFTS
    assert speedup_words(0.02, 1.8, busy=True) == BUSY == "the computer was busy"
    assert speedup_words(1.41, 2.1) == "1.41x plain"
    assert speedup_words(None, 2.1) is None
    line = answer_stats({"tokens": 64, "tau": 1.8, "speedup_estimate": 0.02, "busy": True})
    assert "the computer was busy" in line and "0.02x" not in line


def test_the_answer_line_shows_the_writing_rate_and_the_first_token_apart():
    stats = {
        "tokens": 41,
        "tau": 1.0,
        "tokens_per_second": 10.0,  # every token over the whole time: not what is shown
        "decode_tokens_per_second": 20.0,
        "time_to_first_token_ms": 2000.0,
        "elapsed_s": 4.1,
    }
    line = answer_stats(stats)
    assert "20.0 tokens/s" in line and "10.0 tokens/s" not in line and "first token 2000 ms" in line
    old = {k: v for k, v in stats.items() if k != "decode_tokens_per_second"}  # stored before it was kept
    assert writing_rate(old) == pytest.approx(40 / 2.1)
    assert writing_rate({**stats, "decode_tokens_per_second": None}) is None, "one step: no writing rate"


def test_a_slow_drafter_that_sits_out_is_named_with_its_cost_and_what_it_saves():
    gates = {
        "model": {"seconds": 0.041, "tokens": 0.2, "idle": 0, "retry": 6},  # 41 ms for 0.2 tokens a step
        "context": {"seconds": 0.0001, "tokens": 0.1, "idle": 0, "retry": 6},  # cheap: always runs
    }
    note = unused_drafters_note(gates, ["context", "model"], step_cost=0.060)
    assert note == "draft model not used: it costs 41 ms a step against 12 ms saved"
    gates["model"]["tokens"] = 1.0  # a token a step saves 60 ms: it pays
    assert unused_drafters_note(gates, ["context", "model"], step_cost=0.060) is None


def test_the_policy_says_drafting_is_paused_while_it_keeps_every_step_plain_for_cost():
    from test_engine_budget import CPU_LIKE, chain, scattered

    from draftscope.engine.policy import PAUSED_AFTER, PAUSED_NOTE, StepPolicy

    policy = StepPolicy(dict(CPU_LIKE))
    notes = []
    for _ in range(PAUSED_AFTER):
        assert len(policy.trim(scattered(32))) <= 1  # no draft pays (one node now and then: exploring)
        notes.append(policy.drafting_note())
    assert notes[-1] == PAUSED_NOTE and notes[:-1] == [None] * (PAUSED_AFTER - 1)
    assert len(policy.trim(chain(8))) and policy.drafting_note() is None, "a tree verified: drafting resumed"


def test_a_plain_step_within_a_quarter_of_the_context_or_512_tokens_tells_the_speed_there():
    """Answers run until the model stops: one ending 400 tokens past the measurement, or at 4,000
    with plain steps of its own at 3,600, needs no new measurement (it holds up the next Send)."""
    curve = measured_curve()  # plain steps near 128 and near 3,600
    assert curve.knows(SHORT + 400) and curve.knows(4300) and curve.knows(3000)
    assert not curve.knows(1500) and not curve.knows(6000)
    answer = AnswerPlainSteps(curve)
    for i in range(8):
        answer.add(6000 + i, LONG_S)
    curve.learn_answer(answer)  # an answer's own plain steps teach the curve that length
    assert curve.knows(6000)


def test_the_curve_is_read_while_another_thread_adds_steps():
    """The window asks ``knows`` while the stepper's thread learns an answer's new buckets."""
    import sys
    import threading

    interval = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)
    try:
        curve, done, errors = PlainRate(), threading.Event(), []

        def learn() -> None:
            for i in range(20000):
                curve.observe(i * 256, 0.01)
            done.set()

        writer = threading.Thread(target=learn)
        writer.start()
        try:
            while not done.is_set():
                curve.knows(-1e9)
        except RuntimeError as exc:  # "dictionary changed size during iteration"
            errors.append(exc)
        writer.join()
    finally:
        sys.setswitchinterval(interval)
    assert not errors
