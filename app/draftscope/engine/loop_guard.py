"""Telling when an answer has fallen into a loop: its last tokens are one unit said again and again,
back to back ("a lone owl, a lone owl, ..."; the same ``assert`` line forty times).

The guard only says where to stop; it never changes a token, so an answer it stops is plain
decoding's answer up to that token. It watches the tokens as they are written: for every unit
length p up to MAX_UNIT it keeps how many of the last tokens equal the token p before them (a run),
so each new token costs one comparison per unit length, whatever the answer's length.

A repetition is a loop when it is long enough that real text does not write it: the repeated tail
spans at least MIN_SPAN tokens and holds the unit at least MIN_REPEATS times. Text repeats itself
in other ways: a table's rows, a list of tests and a refrain share most tokens but not all, and a
different token ends a run; a short verbatim repeat (an 8 x 8 board of zeros, a chorus said twice)
stays under the span. A loop it stops can be continued (the window's Continue), and the setting
``stop_loops`` turns the guard off."""

from __future__ import annotations

import numpy as np

MAX_UNIT = 160  # the longest unit (in tokens) watched: a paragraph said over and over
MIN_SPAN = 256  # tokens the repetition must cover: 64 "a lone owl, ", 20 lines of the same assert
MIN_REPEATS = 3  # times a long unit must be said: a block written twice over is not yet a loop


class LoopGuard:
    """Feed it an answer's tokens one at a time (:meth:`repeats`); it says when the tail is a loop."""

    def __init__(self, *, max_unit: int = MAX_UNIT, min_span: int = MIN_SPAN, min_repeats: int = MIN_REPEATS) -> None:
        if max_unit < 1 or min_repeats < 2 or min_span < 2:
            raise ValueError("a loop needs a unit of at least one token, said at least twice")
        self.units = np.arange(1, max_unit + 1)  # the unit lengths watched
        self.recent = np.full(max_unit, -1, dtype=np.int64)  # the last max_unit tokens, a ring (-1: none yet)
        self.runs = np.zeros(max_unit, dtype=np.int64)  # runs[p - 1]: last tokens equal to the one p before
        self.count = 0  # tokens seen
        # A run r at unit p repeats the unit (r + p) / p times over r + p tokens: a loop once both are enough.
        self.enough_run = np.maximum(min_span - self.units, (min_repeats - 1) * self.units)

    def repeats(self, token: int) -> bool:
        """Take the answer's next token; True when, with it, the answer's tail is a loop."""
        size = len(self.recent)
        earlier = self.recent[(self.count - self.units) % size]  # the token p before, for every p
        same = (earlier == token) & (self.units <= self.count)
        self.runs = np.where(same, self.runs + 1, 0)
        self.recent[self.count % size] = token
        self.count += 1
        return bool((self.runs >= self.enough_run).any())
