"""The one sampling rule on NumPy rows (llama.cpp's, no torch) and on torch rows (the torch backends')
gives the same distributions and the same tokens for the same logits, parameters and positions:
greedy, temperature, top-k with ties at the k-th, top-p (ties at the cut leave lowest id first),
min-p, the repetition penalty, rows masked by a grammar, and the logprobs said with an answer. On a
CUDA card the rule keeps torch rows on the device. A NumPy top-p with an unstable sort is caught."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from draftscope.engine import arrays
from draftscope.engine.grammar import masked
from draftscope.engine.logprobs import said_logprobs
from draftscope.engine.sampling import (
    PositionNoise,
    SamplingParams,
    choose,
    next_tokens,
    probabilities,
    recent_entries,
    recent_tokens,
)

VOCAB = 2000
ROWS = 65  # a 64-node tree's rows

CASES = {
    "greedy": SamplingParams(),
    "greedy-penalty": SamplingParams(repetition_penalty=1.3),
    "t1": SamplingParams(temperature=1.0),
    "defaults": SamplingParams(temperature=0.8, top_k=40, top_p=0.95, min_p=0.05, repetition_penalty=1.1),
    "top-k": SamplingParams(temperature=1.3, top_k=5),
    "top-p": SamplingParams(temperature=0.7, top_p=0.8),
    "min-p": SamplingParams(temperature=0.5, min_p=0.1),
    "penalty-below-1": SamplingParams(temperature=1.0, top_p=0.9, repetition_penalty=0.8),
}


def logits_and_contexts(seed: int, *, ties: bool) -> tuple[np.ndarray, list[list[int]]]:
    """Random float32 rows; with ``ties``, whole numbers (many tokens tie at the k-th and at the
    top-p cut). The likeliest tokens are often in the context: the penalty matters."""
    rng = np.random.default_rng(seed)
    logits = (rng.standard_normal((ROWS, VOCAB)) * 3).astype(np.float32)
    if ties:
        logits = np.round(logits)
    contexts = [rng.integers(0, VOCAB, 64).tolist() for _ in range(ROWS)]
    for r in range(ROWS):
        contexts[r][:5] = np.argsort(-logits[r], kind="stable")[:5].tolist()
    return logits, contexts


def both(params: SamplingParams, logits: np.ndarray, contexts, noise, positions):
    """(NumPy's, torch's) distributions and tokens, the penalty given as entries and as masks."""
    out = []
    for rows in (logits, torch.from_numpy(logits.copy())):
        mask = recent_tokens(contexts, params.repetition_window, VOCAB, like=rows)
        entries = recent_entries(contexts, params.repetition_window, VOCAB)
        probs = probabilities(rows, params, mask)
        tokens = next_tokens(rows, params, positions, None if params.greedy else noise, entries)
        assert tokens == next_tokens(rows, params, positions, None if params.greedy else noise, mask)
        out.append((arrays.to_numpy(probs), tokens, type(probs)))
    return out


@pytest.mark.parametrize("ties", [False, True], ids=["distinct", "ties"])
@pytest.mark.parametrize("name", list(CASES))
def test_numpy_and_torch_rows_give_the_same_distributions_and_tokens(name, ties):
    params = CASES[name]
    noise = PositionNoise(11, VOCAB)
    for seed in range(3):
        logits, contexts = logits_and_contexts(seed, ties=ties)
        positions = [500 + r // 4 for r in range(ROWS)]  # rows share depths, as a tree's do
        (np_probs, np_tokens, np_kind), (t_probs, t_tokens, t_kind) = both(params, logits, contexts, noise, positions)
        assert np_kind is np.ndarray and t_kind is torch.Tensor, "each kind stays its own"
        assert np_probs.dtype == np.float32
        assert np.allclose(np_probs, t_probs, atol=1e-6), float(np.abs(np_probs - t_probs).max())
        assert np.array_equal(np_probs > 0, t_probs > 0), "the same tokens kept"
        assert np_tokens == t_tokens


def test_a_tie_at_the_kth_keeps_every_tied_token_on_numpy_rows():
    params = SamplingParams(temperature=1.0, top_k=3)
    logits = np.full((1, 10), -5.0, np.float32)
    logits[0, :5] = [4.0, 3.0, 2.0, 2.0, 2.0]  # the 3rd best ties with two more
    probs = probabilities(logits, params)
    assert int((probs > 0).sum()) == 5
    assert np.allclose(probs, probabilities(torch.from_numpy(logits), params).numpy())
    noise = PositionNoise(3, 10)
    for p in range(200):
        assert next_tokens(logits, params, [p], noise) == next_tokens(torch.from_numpy(logits), params, [p], noise)


@pytest.mark.parametrize("temperature", [0.3, 0.7, 1.3])
def test_a_tie_at_the_kth_keeps_every_tied_token_at_any_temperature(temperature):
    """The k-th is compared with its row scaled the same way: a k-th divided apart (NumPy 1 divides a
    float32 scalar in float64) rounds above its own tied entries in some rows and drops them all."""
    params = SamplingParams(temperature=temperature, top_k=4)
    rng = np.random.default_rng(11)
    for v in rng.uniform(-20, 20, 300).astype(np.float32):
        logits = np.full((1, 16), -30.0, np.float32)
        logits[0, :6] = [v + 5, v + 5, v + 5, v, v, v]  # three above the k-th, which ties with two more
        assert int((probabilities(logits, params) > 0).sum()) == 6, v


def test_choose_over_candidates_and_whole_rows_agrees_across_kinds():
    """The Gumbel-max draw over top-k's candidates (ids given) and over whole rows, rows of another
    vocabulary size padded: the same tokens from NumPy and torch."""
    rng = np.random.default_rng(4)
    probs = rng.dirichlet(np.ones(12), size=6).astype(np.float32)
    ids = np.sort(rng.permuted(np.tile(np.arange(20), (6, 1)), axis=1)[:, :12], axis=1)
    noise = PositionNoise(5, 16)  # ids 16..19 are not in the noise's vocabulary: never chosen
    for positions in ([3, 3, 4, 4, 5, 5], [9, 7, 9, 8, 7, 9]):
        got = choose(probs, positions, noise, ids)
        assert got == choose(torch.from_numpy(probs), positions, noise, torch.from_numpy(ids))
        assert all(t < 16 for t in got)
        assert choose(probs, positions, noise) == choose(torch.from_numpy(probs), positions, noise)


def test_grammar_masks_and_logprobs_agree_across_kinds():
    logits, _ = logits_and_contexts(7, ties=False)
    rng = np.random.default_rng(1)
    masks = rng.integers(0, 2**32, (ROWS, (VOCAB + 31) // 32), dtype=np.uint64).astype(np.uint32)
    cut = masked(logits, masks)
    assert isinstance(cut, np.ndarray) and np.array_equal(cut, masked(torch.from_numpy(logits), masks).numpy())
    assert np.isinf(cut).any() and np.isfinite(cut).any()
    path, tokens = [0, 3, 7], [5, 17, 400, 3]
    a = said_logprobs(logits, path, tokens, set(), 5)
    b = said_logprobs(torch.from_numpy(logits), path, tokens, set(), 5)
    assert [x.token for x in a] == [x.token for x in b]
    assert [x.logprob for x in a] == pytest.approx([x.logprob for x in b], abs=1e-5)
    assert [[t for t, _ in x.top] for x in a] == [[t for t, _ in x.top] for x in b]


def test_the_comparison_catches_a_numpy_top_p_that_breaks_ties_by_the_highest_id(monkeypatch):
    """The check can fail: a NumPy sort that puts tied tokens highest id first moves the top-p cut."""
    stable = arrays.sort_stable

    def unstable(x):
        if arrays.is_torch(x):
            return stable(x)
        order = np.argsort(x[..., ::-1], axis=-1, kind="stable")
        order = x.shape[-1] - 1 - order  # among equals, the highest index first
        return np.take_along_axis(x, order, -1), order

    monkeypatch.setattr(arrays, "sort_stable", unstable)
    params = SamplingParams(temperature=1.0, top_p=0.8)
    logits, contexts = logits_and_contexts(0, ties=True)
    (np_probs, _, _), (t_probs, _, _) = both(params, logits, contexts, PositionNoise(1, VOCAB), list(range(ROWS)))
    assert not np.array_equal(np_probs > 0, t_probs > 0)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA card here")
def test_on_a_cuda_card_rows_stay_on_the_device_and_choose_what_the_cpu_chooses():
    params = CASES["defaults"]
    logits, contexts = logits_and_contexts(2, ties=False)
    noise, positions = PositionNoise(11, VOCAB), [500 + r // 4 for r in range(ROWS)]
    rows = torch.from_numpy(logits).cuda()
    probs = probabilities(rows, params, recent_tokens(contexts, params.repetition_window, VOCAB, like=rows))
    assert probs.device.type == "cuda"
    entries = recent_entries(contexts, params.repetition_window, VOCAB)
    assert next_tokens(rows, params, positions, noise, entries) == next_tokens(
        logits, params, positions, noise, entries
    )
