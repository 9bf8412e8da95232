"""Sampling with speculation draws from exactly the distribution of plain sampling.

On a tiny model with 8 tokens, the exact joint distribution of the first two tokens is computed
from the model; thousands of seeded runs of each method are compared with it by a chi-square
test (p = 0.001). A verifier with REST's bias (accept the deterministic draft without a coin)
is caught by the same test, so the test can fail."""

import math

import numpy as np
import pytest
import torch

from draftscope.draft_tree import DraftSource, DraftTree
from draftscope.engine.drafters.model import ModelDrafter
from draftscope.engine.engine import Engine, GenerationRequest
from draftscope.engine.sampling import SamplingParams, probabilities
from engine_fixtures import IdTokenizer, tiny_llama

V = 8
PROMPT = [1, 4, 2, 6]
RUNS = 2500


class FixedTree:
    """A deterministic drafter proposing the same small tree every step."""

    name = "retrieval"
    source = DraftSource.RETRIEVAL

    def reset(self, context_ids):
        pass

    def observe(self, ids):
        pass

    def propose(self, context_ids, budget):
        return DraftTree(
            tokens=np.array([3, 5, 1, 2, 7], dtype=np.int64),
            parents=np.array([-1, -1, -1, 0, 0], dtype=np.int32),
            depth=np.array([1, 1, 1, 2, 2], dtype=np.int32),
            support=np.ones(5, np.float32),
            source=np.full(5, DraftSource.RETRIEVAL, np.int8),
        )


@pytest.fixture(scope="module")
def model():
    return tiny_llama(V, seed=3, layers=1, hidden=32, sharpen=12.0)


def exact_joint(model, params):
    with torch.no_grad():
        first = probabilities(model(torch.tensor([PROMPT])).logits[0, -1:], params)[0]
        joint = torch.zeros(V, V)
        for a in range(V):
            second = probabilities(model(torch.tensor([PROMPT + [a]])).logits[0, -1:], params)[0]
            joint[a] = first[a] * second
    return joint.numpy().ravel()


def empirical(engine, params, drafters, seed0):
    counts = np.zeros(V * V)
    for r in range(RUNS):
        p = SamplingParams(params.temperature, params.top_k, params.top_p, params.repetition_penalty, seed=seed0 + r)
        final = list(engine.generate(GenerationRequest(prompt_ids=PROMPT, max_new_tokens=2, sampling=p, drafters=drafters(),
                                                       budget=8)))[-1]
        a, b = final.token_ids[:2]
        counts[a * V + b] += 1
    return counts


def chi_square_rejects(counts, probs):
    """True when the counts are implausible under probs (p < 0.001); cells with small expected
    counts are pooled."""
    expected = probs * counts.sum()
    big = expected >= 5
    obs = np.append(counts[big], counts[~big].sum())
    exp = np.append(expected[big], expected[~big].sum())
    if exp[-1] == 0:
        obs, exp = obs[:-1], exp[:-1]
    stat = float(((obs - exp) ** 2 / exp).sum())
    df = len(obs) - 1
    z = 3.09  # one-sided 0.001
    critical = df * (1 - 2 / (9 * df) + z * math.sqrt(2 / (9 * df))) ** 3  # Wilson-Hilferty
    return stat > critical, stat, critical


@pytest.mark.parametrize("params", [SamplingParams(temperature=1.0), SamplingParams(temperature=0.7, top_p=0.9)],
                         ids=["t1", "t0.7-top_p0.9"])
@pytest.mark.parametrize("method", ["plain", "fixed-tree", "model-draft"])
def test_first_tokens_follow_the_exact_distribution(model, params, method):
    engine = Engine(model, IdTokenizer())
    draft_model = tiny_llama(V, seed=4, layers=1, hidden=32, sharpen=6.0)
    drafters = {
        "plain": lambda: [],
        "fixed-tree": lambda: [FixedTree()],
        "model-draft": lambda: [ModelDrafter(draft_model, max_tokens=2)],
    }[method]
    probs = exact_joint(model, params)
    counts = empirical(engine, params, drafters, seed0=1000)
    rejects, stat, critical = chi_square_rejects(counts, probs)
    assert not rejects, f"chi2 {stat:.1f} > {critical:.1f}"


def test_the_check_catches_a_biased_verifier(model, monkeypatch):
    """Accepting a deterministic draft whenever the target gives it any mass (REST-style) skews
    the distribution; the chi-square check must notice."""
    import draftscope.engine.engine as engine_mod

    def biased(tree, probs, generator, q_probs=None):
        from draftscope.engine.verify import children_lists

        kids = children_lists(tree)
        path, cur = [], -1
        while True:
            p = probs[cur + 1]
            nxt = next((c for c in kids.get(cur, []) if float(p[int(tree.tokens[c])]) > 0.05), None)
            if nxt is None:
                return path, int(torch.multinomial(p, 1, generator=generator).item())
            path.append(nxt)
            cur = nxt

    monkeypatch.setattr(engine_mod, "verify_sampling", biased)
    params = SamplingParams(temperature=1.0)
    counts = empirical(Engine(model, IdTokenizer()), params, lambda: [FixedTree()], seed0=5000)
    rejects, stat, critical = chi_square_rejects(counts, exact_joint(model, params))
    assert rejects, f"biased verifier not detected (chi2 {stat:.1f} <= {critical:.1f})"
