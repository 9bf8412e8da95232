"""Exactness on NumPy rows (issue 67: llama.cpp's rows are NumPy's, and the rule samples them with no
torch): a model whose float32 logits are a function of the prefix alone (engine_fixtures.NumpyModel,
the same whatever the batch, unlike llama.cpp's), so the promise is checked token for token.

- Token identity at T > 0: for many seeds, a fixed tree with siblings, the context drafter, a draft
  model on NumPy rows (another NumpyModel) and their mix, under temperature, top-k, top-p, min-p and
  the repetition penalty, the answer equals plain decoding's with the same seed. Two broken variants
  are rejected: noise keyed by the step instead of the absolute position, and a verifier that accepts
  a draft on a miss.
- The sampler is exact: the first three tokens' joint distribution over thousands of seeded runs
  matches the one transformers' processors give on the same logits (chi-square at p = 0.001), plain
  and drafted; noise reused across positions is rejected by the same test."""

from __future__ import annotations

import math
from dataclasses import replace

import numpy as np
import pytest
import torch
from engine_fixtures import FixedTree, NumpyModel

import draftscope.engine.answer as engine_mod
from draftscope.bench.lossless_stats import hf_processors
from draftscope.draft_tree import children_lists
from draftscope.drafters import ContextDrafter
from draftscope.drafters.model_drafter import ModelDrafter
from draftscope.engine.engine import Engine, GenerationRequest
from draftscope.engine.sampling import PositionNoise, SamplingParams
from draftscope.engine.verify import verify_tree

V = 8  # 8 ** 3 sequences of three tokens in the chi-square tests; a fixed tree's drafts are often right
PROMPT = [3, 5, 1, 3, 5]
ANSWER = 24
SEEDS = 20

T1 = SamplingParams(temperature=1.0)
PROCESSED = SamplingParams(temperature=0.8, top_k=6, top_p=0.95, min_p=0.05, repetition_penalty=1.3)
TOP_P = SamplingParams(temperature=0.7, top_p=0.9)


def target(vocab: int = V) -> NumpyModel:
    return NumpyModel(vocab, seed=3, sharpen=1.6, name="target")


def drafters_for(case: str):
    """A fresh set of drafters for one answer: the draft model a NumpyModel near the target (the
    target's rows plus its own noise, so most drafts, not all, are the target's)."""

    def model():
        draft = target()
        draft.last = draft.last + np.random.default_rng(9).standard_normal(draft.last.shape).astype(np.float32) * 0.3
        return ModelDrafter(draft, max_tokens=3)

    return {
        "tree": lambda: [FixedTree()],
        "context": lambda: [ContextDrafter(min_suffix=1)],
        "model": lambda: [model()],
        "tree+context+model": lambda: [FixedTree(), ContextDrafter(min_suffix=1), model()],
    }[case]


def answer(engine, params, drafters, *, budget, tokens=ANSWER):
    events = list(
        engine.generate(
            GenerationRequest(
                prompt_ids=PROMPT, max_new_tokens=tokens, sampling=params, drafters=drafters, budget=budget
            )
        )
    )
    final = events[-1]
    assert final.error is None, final.error
    return final, sum(ev.accepted for ev in events[:-1])


def identity_run(case: str, params: SamplingParams, *, seeds: int = SEEDS, budget: int = 8):
    """(seeds whose answer with drafts differs from plain decoding's, draft tokens accepted)."""
    engine = Engine(backend=target())
    make = drafters_for(case)
    differ, accepted = [], 0
    for seed in range(seeds):
        p = replace(params, seed=100 + seed)
        plain, _ = answer(engine, p, [], budget=None)
        drafted, got = answer(engine, p, make(), budget=budget)
        accepted += got
        if drafted.token_ids != plain.token_ids:
            differ.append(seed)
    return differ, accepted


CASES = [
    ("tree", T1),
    ("tree", PROCESSED),
    ("context", TOP_P),
    ("model", T1),
    ("model", PROCESSED),
    ("tree+context+model", TOP_P),
    ("tree+context+model", PROCESSED),
]


@pytest.mark.parametrize("case,params", CASES, ids=[f"{c}-{i}" for i, (c, _) in enumerate(CASES)])
def test_answers_on_numpy_rows_equal_plain_decoding_token_for_token(case, params):
    differ, accepted = identity_run(case, params)
    assert not differ, f"seeds {differ}: the answer with drafts differs from plain decoding's"
    assert accepted > SEEDS * 2, f"only {accepted} draft tokens accepted in {SEEDS} answers: the case proves little"


