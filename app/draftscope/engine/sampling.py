"""The one sampling rule, shared by plain decoding, tree verification and the draft model.

Logit processing: repetition penalty, temperature, top-k, top-p, min-p (Hugging Face's order and
semantics) turn logits into the distribution p_i of the token at absolute position i. The penalty
covers the last ``repetition_window`` tokens before position i (llama.cpp's repeat_last_n), the
same window whoever computes p_i: plain decoding, a tree node at its depth, the draft model.

The token is then a function of (seed, i, p_i): ``argmax_x log p_i(x) + G_i(x)``, with Gumbel
noise G_i drawn from a generator keyed by (seed, i) alone (the Gumbel-max trick). The noise of
different positions is independent, so each token is an exact sample of p_i given its prefix:
plain decoding with this noise is exact sampling. Verification is then the greedy walk on these
tokens, whatever proposed the drafts, so every drafter mix gives plain decoding's answer token for
token. Greedy decoding is temperature 0: no noise, the argmax.

SamplingParams, each field's range, default and words, is declared in rules.py (plain Python: the
settings, the command line, the server and the settings dialog read it without torch); a new field
is its line there and its filter here, in ``processed`` (``_finish``) and, for the reference the
lossless bench compares with, bench/lossless_stats.py.

The rule is written once, in engine/arrays.py's operations, and runs on the rows as the backend gives
them: NumPy's from llama.cpp (the default path loads no torch), torch's on their device from the torch
backends (a CUDA row never goes to the host whole).
"""

from __future__ import annotations

import secrets
from collections.abc import Sequence
from typing import TYPE_CHECKING, NamedTuple

import numpy as np

from draftscope.engine import arrays as A
from draftscope.rules import SEED_RANGE, SamplingParams

if TYPE_CHECKING:
    from draftscope.engine.arrays import Array


class SeenTokens(NamedTuple):
    """The entries the repetition penalty covers, as index pairs: token ``tokens[j]`` of row
    ``rows[j]`` (a handful a row, where a [rows, vocab] mask is mostly zeros). NumPy's: the penalty
    moves them to the logits' device."""

    rows: np.ndarray
    tokens: np.ndarray


def recent_entries(rows: Sequence[Sequence[int]], window: int, vocab: int) -> SeenTokens:
    """For each row's context (the tokens before its position), those among its last ``window``:
    what the repetition penalty covers there. Ids past ``vocab`` are left out."""
    row_ids, token_ids = [], []
    for r, context in enumerate(rows):
        recent = [t for t in context[-window:] if 0 <= t < vocab]
        row_ids += [r] * len(recent)
        token_ids += recent
    return SeenTokens(np.array(row_ids, dtype=np.int64), np.array(token_ids, dtype=np.int64))


def recent_tokens(rows: Sequence[Sequence[int]], window: int, vocab: int, like: Array | None = None) -> Array:
    """``recent_entries`` as a [len(rows), vocab] bool mask: NumPy's, or of ``like``'s kind and device."""
    seen = np.zeros((len(rows), vocab), dtype=bool)
    entries = recent_entries(rows, window, vocab)
    seen[entries.rows, entries.tokens] = True
    return seen if like is None else A.like(seen, like)


def apply_repetition_penalty(logits: Array, seen: Array | SeenTokens, penalty: float) -> Array:
    """logits [n, V]; seen: a [n, V] bool mask or SeenTokens, the tokens already in each row's
    context (HF's rule). Only those entries are computed (a copy of the rows with them changed)."""
    if penalty == 1.0:
        return logits
    rows, tokens = seen if isinstance(seen, SeenTokens) else A.nonzero(seen)
    rows, tokens = A.like(rows, logits), A.like(tokens, logits)
    values = logits[rows, tokens]
    out = A.copy(logits)
    out[rows, tokens] = A.where(values > 0, values / penalty, values * penalty)
    return out


def probabilities(logits: Array, params: SamplingParams, seen: Array | SeenTokens | None = None) -> Array:
    """Rows of logits [n, V] -> rows of sampling probabilities (float32) after processing."""
    if params.greedy:
        logits = A.floats(logits)
        if seen is not None:
            logits = apply_repetition_penalty(logits, seen, params.repetition_penalty)
        return A.scatter(A.zeros(logits.shape, logits), A.argmax(logits)[:, None], 1.0)
    probs, ids = processed(logits, params, seen)
    return probs if ids is None else A.scatter(A.zeros(logits.shape, probs), ids, probs)


