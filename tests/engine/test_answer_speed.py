"""An answer's speed through the engine, on a tiny model whose steps are slowed in proportion to the
context (as attention makes them on a real model): the speedup compares with plain decoding at the
answer's context, a busy computer is said, not shown as a speedup, and the policy's decision that
drafts do not pay is named."""

import time

import pytest
from engine_fixtures import IdTokenizer, tiny_llama

from draftscope.core.session import answer_record
from draftscope.core.words import answer_stats
from draftscope.drafters import ContextDrafter
from draftscope.engine.engine import SLOPE_CONTEXT, SLOPE_SECONDS, Engine, GenerationRequest
from draftscope.engine.events import StepEvent
from draftscope.engine.plain_rate import MIN_BUSY_STEPS, MIN_SPREAD
from draftscope.engine.policy import PAUSED_AFTER, PAUSED_NOTE

pytestmark = pytest.mark.usefixtures("one_thread")

VOCAB = 300
A_S, B_S = 0.020, 4e-5  # a plain step: 20 ms + 40 µs a cached token (30 ms at 260 tokens, 80 ms at 1,500)


class SlowedSteps:
    """The backend's forwards, each after a sleep of ``times * (A_S + B_S * context)``."""

    def __init__(self, backend) -> None:
        self.backend, self.forward, self.times = backend, backend.decode_many, 1.0
        backend.decode_many = self

    def __call__(self, work):
        time.sleep(self.times * (A_S + B_S * len(self.backend.held_tokens(0))))
        return self.forward(work)


@pytest.fixture
def slowed():
    engine = Engine(tiny_llama(VOCAB, seed=2, max_positions=2048), IdTokenizer(), name="tiny")
    steps = SlowedSteps(engine.backend)
    engine.measure()  # the verify costs and the plain speed, on a short context (~260 tokens)
    return engine, steps


def answer(engine, prompt, n=24, **fields):
    *steps, final = engine.generate(GenerationRequest(prompt_ids=prompt, max_new_tokens=n, **fields))
    return [s for s in steps if isinstance(s, StepEvent)], final


def long_prompt(n, repeat=False):
    return [5 + (i % 7 if repeat else (i * 37) % 250) for i in range(n)]


def test_the_speedup_at_a_long_context_compares_with_plain_decoding_there(slowed):
    engine, _ = slowed
    short_rate = engine.baseline_tokens_per_second
    _, plain = answer(engine, long_prompt(1500))  # plain decoding at 1,500 tokens: about half as fast
    assert not plain.stats.busy, "slower at a longer context than any measured is the context, not a busy computer"
    assert plain.stats.plain_tokens_per_second < 0.75 * short_rate
    assert plain.stats.speedup_estimate == pytest.approx(1.0, abs=0.2), "plain decoding is 1x plain, not ~0.5x"
    # drafts at 1,400 tokens, every step a tree (no plain step of its own): plain's rate there from the curve
    steps, drafted = answer(engine, long_prompt(1400, repeat=True), drafters=[ContextDrafter()], budget=8)
    assert drafted.stats.tau > 1.2, "drafts were accepted"
    assert drafted.stats.plain_tokens_per_second < 0.75 * short_rate
    context = 1400 + drafted.stats.tokens / 2
    assert drafted.stats.plain_tokens_per_second == pytest.approx(engine.plain_rate.tokens_per_second(context), rel=0.1)
    assert drafted.stats.speedup_estimate == pytest.approx(
        drafted.stats.decode_tokens_per_second / drafted.stats.plain_tokens_per_second
    )


def test_nothing_accepted_says_no_drafts_used(slowed):
    engine, _ = slowed
    _, final = answer(engine, long_prompt(200))  # every token the model's own
    assert final.stats.tau == 1.0 and final.stats.speedup_estimate
    line = answer_stats(answer_record(final, engine.baseline_tokens_per_second)[0])
    assert "no drafts used" in line and "x plain" not in line


def test_the_first_long_answer_drafting_every_step_compares_with_plain_decoding_there(slowed):
    """No plain answer before it and too few plain steps of its own: plain decoding's rate at 1,400 tokens
    comes from the measurement at load, which times plain steps at a longer context too."""
    engine, _ = slowed
    steps, drafted = answer(engine, long_prompt(1400, repeat=True), drafters=[ContextDrafter()], budget=8)
    assert sum(s.proposed == 0 for s in steps[1:]) < MIN_BUSY_STEPS and drafted.stats.tau > 1.5, "drafts at each step"
    context = 1400 + drafted.stats.tokens / 2
    truth = drafted.stats.decode_tokens_per_second * (A_S + B_S * context)  # the forwards' own time is ~1 ms
    assert drafted.stats.speedup_estimate == pytest.approx(truth, rel=0.2), "the speedup over plain at 1,400 tokens"
    assert not drafted.stats.busy
    slope = engine.plain_rate.line()[1]  # measured at load, at two contexts
    assert slope == pytest.approx(B_S, rel=0.35), "plain steps at a longer context showed what it costs"


