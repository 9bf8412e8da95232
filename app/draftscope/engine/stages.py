"""The named stages of a slow job (opening a model: checking llama.cpp, loading weights, measuring
verify costs), each with how far it is and the time left where that can be estimated, so a loading
screen never says one thing for minutes. A job's ``progress`` callback hears :class:`Stage`
objects; ``str(stage)`` reads as a line for a terminal."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TypeAlias

CHECKING_LLAMA = "checking llama.cpp on this CPU"
LOADING_WEIGHTS = "loading weights"
MEASURING_COSTS = "measuring verify costs"
MEASURING_SPEED = "measuring plain speed"
LOADING_DRAFT_MODEL = "loading the draft model"


@dataclass(frozen=True)
class Stage:
    name: str  # what runs now, in a few words ("loading weights")
    fraction: float | None = None  # done, in [0, 1]; None: not known (a busy indicator)
    seconds_left: float | None = None  # estimated from the pace so far; None: not known yet

    def __str__(self) -> str:
        parts = [self.name]
        if self.fraction is not None:
            parts.append(f"{self.fraction:.0%}")
        if self.seconds_left is not None and self.seconds_left >= 0.5:
            parts.append(f"about {time_left(self.seconds_left)} left")
        return " · ".join(parts)


# A slow job's ``progress`` callback: it hears each Stage (a loader's report may still be a line of text:
# as_stage reads either)
Progress: TypeAlias = Callable[[Stage | str], None]


def time_left(seconds: float) -> str:
    """``seconds`` in words: "12 s", "2 min 40 s"."""
    seconds = max(0, round(seconds))
    if seconds < 60:
        return f"{seconds} s"
    return f"{seconds // 60} min {seconds % 60} s" if seconds % 60 else f"{seconds // 60} min"


def as_stage(report: object) -> Stage:
    """A progress report as a Stage (older reporters say a line of text: a stage of unknown extent)."""
    return report if isinstance(report, Stage) else Stage(str(report).rstrip(" .…"))


class StageClock:
    """Reports one stage's fractions to ``progress`` with the time left, extrapolated from the
    pace since the stage began (linear: the measurements' steps cost alike, round after round)."""

    def __init__(self, name: str, progress: Progress | None) -> None:
        self.name, self.progress = name, progress
        self.began = time.monotonic()
        self.done = 0.0
        if progress is not None:
            progress(Stage(name, 0.0))

    def __call__(self, fraction: float) -> None:
        self.done = max(self.done, min(1.0, max(0.0, fraction)))  # never backwards, never past the end
        if self.progress is None:
            return
        spent = time.monotonic() - self.began
        left = spent * (1 - self.done) / self.done if self.done > 0 else None
        self.progress(Stage(self.name, self.done, left))


def new_stages_only(say: Callable[[str], None]) -> Callable[[object], None]:
    """A progress callback for a terminal: ``say`` hears each stage's name once, when it begins
    (its fractions would be a line each)."""
    last: list[str] = []

    def hear(report: object) -> None:
        stage = as_stage(report)
        if not last or last[-1] != stage.name:
            last.append(stage.name)
            say(f"{stage.name} ...")

    return hear
