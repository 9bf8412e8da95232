"""An answer's speed as every face shows it: one tokens/s, plain decoding's at the same context, the
speedup, whether the computer was busy, and why drafting is off.

The one tokens/s is the writing rate: the tokens after the first step over the time since the first
token (the first token's wait, prompt reading included, is shown apart as the time to first token).
Plain decoding is the same loop with empty trees, so its rate is measured the same way, step by step
(engine/plain_rate.py), at the answer's own context: the mean of the contexts its writing ran at."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from typing import Any, Protocol

from draftscope.engine.budget import DraftBudget
from draftscope.engine.drafting import SLOW_SHARE
from draftscope.engine.plain_rate import AnswerPlainSteps, PlainRate


class EngineRates(Protocol):
    """What an answer's speed reads of its engine (engine/engine.py): plain decoding's curve and
    rates, what a verify costs, and which slow drafters sit out."""

    plain_rate: PlainRate
    verify_costs: dict[int, float] | None
    drafter_gates: dict[str, dict]

    def plain_tokens_per_second(
        self, context: float | None = None, around: AnswerPlainSteps | None = None
    ) -> float | None: ...

    def speedup(
        self, decode_tps: float | None, context: float | None = None, around: AnswerPlainSteps | None = None
    ) -> float | None: ...


def unused_drafters_note(gates: dict, names: list[str], step_cost: float | None) -> str | None:
    """Why a slow drafter sits out (CompositeDrafter's gate, kept by name in ``gates``): "draft model
    not used: it costs 41 ms a step against 12 ms saved" (a token accepted saves a plain step); None
    when every drafter runs."""
    if not step_cost:
        return None
    notes = []
    for name in names:
        gate = gates.get(name) or {}
        seconds, tokens = gate.get("seconds") or 0.0, gate.get("tokens")
        if tokens is None or seconds <= SLOW_SHARE * step_cost or tokens * step_cost >= seconds:
            continue
        what = "draft model" if name == "model" else f"{name} drafter"
        notes.append(
            f"{what} not used: it costs {seconds * 1000:.0f} ms a step against {tokens * step_cost * 1000:.0f} ms saved"
        )
    return "; ".join(notes) or None


@dataclass(frozen=True)
class StepTiming:
    """What one step took: ``nodes`` drafted nodes verified, in a forward of its own (``alone``) or
    shared with other answers; ``draft_seconds`` drafting, ``forward_seconds`` its forward (sampling
    the rows aside: it grows with them, and a plain step's was measured with one)."""

    nodes: int
    alone: bool
    draft_seconds: float
    forward_seconds: float


class AnswerSpeed:
    """An answer's figures, step by step: ``step`` after each one, then ``figures``."""

    def __init__(self, engine: EngineRates, prompt_tokens: int, drafter_names: list[str]) -> None:
        self.engine, self.prompt_tokens = engine, prompt_tokens
        self.plain = AnswerPlainSteps(engine.plain_rate)
        self.gated = drafter_names if len(drafter_names) > 1 else []  # gates sit in a composite only
        self.first_token_at: float | None = None
        self.first_step_tokens = 0
        self.last_at = 0.0
        self.notes: Counter[str | None] = Counter()  # each step's drafting note (None: drafting ran)
        self.note: str | None = None

    def step(self, *, now: float, done: int, emitted: int, timing: StepTiming, budget: DraftBudget) -> None:
        """A step ended at ``now`` with ``done`` tokens written (``emitted`` by it). Where its forward
        was its own, an empty tree's time is a plain step's (its drafting aside), and a drafted one's
        forward is judged against what its tree costs (engine/plain_rate.py): busy either way."""
        if self.first_token_at is None:
            self.first_token_at, self.first_step_tokens = now, done
        elif timing.alone and timing.nodes == 0:
            self.plain.add(self.prompt_tokens + done - emitted, now - self.last_at - timing.draft_seconds)
        elif timing.alone:
            self.plain.add_drafted(self.prompt_tokens + done - emitted, timing.nodes, timing.forward_seconds)
        self.last_at = now
        step_cost = (self.engine.verify_costs or {}).get(0)
        self.note = budget.drafting_note() or unused_drafters_note(self.engine.drafter_gates, self.gated, step_cost)
        self.notes[self.note] += 1

    def writing_rate(self, now: float, done: int) -> float | None:
        """Tokens per second after the first step (None until a second step)."""
        if self.first_token_at is None or now <= self.first_token_at or done <= self.first_step_tokens:
            return None
        return (done - self.first_step_tokens) / (now - self.first_token_at)

    def answer_note(self) -> str | None:
        """The drafting note that held for at least half the steps (the answer's), else None."""
        note, count = max(self.notes.items(), key=lambda kv: kv[1], default=(None, 0))
        return note if 2 * count >= sum(self.notes.values()) else None

    def figures(self, now: float, done: int, *, final: bool = False) -> dict[str, Any]:
        """The fields StepEvent and MessageStats share: the writing rate, plain decoding's at the
        context it ran at, the speedup, whether the computer was busy, and the drafting note."""
        rate = self.writing_rate(now, done)
        context = self.prompt_tokens + (self.first_step_tokens + done) / 2
        return {
            "decode_tokens_per_second": rate,
            "plain_tokens_per_second": self.engine.plain_tokens_per_second(context, self.plain),
            "speedup_estimate": self.engine.speedup(rate, context, self.plain),
            "busy": self.plain.busy(),
            "drafting": self.answer_note() if final else self.note,
        }

    def learn(self) -> None:
        """The answer's plain steps teach the engine's curve (unless they ran busy)."""
        self.engine.plain_rate.learn_answer(self.plain)