def test_a_busy_computer_is_said_and_not_learned(slowed):
    """Drafts at (nearly) every step, too few plain steps to judge: each drafted forward is judged against
    what its tree cost at load, so an answer six times slower says the computer was busy, not 0.4x plain."""
    engine, steps = slowed
    rate_before = engine.plain_rate.tokens_per_second(300)
    steps.times = 6.0  # another program has the CPU: every step six times slower
    events, final = answer(engine, long_prompt(250, repeat=True), drafters=[ContextDrafter()], budget=8)
    plain_steps = sum(s.proposed == 0 for s in events[1:])
    assert plain_steps < MIN_BUSY_STEPS and final.stats.tau > 1.5, "too few plain steps to tell: the drafted ones tell"
    assert final.stats.busy and events[-1].busy
    line = answer_stats(answer_record(final, engine.baseline_tokens_per_second)[0])
    assert "the computer was busy" in line and "x plain" not in line
    assert final.stats.plain_tokens_per_second == pytest.approx(rate_before, rel=0.25), "compared with what it was"
    assert engine.plain_rate.tokens_per_second(300) == pytest.approx(rate_before, rel=0.01)
    _, plain = answer(engine, long_prompt(250))  # plain decoding, busy all the same
    assert plain.stats.busy
    steps.times = 1.0
    _, calm = answer(engine, long_prompt(250, repeat=True), drafters=[ContextDrafter()], budget=8)
    assert not calm.stats.busy and calm.stats.tau > 1.5


def test_drafting_paused_by_the_policy_is_said_in_the_steps_and_the_answer():
    """A backend whose measured verify cost grows a whole step a node: no draft can pay, the policy
    trims every tree to nothing, and the answer says why it drafted nothing."""
    engine = Engine(tiny_llama(VOCAB, seed=2), IdTokenizer(), name="tiny")
    engine.verify_costs = {n: 0.05 * (1 + n) for n in (0, 1, 2, 3, 4, 8, 16, 32, 64)}
    steps, final = answer(engine, long_prompt(60, repeat=True), n=40, drafters=[ContextDrafter()])
    assert all(s.proposed == 0 for s in steps), "every tree trimmed to nothing"
    assert [s.drafting for s in steps[: PAUSED_AFTER - 1]] == [None] * (PAUSED_AFTER - 1)
    assert steps[-1].drafting == PAUSED_NOTE and final.stats.drafting == PAUSED_NOTE
    assert PAUSED_NOTE.startswith("drafting paused: ")
    line = answer_stats(answer_record(final, None)[0])
    assert "no drafts used" in line


def test_a_longer_context_is_timed_only_while_the_curve_has_no_slope():
    """The load's measurement reads on to half the window (at most SLOPE_CONTEXT tokens, and what the verify
    costs say SLOPE_SECONDS read), once: measuring again, or a window or a time too short to span
    MIN_SPREAD tokens, reads no long prompt."""
    engine = Engine(tiny_llama(VOCAB, seed=2, max_positions=2048), IdTokenizer(), name="tiny")
    read_on = engine.slope_prompt(160)
    assert len(read_on) == min(1024, SLOPE_CONTEXT) - 160 and all(0 <= t < VOCAB for t in read_on)
    engine.plain_rate.costs_measured({0: 0.030, 64: 0.130}, 256)  # reads 500 tokens a second: 864 in 1.7 s
    assert len(engine.slope_prompt(160)) == 1024 - 160
    engine.plain_rate.costs_measured({0: 0.050, 64: 2.0}, 256)  # 32 tokens a second: 512 would take 16 s
    assert SLOPE_SECONDS * 65 / 2.0 < MIN_SPREAD and engine.slope_prompt(160) == [], "the load kept short"
    engine.plain_rate.costs_measured({0: 0.050, 64: 1.0}, 256)  # 65 a second: what SLOPE_SECONDS read
    assert len(engine.slope_prompt(160)) == int(SLOPE_SECONDS * 65) >= MIN_SPREAD
    engine.plain_rate.observe(150, 0.030)
    engine.plain_rate.observe(1030, 0.065)
    assert engine.slope_prompt(160) == [], "a slope known: measuring again keeps to the conversation"
    small = Engine(tiny_llama(VOCAB, seed=2, max_positions=1024), IdTokenizer(), name="tiny")
    assert small.slope_prompt(160) == [], "512 tokens at most: too close to 160 to tell a slope"
