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
"""

from __future__ import annotations

import secrets
from collections.abc import Sequence
from typing import NamedTuple

import numpy as np
import torch

from draftscope.rules import SEED_RANGE, SamplingParams


class SeenTokens(NamedTuple):
    """The entries the repetition penalty covers, as index pairs: token ``tokens[j]`` of row
    ``rows[j]`` (a handful a row, where a [rows, vocab] mask is mostly zeros)."""

    rows: torch.Tensor
    tokens: torch.Tensor

    def to(self, device: torch.device | str) -> SeenTokens:
        return SeenTokens(self.rows.to(device), self.tokens.to(device))


def recent_entries(rows: Sequence[Sequence[int]], window: int, vocab: int) -> SeenTokens:
    """For each row's context (the tokens before its position), those among its last ``window``:
    what the repetition penalty covers there. Ids past ``vocab`` are left out."""
    row_ids, token_ids = [], []
    for r, context in enumerate(rows):
        recent = [t for t in context[-window:] if 0 <= t < vocab]
        row_ids += [r] * len(recent)
        token_ids += recent
    return SeenTokens(torch.tensor(row_ids, dtype=torch.long), torch.tensor(token_ids, dtype=torch.long))


def recent_tokens(rows: Sequence[Sequence[int]], window: int, vocab: int) -> torch.Tensor:
    """``recent_entries`` as a [len(rows), vocab] bool mask."""
    seen = torch.zeros(len(rows), vocab, dtype=torch.bool)
    entries = recent_entries(rows, window, vocab)
    seen[entries.rows, entries.tokens] = True
    return seen


def apply_repetition_penalty(logits: torch.Tensor, seen: torch.Tensor | SeenTokens, penalty: float) -> torch.Tensor:
    """logits [n, V]; seen: a [n, V] bool mask or SeenTokens, the tokens already in each row's
    context (HF's rule). Only those entries are computed (a copy of the rows with them changed)."""
    if penalty == 1.0:
        return logits
    rows, tokens = seen if isinstance(seen, SeenTokens) else seen.nonzero(as_tuple=True)
    values = logits[rows, tokens]
    out = logits.clone()
    out[rows, tokens] = torch.where(values > 0, values / penalty, values * penalty)
    return out


def probabilities(
    logits: torch.Tensor, params: SamplingParams, seen: torch.Tensor | SeenTokens | None = None
) -> torch.Tensor:
    """Rows of logits [n, V] -> rows of sampling probabilities (float32) after processing."""
    if params.greedy:
        logits = (
            logits.float()
            if seen is None
            else apply_repetition_penalty(logits.float(), seen, params.repetition_penalty)
        )
        out = torch.zeros_like(logits)
        out.scatter_(-1, logits.argmax(-1, keepdim=True), 1.0)
        return out
    probs, ids = processed(logits, params, seen)
    return (
        probs
        if ids is None
        else torch.zeros(logits.shape, dtype=probs.dtype, device=probs.device).scatter_(-1, ids, probs)
    )


def processed(
    logits: torch.Tensor, params: SamplingParams, seen: torch.Tensor | SeenTokens | None = None
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """The processing at T > 0, over each row's candidates: (probabilities [n, m], their token ids
    [n, m], in id order); with top-k the k candidates left, so top-p, min-p and the draw sort and
    read k entries a row, not the vocabulary (a 64-node tree's 65 rows of 152k sorted whole cost
    more than its forward on a CPU). Where a row ties at its k-th (HF keeps every tied token), the
    rows come back whole (ids None): each tied row processed alone over the vocabulary, the others
    over their candidates and scattered, so a row's tokens never depend on the rows beside it (plain
    decoding reads one row, a verify many)."""
    logits = logits.float()
    if seen is not None:
        logits = apply_repetition_penalty(logits, seen, params.repetition_penalty)
    k, width = params.top_k, logits.shape[-1]
    if not k or k >= width:
        return _finish(logits / params.temperature, params), None
    top = torch.topk(logits, k + 1, dim=-1)
    # HF keeps every token tied at the k-th; tokens at -inf (a grammar's mask) have probability 0 either way
    tied = (top.values[:, k] == top.values[:, k - 1]) & torch.isfinite(top.values[:, k - 1])
    ids, order = top.indices[:, :k].sort(-1)  # id order: ties break as over the whole row
    probs = _finish(top.values[:, :k].gather(-1, order) / params.temperature, params)
    if not bool(tied.any()):
        return probs, ids
    whole = torch.zeros(logits.shape, dtype=probs.dtype, device=probs.device).scatter_(-1, ids, probs)
    for row in tied.nonzero().flatten().tolist():
        scaled = logits[row : row + 1] / params.temperature
        kth = top.values[row, k - 1] / params.temperature
        whole[row : row + 1] = _finish(scaled.masked_fill(scaled < kth, float("-inf")), params)
    return whole, None


def _finish(values: torch.Tensor, params: SamplingParams) -> torch.Tensor:
    """Top-p, then min-p, over rows of scaled logits (candidates or whole rows): their probabilities."""
    if params.top_p < 1.0:
        values = _top_p(values, params.top_p)
    if params.min_p > 0.0:
        # HF MinPLogitsWarper: drop tokens less likely than min_p times the top token (which stays).
        probs = values.softmax(-1)
        values = values.masked_fill(probs < params.min_p * probs.amax(-1, keepdim=True), float("-inf"))
    return values.softmax(-1)


def _top_p(values: torch.Tensor, top_p: float) -> torch.Tensor:
    """HF TopPLogitsWarper: drop the low tail whose cumulative mass is <= 1 - top_p, keep >= 1 token.
    A stable sort: tokens tied at the cut go lowest id first, over candidates or whole rows alike."""
    sorted_values, order = torch.sort(values, descending=False, dim=-1, stable=True)
    cumulative = sorted_values.softmax(-1).cumsum(-1)
    remove_sorted = cumulative <= (1 - top_p)
    remove_sorted[..., -1:] = False
    remove = remove_sorted.scatter(-1, order, remove_sorted)
    return values.masked_fill(remove, float("-inf"))


def next_tokens(
    logits: torch.Tensor,
    params: SamplingParams,
    positions: Sequence[int],
    noise: PositionNoise | None,
    seen: torch.Tensor | SeenTokens | None = None,
    best: torch.Tensor | None = None,
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
            logits = apply_repetition_penalty(logits.float(), seen, params.repetition_penalty)
        return logits.argmax(-1).tolist()
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
        self._cache: dict[int, torch.Tensor] = {}

    def at(self, position: int) -> torch.Tensor:
        noise = self._cache.get(position)
        if noise is None:
            rng = np.random.default_rng([self.seed, int(position)])
            # G = -log E with E ~ Exp(1) is Gumbel(0, 1); E is kept off 0 (an infinite G would
            # turn a zero-probability token's -inf score into NaN).
            e = rng.standard_exponential(self.vocab, dtype=np.float32)
            noise = torch.from_numpy(-np.log(np.maximum(e, np.float32(1e-30))))
            if len(self._cache) >= self.KEEP:
                self._cache.pop(min(self._cache))
            self._cache[position] = noise
        return noise


def fit_vocab(probs: torch.Tensor, size: int) -> torch.Tensor:
    """Rows of a distribution over another vocabulary size (a draft model padded differently):
    ids the other model lacks get probability 0 (they can never be chosen)."""
    width = probs.shape[-1]
    if width == size:
        return probs
    if width > size:
        return probs[..., :size]
    return torch.nn.functional.pad(probs, (0, size - width))


def choose(
    probs: torch.Tensor, positions: Sequence[int], noise: PositionNoise | None, ids: torch.Tensor | None = None
) -> list[int]:
    """The token of each row of ``probs`` [n, V], row r being the distribution at absolute
    position ``positions[r]``: the argmax when ``noise`` is None (greedy), else the Gumbel-max
    sample with the position's noise (rows over a smaller vocabulary than the noise's are fine).
    ``ids`` [n, m]: ``probs`` covers those tokens only (every other token has probability 0)."""
    if ids is None:
        if noise is None:
            return probs.argmax(-1).tolist()
        probs = fit_vocab(probs.float(), noise.vocab)
        return (probs.log() + _noise_rows(noise, positions, probs.device)).argmax(-1).tolist()
    if noise is None:
        return ids.gather(-1, probs.argmax(-1, keepdim=True)).squeeze(-1).tolist()
    # each row's noise at its candidates only (a deep chain's rows whole would be rows x vocab floats)
    at = ids.clamp(max=noise.vocab - 1).cpu()
    g = torch.stack([noise.at(p)[at[r]] for r, p in enumerate(positions)]).to(probs.device)
    scores = probs.float().log() + g
    scores = scores.masked_fill(ids >= noise.vocab, float("-inf"))  # a token the noise's vocabulary lacks
    return ids.gather(-1, scores.argmax(-1, keepdim=True)).squeeze(-1).tolist()


def _noise_rows(noise: PositionNoise, positions: Sequence[int], device: torch.device | str) -> torch.Tensor:
    """[len(positions), noise.vocab]: each row's position's noise. It goes to the rows' device once
    per distinct position (a tree's rows share a few depths), rather than every row's distribution
    to the host: on a GPU a 64-node tree's rows are 65 x vocab floats, its noise depth + 1 rows."""
    distinct = sorted(set(positions))
    row_of = {p: i for i, p in enumerate(distinct)}
    g = torch.stack([noise.at(p) for p in distinct]).to(device)
    return g[torch.tensor([row_of[p] for p in positions], device=device)]