def test_a_draft_model_on_numpy_rows_drafting_for_itself_has_every_draft_accepted():
    """Coupled to the answer's noise, the target drafting for itself proposes what the target picks."""
    engine = Engine(backend=target())
    for seed in range(4):
        events = list(
            engine.generate(
                GenerationRequest(
                    prompt_ids=PROMPT,
                    max_new_tokens=ANSWER,
                    sampling=replace(PROCESSED, seed=seed),
                    drafters=[ModelDrafter(target(), max_tokens=4)],
                    budget=4,
                )
            )
        )
        steps = events[:-2]  # the last steps may be cut by the length
        assert all(s.accepted == s.proposed == 4 for s in steps), [(s.proposed, s.accepted) for s in steps]


def noise_keyed_by_step(tree, next_position):
    """Broken: each verify row's noise keyed by its depth in this step's tree, not its position."""
    return [0] + [int(d) for d in tree.depth.tolist()]


def accepting_on_a_miss(tree, chosen):
    """Broken: at the first node whose children all miss the target's token, the first child is
    accepted anyway and its row's token said after it."""
    path, bonus = verify_tree(tree, chosen)
    kids = children_lists(tree).get(path[-1] if path else -1, [])
    if kids:
        path = [*path, kids[0]]
        bonus = int(chosen[1 + kids[0]])
    return path, bonus


@pytest.mark.parametrize("broken", [noise_keyed_by_step, accepting_on_a_miss], ids=lambda f: f.__name__)
def test_the_identity_check_rejects_a_biased_verifier(monkeypatch, broken):
    name = "token_positions" if broken is noise_keyed_by_step else "verify_tree"
    monkeypatch.setattr(engine_mod, name, broken)
    differ, _ = identity_run("tree+context+model", T1, seeds=10)
    assert len(differ) >= 5, f"{broken.__name__} not detected (only seeds {differ} differ)"


# ----------------------------------------------------------------------------- exact sampling

TOKENS = 3
RUNS = 2000


def exact_joint(model: NumpyModel, params: SamplingParams) -> np.ndarray:
    """P(first TOKENS tokens) under plain sampling: transformers' processors on the model's rows."""
    procs = hf_processors(params)
    joint, prefixes = np.ones(1), [[]]
    for _ in range(TOKENS):
        ids = torch.tensor([PROMPT + p for p in prefixes])
        logits = torch.from_numpy(np.stack([model.row(PROMPT + p) for p in prefixes]))
        probs = procs(ids, logits).softmax(-1).double().numpy()
        joint = (joint[:, None] * probs).ravel()
        prefixes = [p + [t] for p in prefixes for t in range(V)]
    return joint


def sample_counts(params: SamplingParams, make_drafters, *, seed0: int = 1000, runs: int = RUNS):
    engine = Engine(backend=target())
    counts = np.zeros(V**TOKENS)
    for r in range(runs):
        final, _ = answer(engine, replace(params, seed=seed0 + r), make_drafters(), budget=8, tokens=TOKENS)
        a, b, c = final.token_ids
        counts[(a * V + b) * V + c] += 1
    return counts


def chi_square(counts, probs):
    """(statistic, critical value at p = 0.001); cells expecting fewer than 5 are pooled."""
    expected = probs * counts.sum()
    big = expected >= 5
    obs = np.append(counts[big], counts[~big].sum())
    exp = np.append(expected[big], expected[~big].sum())
    if exp[-1] == 0:
        obs, exp = obs[:-1], exp[:-1]
    assert (obs[exp == 0] == 0).all(), "a sequence with probability 0 was sampled"
    stat = float(((obs - exp) ** 2 / exp).sum())
    df = len(obs) - 1
    critical = df * (1 - 2 / (9 * df) + 3.09 * math.sqrt(2 / (9 * df))) ** 3  # Wilson-Hilferty, one-sided 0.001
    return stat, critical


@pytest.mark.parametrize("params", [T1, PROCESSED], ids=["t1", "processed"])
@pytest.mark.parametrize("drafted", [False, True], ids=["plain", "drafted"])
def test_seeded_sampling_on_numpy_rows_follows_the_exact_distribution(params, drafted):
    make = (lambda: [FixedTree(), ContextDrafter(min_suffix=1)]) if drafted else list
    counts = sample_counts(params, make)
    stat, critical = chi_square(counts, exact_joint(target(), params))
    assert stat <= critical, f"chi2 {stat:.1f} > {critical:.1f}: sampling on NumPy rows is not exact"


def test_the_check_rejects_noise_reused_across_positions(monkeypatch):
    at = PositionNoise.at
    monkeypatch.setattr(PositionNoise, "at", lambda self, position: at(self, 0))
    counts = sample_counts(T1, list, seed0=5000, runs=1000)
    stat, critical = chi_square(counts, exact_joint(target(), T1))
    assert stat > critical, f"noise reused across positions not detected (chi2 {stat:.1f} <= {critical:.1f})"
