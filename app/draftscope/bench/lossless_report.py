"""What ``draftscope bench lossless`` tells: each test's result (``Check``), the progress line on
stderr while the audit runs, and the table and verdict printed at its end. Apart from lossless.py
so that the tests in lossless.py and lossless_sampler.py share the result type without importing
each other.
"""

from __future__ import annotations

import sys
import time
from dataclasses import dataclass, field


@dataclass
class Check:
    kind: str  # "greedy", "identity", "first-tokens", "pit-uniform", "pit-pairs"
    config: str  # drafters
    temperature: float
    passed: bool
    detail: str
    p: float | None = None
    biased: bool = False
    extra: dict = field(default_factory=dict)


class Progress:
    """Units of work done, with a time-left estimate, on stderr."""

    def __init__(self, total: int, quiet: bool = False) -> None:
        self.total, self.done, self.start, self.quiet = max(total, 1), 0, time.perf_counter(), quiet

    def step(self, units: int, what: str) -> None:
        self.done += units
        if self.quiet:
            return
        spent = time.perf_counter() - self.start
        left = spent / self.done * (self.total - self.done) if self.done else 0
        print(
            f"\r[{self.done / self.total:4.0%}] {what[:60]:60s} {_clock(spent)} spent, ~{_clock(left)} left",
            end="",
            file=sys.stderr,
            flush=True,
        )

    def line(self, text: str) -> None:
        if not self.quiet:
            print("\r" + " " * 110 + "\r" + text, file=sys.stderr, flush=True)


def _clock(seconds: float) -> str:
    seconds = int(seconds)
    return f"{seconds // 60}m{seconds % 60:02d}s" if seconds >= 60 else f"{seconds}s"


def print_verdict(checks: list[Check], args) -> bool:
    """The report and the verdict printed; True when every test of the engine's verifier holds."""
    print(format_report(checks))
    real = [c for c in checks if not c.biased]
    ok = all(c.passed for c in real)
    if args.biased or args.only_biased:
        caught = [c for c in checks if c.biased and not c.passed]
        print(
            f"power: the broken noise was rejected by {len(caught)} of {sum(c.biased for c in checks)} tests "
            f"(at {args.runs} runs per first-tokens test, {args.pit_tokens} tokens per PIT test)"
        )
    rounding = any(c.kind in ("greedy", "identity") and c.extra.get("agreement", 1) < 1 for c in real)
    held = (
        "every test holds: speculation changed nothing but the speed"
        if not rounding
        else "every test holds: sampling is exact, and every divergence lies within the dtype's rounding"
    )
    if not real:
        held = "no test of the engine's own verifier was run (--only-biased)"
    print(
        "verdict: "
        + (
            held
            if ok
            else "FAILED: " + "; ".join(f"{c.kind} [{c.config}, T={c.temperature:g}]" for c in real if not c.passed)
        )
    )
    return ok


def format_report(checks: list[Check]) -> str:
    lines = ["| test | drafters | T | verifier | result | detail |", "|---|---|---|---|---|---|"]
    for c in checks:
        verdict = (
            ("holds" if c.passed else "REJECTED")
            if not c.biased
            else ("rejected (as it should)" if not c.passed else "not caught")
        )
        lines.append(
            f"| {c.kind} | {c.config} | {c.temperature:g} | {'biased' if c.biased else 'ours'} | {verdict} | "
            f"{c.detail} |"
        )
    return "\n".join(lines)
