"""The processing over top-k's candidates (engine/sampling.py ``processed``) chooses the tokens the
whole-vocabulary processing chose, row for row, on random logits: the penalty computed at the seen
entries only, top-p and min-p sorted over the k candidates, ties at the k-th kept as HF keeps them."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from draftscope.engine.sampling import (
    PositionNoise,
    SamplingParams,
    SeenTokens,
    apply_repetition_penalty,
    next_tokens,
    probabilities,
    recent_entries,
    recent_tokens,
)

VOCAB = 3000


def whole_vocabulary(logits, params, seen):
    """The rule as it was: every step over [rows, vocab] (HF's processors' order and semantics)."""
    logits = logits.float()
    if seen is not None and params.repetition_penalty != 1.0:
        penalised = torch.where(logits > 0, logits / params.repetition_penalty, logits * params.repetition_penalty)
        logits = torch.where(seen, penalised, logits)
    logits = logits / params.temperature
    if params.top_k and params.top_k < logits.shape[-1]:
        kth = torch.topk(logits, params.top_k, dim=-1).values[..., -1:]
        logits = logits.masked_fill(logits < kth, float("-inf"))
    if params.top_p < 1.0:
        sorted_logits, order = torch.sort(logits, descending=False, dim=-1)
        cumulative = sorted_logits.softmax(-1).cumsum(-1)
        remove_sorted = cumulative <= (1 - params.top_p)
        remove_sorted[..., -1:] = False
        logits = logits.masked_fill(remove_sorted.scatter(-1, order, remove_sorted), float("-inf"))
    if params.min_p > 0.0:
        probs = logits.softmax(-1)
        logits = logits.masked_fill(probs < params.min_p * probs.amax(-1, keepdim=True), float("-inf"))
    return logits.softmax(-1)


def old_tokens(logits, params, positions, noise, seen):
    probs = whole_vocabulary(logits, params, seen)
    g = torch.from_numpy(np.stack([noise.at(p) for p in positions]))
    return (probs.log() + g).argmax(-1).tolist()


CASES = [
    SamplingParams(temperature=0.8, top_k=40, top_p=0.95, min_p=0.05, repetition_penalty=1.1),  # the defaults
    SamplingParams(temperature=0.7, top_k=20, top_p=0.8, repetition_penalty=1.05),  # Qwen2.5's
    SamplingParams(temperature=1.3, top_k=5),
    SamplingParams(temperature=1.0, top_p=0.9, repetition_penalty=0.8),  # no top-k: whole rows
    SamplingParams(temperature=0.5, top_k=100, min_p=0.1, repetition_penalty=1.3),
]


def rows_and_contexts(rows, seed):
    gen = torch.Generator().manual_seed(seed)
    logits = torch.randn(rows, VOCAB, generator=gen) * 3
    contexts = [torch.randint(0, VOCAB, (64,), generator=gen).tolist() for _ in range(rows)]
    for r in range(rows):  # the likeliest tokens are often the ones just written: the penalty matters
        contexts[r][:5] = torch.topk(logits[r], 5).indices.tolist()
    return logits, contexts


@pytest.mark.parametrize("params", CASES, ids=range(len(CASES)))
def test_the_candidates_choose_the_tokens_the_whole_vocabulary_chose(params):
    noise = PositionNoise(11, VOCAB)
    for seed in range(3):
        logits, contexts = rows_and_contexts(65, seed)
        positions = [500 + r for r in range(65)]
        mask = recent_tokens(contexts, params.repetition_window, VOCAB, like=logits)
        want = old_tokens(logits, params, positions, noise, mask)
        entries = recent_entries(contexts, params.repetition_window, VOCAB)
        assert next_tokens(logits, params, positions, noise, entries) == want
        assert next_tokens(logits, params, positions, noise, mask) == want
        assert torch.allclose(probabilities(logits, params, mask), whole_vocabulary(logits, params, mask), atol=1e-6)


def test_a_tie_at_the_kth_keeps_every_tied_token_as_hugging_face_does():
    params = SamplingParams(temperature=1.0, top_k=3)
    logits = torch.full((1, 10), -5.0)
    logits[0, :5] = torch.tensor([4.0, 3.0, 2.0, 2.0, 2.0])  # the 3rd best ties with two more
    probs = probabilities(logits, params)
    assert int((probs > 0).sum()) == 5 and torch.allclose(probs, whole_vocabulary(logits, params, None))
    noise = PositionNoise(3, 10)
    for position in range(200):
        assert next_tokens(logits, params, [position], noise) == old_tokens(logits, params, [position], noise, None)


def test_the_penalty_at_the_seen_entries_equals_the_whole_rows_where():
    logits, contexts = rows_and_contexts(8, 5)
    mask = recent_tokens(contexts, 64, VOCAB, like=logits)
    entries = recent_entries(contexts, 64, VOCAB)
    assert isinstance(entries, SeenTokens)
    for penalty in (1.1, 0.7):
        whole = torch.where(mask, torch.where(logits > 0, logits / penalty, logits * penalty), logits)
        assert torch.equal(apply_repetition_penalty(logits, entries, penalty), whole)
        assert torch.equal(apply_repetition_penalty(logits, mask, penalty), whole)
    assert torch.equal(logits, rows_and_contexts(8, 5)[0]), "the caller's logits are left as they were"


def test_the_check_fails_where_ties_at_the_kth_are_cut_to_k(monkeypatch):
    """The comparison can fail: a top-k that keeps exactly k tokens on a tie is caught."""
    import draftscope.engine.sampling as sampling

    def strict_top_k(logits, params, seen=None):
        top = torch.topk(logits.float(), params.top_k, dim=-1)
        ids, order = top.indices.sort(-1)
        return sampling._finish(top.values.gather(-1, order) / params.temperature, params), ids

    monkeypatch.setattr(sampling, "processed", strict_top_k)
    params = SamplingParams(temperature=1.0, top_k=3)
    logits = torch.full((1, 10), -5.0)
    logits[0, :5] = torch.tensor([4.0, 3.0, 2.0, 2.0, 2.0])
    noise = PositionNoise(3, 10)
    differ = sum(
        next_tokens(logits, params, [p], noise) != old_tokens(logits, params, [p], noise, None) for p in range(200)
    )
    assert differ > 0


def test_a_rows_tokens_do_not_depend_on_the_rows_beside_it():
    """Plain decoding reads one row, a verify many: a row that does not tie at its k-th gets the same
    token beside rows that do (those go over the whole vocabulary), and tokens tied at the top-p cut
    leave by id whichever way the row went."""
    params = SamplingParams(temperature=1.0, top_k=4, top_p=0.975)
    cut = torch.full((1, 12), -9.0)
    cut[0, [0, 1, 2, 7]] = torch.tensor([5.0, 3.0, 1.0, 1.0])  # ids 2 and 7 straddle the cut
    tie = torch.full((1, 12), -9.0)
    tie[0, [3, 4, 5, 6, 8]] = torch.tensor([4.0, 2.0, 1.0, 1.0, 1.0])  # ties at its 4th
    rows = torch.cat([cut, tie, cut, tie])
    noise = PositionNoise(11, 12)
    for p in range(300):
        together = next_tokens(rows, params, [p] * 4, noise)
        alone = [next_tokens(rows[r : r + 1], params, [p], noise)[0] for r in range(4)]
        assert together == alone
    probs = probabilities(rows, params)
    assert probs[0, 2] == 0 and probs[0, 7] > 0, "of two tokens tied at the cut, the lower id leaves"
    assert torch.equal(probs[0], probs[2]) and torch.equal(probs[0], probabilities(cut, params)[0])
