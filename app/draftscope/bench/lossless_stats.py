"""The statistics and reference computations of ``draftscope bench lossless``: chi-square and
Kolmogorov-Smirnov tests, the target's processed distributions (transformers' own logits
processors), and the deliberately broken noise of ``--biased``."""

from __future__ import annotations

import math

# ----------------------------------------------------------------------------- statistics


def chi_square_p(stat: float, df: int) -> float:
    """Upper tail of the chi-square distribution."""
    import torch

    if df <= 0:
        return 1.0
    return float(
        torch.special.gammaincc(torch.tensor(df / 2, dtype=torch.float64), torch.tensor(stat / 2, dtype=torch.float64))
    )


def chi_square_test(observed, expected, *, min_expected: float = 5.0) -> tuple[float, int, float]:
    """(statistic, degrees of freedom, p) with cells expecting fewer than ``min_expected`` pooled."""
    import numpy as np

    observed, expected = np.asarray(observed, float), np.asarray(expected, float)
    big = expected >= min_expected
    obs = list(observed[big])
    exp = list(expected[big])
    if expected[~big].sum() > 0:
        obs.append(observed[~big].sum())
        exp.append(expected[~big].sum())
    obs, exp = np.array(obs), np.array(exp)
    if (obs[exp == 0] > 0).any():
        return math.inf, len(obs) - 1, 0.0
    keep = exp > 0
    stat = float(((obs[keep] - exp[keep]) ** 2 / exp[keep]).sum())
    df = int(keep.sum()) - 1
    return stat, df, chi_square_p(stat, df)


def ks_uniform(u) -> tuple[float, float]:
    """Kolmogorov-Smirnov statistic and p-value of samples against U(0, 1) (asymptotic)."""
    import numpy as np

    u = np.sort(np.asarray(u, float))
    n = len(u)
    if n == 0:
        return 0.0, 1.0
    i = np.arange(1, n + 1)
    d = float(max((i / n - u).max(), (u - (i - 1) / n).max()))
    x = (math.sqrt(n) + 0.12 + 0.11 / math.sqrt(n)) * d
    p = 2 * sum((-1) ** (k - 1) * math.exp(-2 * k * k * x * x) for k in range(1, 101))
    return d, min(1.0, max(0.0, p))


def pairs_test(sequences, bins: int = 5) -> tuple[float, int, float]:
    """Independence of consecutive PIT values: (u_i, u_i+1) in a bins x bins grid, chi-square."""
    import numpy as np

    grid = np.zeros((bins, bins))
    for u in sequences:
        b = np.minimum((np.asarray(u) * bins).astype(int), bins - 1)
        for a, c in zip(b[:-1], b[1:]):
            grid[a, c] += 1
    n = grid.sum()
    if n == 0:
        return 0.0, 0, 1.0
    return chi_square_test(grid.ravel(), np.full(bins * bins, n / bins / bins))


# ----------------------------------------------------------------------------- reference distributions


def hf_processors(params):
    """transformers' own logits processors for these sampling settings (the reference). Their
    repetition penalty covers every token of the ids they are given: give them ``penalty_window``'s."""
    from transformers import (
        LogitsProcessorList,
        MinPLogitsWarper,
        RepetitionPenaltyLogitsProcessor,
        TemperatureLogitsWarper,
        TopKLogitsWarper,
        TopPLogitsWarper,
    )

    procs = LogitsProcessorList()
    if params.repetition_penalty != 1.0:
        procs.append(RepetitionPenaltyLogitsProcessor(params.repetition_penalty))
    if params.temperature not in (0.0, 1.0):  # 0: greedy, the argmax of what the penalty leaves
        procs.append(TemperatureLogitsWarper(params.temperature))
    if params.top_k:
        procs.append(TopKLogitsWarper(params.top_k))
    if params.top_p < 1.0:
        procs.append(TopPLogitsWarper(params.top_p))
    if params.min_p > 0.0:
        procs.append(MinPLogitsWarper(params.min_p))
    return procs


def penalty_window(prefix: list[int], params) -> list[int]:
    """The tokens before a position that the repetition penalty covers: the last
    ``params.repetition_window`` (the sampling rule's window, llama.cpp's repeat_last_n)."""
    return list(prefix[-params.repetition_window :])


def reference_distribution(procs, params, prefix: list[int], logits):
    """The processed next-token distribution after ``prefix`` ([n, V] from ``logits`` [n, V], every
    row after the same prefix) by ``procs`` (``hf_processors(params)``)."""
    import torch

    ids = torch.tensor([penalty_window(prefix, params)] * logits.shape[0])
    return procs(ids, logits).softmax(-1)


def logit_rows(engine, prompt: list[int], continuation: list[int]):
    """The target's raw next-token logits after ``prompt`` and after each token of ``continuation``
    ([1 + len(continuation), V], float32 on the CPU), through the engine's backend: one pass over
    the continuation as a chain, whatever runs the model."""
    import torch

    from draftscope.draft_tree import chain_tree

    with torch.inference_mode():
        engine.backend.truncate(0)  # read afresh: a kept cache was computed in other batch shapes
        engine.backend.start(prompt)
        logits = engine.backend.verify(prompt[-1], chain_tree(continuation)).logits
        return torch.as_tensor(logits).float().cpu()  # llama.cpp's rows are NumPy's: the statistics are torch's


def one_token_logits(engine, prefix: list[int]):
    """The next-token logits after ``prefix`` computed as plain decoding does: the prefix cached,
    its last token alone in the batch."""
    return logit_rows(engine, prefix, [])[0]


def reference_rows(engine, prompt: list[int], answer: list[int], params):
    """The target's processed next-token distribution before each answer token: [len(answer), V]."""
    import torch

    logits = logit_rows(engine, prompt, answer[:-1])
    procs = hf_processors(params)
    # Each row sees its own prefix (the repetition penalty its window of it).
    rows = [
        reference_distribution(procs, params, prompt + answer[:i], logits[i : i + 1])[0] for i in range(len(answer))
    ]
    return torch.stack(rows)


# ----------------------------------------------------------------------------- biased controls


def reused_noise():
    """Broken noise for the sampler's tests: the same Gumbel vector at every position (each token
    still looks like a sample of its own, but tokens are no longer independent given their prefixes)."""
    from unittest import mock

    from draftscope.engine.sampling import PositionNoise

    at = PositionNoise.at
    return mock.patch.object(PositionNoise, "at", lambda self, position: at(self, 0))


def noise_keyed_by_step():
    """Broken noise for the identity test: verify rows keyed by their depth in the step's tree
    instead of the absolute position (answers with drafts then differ from plain decoding's)."""
    from unittest import mock

    import draftscope.engine.answer as engine_mod

    return mock.patch.object(
        engine_mod, "token_positions", lambda tree, next_position: [0] + [int(d) for d in tree.depth.tolist()]
    )


# ----------------------------------------------------------------------------- the audit
