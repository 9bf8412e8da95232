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
"""

from __future__ import annotations

import secrets
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import torch

from draftscope.rules import REPETITION_WINDOW, SEED_RANGE, problem


@dataclass(frozen=True)
class SamplingParams:
    temperature: float = 0.0  # 0 = greedy
    top_k: int = 0  # 0 = off
    top_p: float = 1.0  # 1 = off
    repetition_penalty: float = 1.0  # 1 = off
    seed: int | None = None
    min_p: float = 0.0  # 0 = off
    repetition_window: int = REPETITION_WINDOW  # tokens before each position the penalty covers

    def __post_init__(self) -> None:
        for name in ("temperature", "top_p", "top_k", "min_p", "repetition_penalty", "repetition_window"):
            if (why := problem(name, getattr(self, name))) is not None:
                raise ValueError(why)

    @property
    def greedy(self) -> bool:
        return self.temperature == 0

    @property
    def penalised(self) -> bool:
        return self.repetition_penalty != 1.0


def recent_tokens(rows: Sequence[Sequence[int]], window: int, vocab: int) -> torch.Tensor:
    """[len(rows), vocab] bool: for each row's context (the tokens before its position), those among
    its last ``window``: what the repetition penalty covers there. Ids past ``vocab`` are left out."""
    seen = torch.zeros(len(rows), vocab, dtype=torch.bool)
    row_ids, token_ids = [], []
    for r, context in enumerate(rows):
        recent = [t for t in context[-window:] if 0 <= t < vocab]
        row_ids += [r] * len(recent)
        token_ids += recent
    if token_ids:
        seen[torch.tensor(row_ids), torch.tensor(token_ids)] = True
    return seen


def apply_repetition_penalty(logits: torch.Tensor, seen: torch.Tensor, penalty: float) -> torch.Tensor:
    """logits [n, V]; seen [n, V] bool: tokens already in each row's context (HF's rule)."""
    if penalty == 1.0:
        return logits
    penalised = torch.where(logits > 0, logits / penalty, logits * penalty)
    return torch.where(seen, penalised, logits)


def probabilities(logits: torch.Tensor, params: SamplingParams, seen: torch.Tensor | None = None) -> torch.Tensor:
    """Rows of logits [n, V] -> rows of sampling probabilities (float32) after processing."""
    logits = logits.float()
    if seen is not None:
        logits = apply_repetition_penalty(logits, seen, params.repetition_penalty)
    if params.greedy:
        out = torch.zeros_like(logits)
        out.scatter_(-1, logits.argmax(-1, keepdim=True), 1.0)
        return out
    logits = logits / params.temperature
    if params.top_k and params.top_k < logits.shape[-1]:
        kth = torch.topk(logits, params.top_k, dim=-1).values[..., -1:]
        logits = logits.masked_fill(logits < kth, float("-inf"))
    if params.top_p < 1.0:
        # HF TopPLogitsWarper: drop the low tail whose cumulative mass is <= 1 - top_p, keep >= 1 token.
        sorted_logits, order = torch.sort(logits, descending=False, dim=-1)
        cumulative = sorted_logits.softmax(-1).cumsum(-1)
        remove_sorted = cumulative <= (1 - params.top_p)
        remove_sorted[..., -1:] = False
        remove = remove_sorted.scatter(-1, order, remove_sorted)
        logits = logits.masked_fill(remove, float("-inf"))
    if params.min_p > 0.0:
        # HF MinPLogitsWarper: drop tokens less likely than min_p times the top token (which stays).
        probs = logits.softmax(-1)
        logits = logits.masked_fill(probs < params.min_p * probs.amax(-1, keepdim=True), float("-inf"))
    return logits.softmax(-1)


def next_tokens(
    logits: torch.Tensor,
    params: SamplingParams,
    positions: Sequence[int],
    noise: PositionNoise | None,
    seen: torch.Tensor | None = None,
    best: torch.Tensor | None = None,
) -> list[int]:
    """The token chosen at each row of ``logits`` [n, V] (row r at absolute position ``positions[r]``):
    greedy takes the argmax of the processed logits straight away (a one-hot distribution over a
    152k vocabulary cost a plain llama.cpp step a few tenths of a millisecond for the same answer);
    sampling is the Gumbel-max draw from ``probabilities``. ``best``: each row's argmax where the
    step already computed it (a graphed step, on the device): greedy without a penalty reads it."""
    if params.greedy and seen is None and best is not None:
        return best.tolist()
    if params.greedy:
        if seen is not None:
            logits = apply_repetition_penalty(logits.float(), seen, params.repetition_penalty)
        return logits.argmax(-1).tolist()
    return choose(probabilities(logits, params, seen), positions, noise)


def fresh_seed() -> int:
    """A seed for an answer that asked for none (kept with the answer, so it can be reproduced)."""
    return secrets.randbelow(SEED_RANGE.high + 1)


class PositionNoise:
    """Gumbel noise over the vocabulary for each absolute position, a function of (seed,
    position) only: the same whoever asks (plain decoding, a verify pass, a draft model) and in
    whatever order. numpy's SeedSequence mixes the pair into the generator's state, so nearby
    seeds and positions give independent streams."""

    KEEP = 64  # positions kept computed (a step asks for the next few again)

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


def choose(probs: torch.Tensor, positions: Sequence[int], noise: PositionNoise | None) -> list[int]:
    """The token of each row of ``probs`` [n, V], row r being the distribution at absolute
    position ``positions[r]``: the argmax when ``noise`` is None (greedy), else the Gumbel-max
    sample with the position's noise (rows over a smaller vocabulary than the noise's are fine)."""
    if noise is None:
        return probs.argmax(-1).tolist()
    probs = fit_vocab(probs.float(), noise.vocab)
    # the noise goes to the rows' device, once per distinct position (a tree's rows share a few
    # depths), rather than every row's distribution to the host: on a GPU a 64-node tree's rows are
    # 65 x vocab floats, its noise depth + 1 rows
    distinct = sorted(set(positions))
    row_of = {p: i for i, p in enumerate(distinct)}
    g = torch.stack([noise.at(p) for p in distinct]).to(probs.device)
    g = g[torch.tensor([row_of[p] for p in positions], device=probs.device)]
    return (probs.log() + g).argmax(-1).tolist()