def processed(
    logits: Array, params: SamplingParams, seen: Array | SeenTokens | None = None
) -> tuple[Array, Array | None]:
    """The processing at T > 0, over each row's candidates: (probabilities [n, m], their token ids
    [n, m], in id order); with top-k the k candidates left, so top-p, min-p and the draw sort and
    read k entries a row, not the vocabulary (a 64-node tree's 65 rows of 152k sorted whole cost
    more than its forward on a CPU). Where a row ties at its k-th (HF keeps every tied token), the
    rows come back whole (ids None): each tied row processed alone over the vocabulary, the others
    over their candidates and scattered, so a row's tokens never depend on the rows beside it (plain
    decoding reads one row, a verify many)."""
    logits = A.floats(logits)
    if seen is not None:
        logits = apply_repetition_penalty(logits, seen, params.repetition_penalty)
    k, width = params.top_k, logits.shape[-1]
    if not k or k >= width:
        return _finish(logits / params.temperature, params), None
    values, indices = A.topk(logits, k + 1)
    # HF keeps every token tied at the k-th; tokens at -inf (a grammar's mask) have probability 0 either way
    tied = (values[:, k] == values[:, k - 1]) & A.isfinite(values[:, k - 1])
    ids, order = A.sort_stable(indices[:, :k])  # id order: ties break as over the whole row
    probs = _finish(A.gather(values[:, :k], order) / params.temperature, params)
    if not bool(tied.any()):
        return probs, ids
    whole = A.scatter(A.zeros(logits.shape, probs), ids, probs)
    for row in A.nonzero(tied)[0].tolist():
        scaled = logits[row : row + 1] / params.temperature
        # the k-th's own scaled entry: a scalar divided apart would round apart (NumPy 1 divides it in float64)
        kth = scaled[0, int(indices[row, k - 1])]
        whole[row : row + 1] = _finish(A.masked_fill(scaled, scaled < kth, A.NEG_INF), params)
    return whole, None


def _finish(values: Array, params: SamplingParams) -> Array:
    """Top-p, then min-p, over rows of scaled logits (candidates or whole rows): their probabilities."""
    if params.top_p < 1.0:
        values = _top_p(values, params.top_p)
    if params.min_p > 0.0:
        # HF MinPLogitsWarper: drop tokens less likely than min_p times the top token (which stays).
        probs = A.softmax(values)
        values = A.masked_fill(values, probs < params.min_p * A.amax(probs), A.NEG_INF)
    return A.softmax(values)


def _top_p(values: Array, top_p: float) -> Array:
    """HF TopPLogitsWarper: drop the low tail whose cumulative mass is <= 1 - top_p, keep >= 1 token.
    A stable sort: tokens tied at the cut go lowest id first, over candidates or whole rows alike."""
    sorted_values, order = A.sort_stable(values)
    cumulative = A.cumsum(A.softmax(sorted_values))
    remove_sorted = cumulative <= (1 - top_p)
    remove_sorted[..., -1:] = False
    remove = A.scatter(A.copy(remove_sorted), order, remove_sorted)
    return A.masked_fill(values, remove, A.NEG_INF)


def next_tokens(
    logits: Array,
    params: SamplingParams,
    positions: Sequence[int],
    noise: PositionNoise | None,
    seen: Array | SeenTokens | None = None,
    best: Array | None = None,
) -> list[int]:
    """The token chosen at each row of ``logits`` [n, V] (row r at absolute position ``positions[r]``):
    greedy takes the argmax of the processed logits straight away (a one-hot distribution over a
    152k vocabulary cost a plain llama.cpp step a few tenths of a millisecond for the same answer);
    sampling is the Gumbel-max draw over ``processed``'s candidates. ``best``: each row's argmax where
    the step already computed it (a graphed step, on the device): greedy without a penalty reads it."""
    if params.greedy and seen is None and best is not None:
        return best.tolist()
    if params.greedy:
        if seen is not None:
            logits = apply_repetition_penalty(A.floats(logits), seen, params.repetition_penalty)
        return A.argmax(logits).tolist()
    probs, ids = processed(logits, params, seen)
    return choose(probs, positions, noise, ids)


