"""How much of a cache a new prompt keeps: the longest common prefix of the tokens held and the
prompt's, less what the first step must read again. A leaf (numpy only): the backends' held tokens
(backends/held.py), the caches on disk (kv_restore.py), the stepper and the window's read-ahead ask it."""

from __future__ import annotations

import numpy as np


def common_prefix(held: list[int], prompt: list[int]) -> int:
    """How many leading tokens ``held`` and ``prompt`` share."""
    n = min(len(held), len(prompt))
    if n == 0:
        return 0
    differ = np.flatnonzero(np.asarray(held[:n], dtype=np.int64) != np.asarray(prompt[:n], dtype=np.int64))
    return int(differ[0]) if differ.size else n


def positions_to_keep(held: list[int], prompt: list[int], *, want_hidden: bool = False) -> int:
    """Cached positions a new answer keeps: the common prefix, but never the prompt's last token
    (the first step feeds it as the root), and with ``want_hidden`` one token is always read, since
    the hidden state a drafter asks for comes from the prefill's last row."""
    keep = min(common_prefix(held, prompt), len(prompt) - 1)
    if want_hidden and keep == len(prompt) - 1:
        keep -= 1
    return max(keep, 0)
