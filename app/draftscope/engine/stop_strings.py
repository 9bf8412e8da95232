"""Stop strings in an answer's text: where the first one begins, and the text and a step's pieces cut
before it, so no face ever shows a stop string or anything after it."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np


def stop_at(text: str, stops: Sequence[str], start: int) -> int | None:
    """Where the first stop string in ``text`` begins, searched from ``start`` (all the new text:
    one token may carry a whole line of indentation); None when none is there."""
    found = [at for at in (text.find(s, start) for s in stops) if at >= 0]
    return min(found, default=None)


def cut_before_stop(text: str, stops: Sequence[str]) -> str:
    """``text`` up to the first stop string in it (all of it when none is there)."""
    return text[: min((text.find(s) for s in stops if s in text), default=len(text))]


def cut_pieces(pieces: list[str], room: int) -> list[str]:
    """The step's pieces cut after ``room`` characters (the text before a stop string): the stream
    never says the stop or anything after it."""
    ends = np.cumsum([0] + [len(p) for p in pieces])
    return [p[: max(0, room - int(at))] for p, at in zip(pieces, ends)]