def fresh_seed() -> int:
    """A seed for an answer that asked for none (kept with the answer, so it can be reproduced)."""
    return secrets.randbelow(int(SEED_RANGE.high) + 1)


class PositionNoise:
    """Gumbel noise over the vocabulary for each absolute position, a function of (seed,
    position) only: the same whoever asks (plain decoding, a verify pass, a draft model) and in
    whatever order. numpy's SeedSequence mixes the pair into the generator's state, so nearby
    seeds and positions give independent streams."""

    # positions kept computed: a step asks for the next few again, and a chain of the policy's
    # largest draft (256 nodes) for all of them
    KEEP = 260

    def __init__(self, seed: int, vocab: int) -> None:
        self.seed = int(seed) % 2**64  # SeedSequence wants non-negative entropy; OpenAI seeds may be negative
        self.vocab = int(vocab)
        self._cache: dict[int, np.ndarray] = {}

    def at(self, position: int) -> np.ndarray:
        """The noise at ``position``: float32 [vocab], on the host (sent to a device by the rows that read it)."""
        noise = self._cache.get(position)
        if noise is None:
            rng = np.random.default_rng([self.seed, int(position)])
            # G = -log E with E ~ Exp(1) is Gumbel(0, 1); E is kept off 0 (an infinite G would
            # turn a zero-probability token's -inf score into NaN).
            e = rng.standard_exponential(self.vocab, dtype=np.float32)
            noise = -np.log(np.maximum(e, np.float32(1e-30)))
            if len(self._cache) >= self.KEEP:
                self._cache.pop(min(self._cache))
            self._cache[position] = noise
        return noise


def fit_vocab(probs: Array, size: int) -> Array:
    """Rows of a distribution over another vocabulary size (a draft model padded differently):
    ids the other model lacks get probability 0 (they can never be chosen)."""
    width = probs.shape[-1]
    if width == size:
        return probs
    if width > size:
        return probs[..., :size]
    return A.pad_last(probs, size - width)


def choose(probs: Array, positions: Sequence[int], noise: PositionNoise | None, ids: Array | None = None) -> list[int]:
    """The token of each row of ``probs`` [n, V], row r being the distribution at absolute
    position ``positions[r]``: the argmax when ``noise`` is None (greedy), else the Gumbel-max
    sample with the position's noise (rows over a smaller vocabulary than the noise's are fine).
    ``ids`` [n, m]: ``probs`` covers those tokens only (every other token has probability 0)."""
    if ids is None:
        if noise is None:
            return A.argmax(probs).tolist()
        probs = fit_vocab(A.floats(probs), noise.vocab)
        return A.argmax(A.log(probs) + _noise_rows(noise, positions, probs)).tolist()
    if noise is None:
        return A.gather(ids, A.argmax(probs)[:, None])[:, 0].tolist()
    # each row's noise at its candidates only (a deep chain's rows whole would be rows x vocab floats)
    at = A.to_numpy(A.clamp_max(ids, noise.vocab - 1))
    g = A.like(np.stack([noise.at(p)[at[r]] for r, p in enumerate(positions)]), probs)
    scores = A.log(A.floats(probs)) + g
    scores = A.masked_fill(scores, ids >= noise.vocab, A.NEG_INF)  # a token the noise's vocabulary lacks
    return A.gather(ids, A.argmax(scores)[:, None])[:, 0].tolist()


def _noise_rows(noise: PositionNoise, positions: Sequence[int], rows: Array) -> Array:
    """[len(positions), noise.vocab]: each row's position's noise, of ``rows``' kind. It goes to the
    rows' device once per distinct position (a tree's rows share a few depths), rather than every
    row's distribution to the host: on a GPU a 64-node tree's rows are 65 x vocab floats, its noise
    depth + 1 rows."""
    distinct = sorted(set(positions))
    row_of = {p: i for i, p in enumerate(distinct)}
    g = A.like(np.stack([noise.at(p) for p in distinct]), rows)
    return g[A.like(np.array([row_of[p] for p in positions], dtype=np.int64), rows)]
