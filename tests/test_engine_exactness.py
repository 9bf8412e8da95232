"""Sampling with speculation draws from exactly the distribution of plain sampling.

On a tiny random Llama with 8 tokens, the exact joint distribution of the first three tokens is
computed with transformers' own logits processors (repetition penalty, temperature, top-k,
top-p): one forward per prefix. Thousands of seeded runs of the engine per case, with trees
deep enough to produce all three tokens in one step (siblings at every level), are compared
with it by a chi-square test at p = 0.001. Every case has drafts accepted, and deliberately
biased variants (REST's deterministic rule, a model rule without its residual, the old mixing
of sampled drafts into the score-ranked tree, recurrent beams verified as if they were draws from
the head) are rejected by the same test, so it can fail.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from transformers import (LogitsProcessorList, RepetitionPenaltyLogitsProcessor, TemperatureLogitsWarper,
                          TopKLogitsWarper, TopPLogitsWarper)

import draftscope.engine.drafters.composite as composite_mod
import draftscope.engine.engine as engine_mod
from draftscope.draft_tree import DraftSource, DraftTree
from draftscope.engine.drafters import ContextDrafter, RetrievalDrafter
from draftscope.engine.drafters.model import ModelDrafter
from draftscope.engine.drafters.recurrent import RecurrentSetup
from draftscope.recurrent.head import RecurrentHead
from draftscope.engine.engine import Engine, GenerationRequest
from draftscope.engine.sampling import SamplingParams
from draftscope.engine.verify import children_lists
from draftscope.retrieval import Writer
from engine_fixtures import IdTokenizer, tiny_llama

V = 8
PROMPT = [3, 5, 1, 3]
CONTEXT_PROMPT = [0, 4, 3, 0, 4]  # "4" recurs, and what followed it is likely again: context drafts get accepted
TOKENS = 3
RUNS = 2000

T1 = SamplingParams(temperature=1.0)
PROCESSED = SamplingParams(temperature=0.8, top_k=4, repetition_penalty=1.3)
TOP_P = SamplingParams(temperature=0.7, top_p=0.9)


class FixedTree:
    """A deterministic drafter: the same tree every step, siblings at both levels."""

    name = "retrieval"
    source = DraftSource.RETRIEVAL

    def reset(self, context_ids):
        pass

    def observe(self, ids):
        pass

    def propose(self, context_ids, budget):
        return DraftTree(
            tokens=np.array([3, 5, 1, 2, 7, 0, 4, 6], dtype=np.int64),
            parents=np.array([-1, -1, -1, 0, 0, 1, 1, 2], dtype=np.int32),
            depth=np.array([1, 1, 1, 2, 2, 2, 2, 2], dtype=np.int32),
            support=np.array([8, 6, 4, 5, 3, 4, 2, 3], np.float32),
            source=np.full(8, DraftSource.RETRIEVAL, np.int8),
        )


@pytest.fixture(scope="module", autouse=True)
def one_thread():
    """Tiny tensors: thread hand-offs cost more than they save (the runs are ~20% faster)."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


@pytest.fixture(scope="module")
def target():
    return tiny_llama(V, seed=3, layers=1, hidden=32, sharpen=10.0)


@pytest.fixture(scope="module")
def draft_model():
    return tiny_llama(V, seed=4, layers=1, hidden=32, sharpen=6.0)


@pytest.fixture(scope="module")
def head(target):
    """A recurrent head for the target (beams 3 wide, 2 deep), fitted for a few hundred steps to
    the target's own next-token distributions, so its beams get accepted."""
    return RecurrentSetup(fitted_head(target), target.get_input_embeddings(), width=3, length=2)


def fitted_head(target, steps: int = 300) -> RecurrentHead:
    from draftscope.recurrent.train import head_losses, target_outputs

    torch.manual_seed(0)
    head = RecurrentHead.for_target(target, torch.arange(V), layers=1)
    rows = target.get_output_embeddings().weight.detach().float()
    opt = torch.optim.Adam(head.parameters(), lr=1e-2)
    gen = torch.Generator().manual_seed(0)
    for _ in range(steps):
        ids = torch.randint(0, V, (16, 12), generator=gen)
        losses, _ = head_losses(head, *target_outputs(target, ids, rows)[:3], 2)
        opt.zero_grad()
        sum(losses).backward()
        opt.step()
    return head.eval()


@pytest.fixture(scope="module")
def datastore(tmp_path_factory):
    path = tmp_path_factory.mktemp("exact") / "store.idx"
    rng = np.random.default_rng(7)
    w = Writer(path, V)
    for _ in range(40):
        w.add_entry(rng.integers(0, V, 30))
    w.finalize()
    return path


def hf_processors(params: SamplingParams) -> LogitsProcessorList:
    procs = LogitsProcessorList()
    if params.repetition_penalty != 1.0:
        procs.append(RepetitionPenaltyLogitsProcessor(params.repetition_penalty))
    if params.temperature != 1.0:
        procs.append(TemperatureLogitsWarper(params.temperature))
    if params.top_k:
        procs.append(TopKLogitsWarper(params.top_k))
    if params.top_p < 1.0:
        procs.append(TopPLogitsWarper(params.top_p))
    return procs


@torch.no_grad()
def exact_joint(model, params: SamplingParams, prompt=PROMPT) -> np.ndarray:
    """P(first TOKENS tokens) under plain sampling, from transformers' processors: [V ** TOKENS]."""
    procs = hf_processors(params)
    joint = np.ones(1)
    prefixes = [[]]
    for _ in range(TOKENS):
        ids = torch.tensor([prompt + p for p in prefixes])
        logits = model(ids).logits[:, -1].float()
        probs = procs(ids, logits).softmax(-1).double().numpy()
        joint = (joint[:, None] * probs).ravel()
        prefixes = [p + [t] for p in prefixes for t in range(V)]
    return joint


def sample_runs(target, params, make_drafters, *, budget, seed0=1000, runs=RUNS, rule="model", prompt=PROMPT,
                costs=None):
    """Counts of the first TOKENS tokens over seeded runs, and the draft tokens accepted.
    ``budget`` None: the step policy decides each tree, from the verify ``costs`` given."""
    engine = Engine(target, IdTokenizer())
    engine.verify_costs = costs
    counts = np.zeros(V ** TOKENS)
    accepted = 0
    for r in range(runs):
        p = SamplingParams(params.temperature, params.top_k, params.top_p, params.repetition_penalty, seed=seed0 + r)
        events = list(engine.generate(GenerationRequest(prompt_ids=prompt, max_new_tokens=TOKENS, sampling=p,
                                                        drafters=make_drafters(), budget=budget, verify_rule=rule)))
        final = events[-1]
        assert final.finish_reason == "length", final.error
        a, b, c = final.token_ids
        counts[(a * V + b) * V + c] += 1
        accepted += sum(ev.accepted for ev in events[:-1])
    return counts, accepted


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
    z = 3.09  # one-sided 0.001
    critical = df * (1 - 2 / (9 * df) + z * math.sqrt(2 / (9 * df))) ** 3  # Wilson-Hilferty
    return stat, critical


def drafters_for(case, draft_model, datastore, head=None):
    # Two draws: a three-token answer prunes every tree to depth 2 anyway.
    model = lambda: ModelDrafter(draft_model, max_tokens=2)  # noqa: E731
    recurrent = head.drafter if head is not None else None
    return {
        "recurrent": lambda: [recurrent()],
        "retrieval+context+model+recurrent": lambda: [RetrievalDrafter(str(datastore), min_suffix=1),
                                                      ContextDrafter(min_suffix=1), model(), recurrent()],
        "tree": lambda: [FixedTree()],
        "model": lambda: [model()],
        "context": lambda: [ContextDrafter(min_suffix=1)],
        "tree+model": lambda: [FixedTree(), model()],
        "context+model": lambda: [ContextDrafter(min_suffix=1), model()],
        "retrieval+context+model": lambda: [RetrievalDrafter(str(datastore), min_suffix=1), ContextDrafter(min_suffix=1),
                                            model()],
    }[case]


CASES = [
    # (drafters, params, budget): budgets below (4) and above (16) what the drafters propose
    ("recurrent", T1, 8),
    ("recurrent", TOP_P, 4),
    ("retrieval+context+model+recurrent", PROCESSED, 16),
    ("tree", PROCESSED, 16),
    ("model", T1, 8),
    ("model", TOP_P, 8),
    ("context", PROCESSED, 8),
    ("tree+model", T1, 16),
    ("tree+model", PROCESSED, 4),
    ("context+model", T1, 8),
    ("retrieval+context+model", PROCESSED, 16),
]


def _id(case):
    drafters, params, budget = case
    p = {T1: "t1", PROCESSED: "t0.8-topk4-rep1.3", TOP_P: "t0.7-topp0.9"}[params]
    return f"{drafters}-{p}-b{budget}"


@pytest.mark.parametrize("case", CASES, ids=[_id(c) for c in CASES])
def test_first_three_tokens_follow_the_exact_distribution(target, draft_model, datastore, head, case):
    drafters, params, budget = case
    prompt = CONTEXT_PROMPT if "context" in drafters else PROMPT
    counts, accepted = sample_runs(target, params, drafters_for(drafters, draft_model, datastore, head), budget=budget,
                                   prompt=prompt)
    stat, critical = chi_square(counts, exact_joint(target, params, prompt))
    print(f"{_id(case)}: chi2 {stat:.1f} (critical {critical:.1f}), {accepted} draft tokens accepted")
    assert stat <= critical, f"chi2 {stat:.1f} > {critical:.1f}: the distribution differs from plain sampling"
    assert accepted > RUNS // 4, f"only {accepted} draft tokens accepted in {RUNS} runs: the case proves little"


@pytest.mark.parametrize("rule", ["model", "deterministic"])
def test_either_rule_alone_is_exact_on_a_mixed_tree(target, draft_model, datastore, rule):
    counts, accepted = sample_runs(target, T1, drafters_for("tree+model", draft_model, datastore), budget=8, rule=rule,
                                   runs=1500)
    stat, critical = chi_square(counts, exact_joint(target, T1))
    print(f"tree+model-t1-b8, {rule} rule: chi2 {stat:.1f} (critical {critical:.1f}), {accepted} accepted")
    assert stat <= critical, f"rule {rule}: chi2 {stat:.1f} > {critical:.1f}"


# ----------------------------------------------------------------------------- the step policy

# Relative verify costs by tree size, held fixed (a tiny model's real costs are flat): every extra
# node must earn its place, so the policy trims trees, or verifies none, by what each step drafted.
STEEP_COSTS = {0: 1.0, 2: 1.15, 4: 1.3, 8: 1.6, 16: 2.2, 32: 3.4, 64: 5.8}


@pytest.fixture
def policy_trims(monkeypatch):
    """Costs stay as given, and the trims are counted (the cases must exercise them)."""
    from draftscope.engine.policy import StepPolicy

    monkeypatch.setattr(StepPolicy, "_learn_cost", lambda self, n, seconds: None)
    counts = {"trimmed": 0, "steps": 0}
    trim = StepPolicy.trim

    def counting(self, tree, asked=None):
        kept = trim(self, tree, asked)
        counts["steps"] += 1
        counts["trimmed"] += len(kept) < len(tree)
        return kept

    monkeypatch.setattr(StepPolicy, "trim", counting)
    return counts


POLICY_CASES = [("tree+model", T1), ("retrieval+context+model", PROCESSED)]


@pytest.mark.parametrize("drafters,params", POLICY_CASES, ids=[f"{d}-policy" for d, _ in POLICY_CASES])
def test_trees_the_policy_trims_keep_the_exact_distribution(target, draft_model, datastore, policy_trims, drafters,
                                                            params):
    prompt = CONTEXT_PROMPT if "context" in drafters else PROMPT
    counts, accepted = sample_runs(target, params, drafters_for(drafters, draft_model, datastore), budget=None,
                                   prompt=prompt, costs=dict(STEEP_COSTS), runs=1500)
    stat, critical = chi_square(counts, exact_joint(target, params, prompt))
    print(f"{drafters} with the step policy: chi2 {stat:.1f} (critical {critical:.1f}), {accepted} accepted, "
          f"{policy_trims['trimmed']} of {policy_trims['steps']} trees trimmed")
    assert stat <= critical, f"chi2 {stat:.1f} > {critical:.1f}: the distribution differs from plain sampling"
    assert accepted > 1500 // 4 and policy_trims["trimmed"] > policy_trims["steps"] // 10, policy_trims


def trim_sampled_drafts_by_their_draw(self, tree, asked=None):
    """A policy that drops sampled drafts the draft model found unlikely after drawing them (below
    a probability of 0.3: a third of the draws here)."""
    from draftscope.engine.policy import shares, subtree

    share = shares(tree)
    keep = np.ones(len(tree), dtype=bool)
    for i in range(len(tree)):
        parent = int(tree.parents[i])
        keep[i] = share[i] >= 0.3 and (parent < 0 or keep[parent])
    return subtree(tree, keep)


def test_the_check_rejects_a_policy_that_trims_sampled_drafts_by_their_draw(target, draft_model, datastore,
                                                                             monkeypatch):
    from draftscope.engine.policy import StepPolicy

    monkeypatch.setattr(StepPolicy, "trim", trim_sampled_drafts_by_their_draw)
    counts, _ = sample_runs(target, PROCESSED, drafters_for("model", draft_model, datastore), budget=None, seed0=5000,
                            runs=1000, costs=dict(STEEP_COSTS))
    stat, critical = chi_square(counts, exact_joint(target, PROCESSED))
    print(f"sampled drafts trimmed by their draw: chi2 {stat:.1f} (critical {critical:.1f})")
    assert stat > critical, f"a biased policy not detected (chi2 {stat:.1f} <= {critical:.1f})"


# ----------------------------------------------------------------------------- biased controls


def rest_style(tree, probs, generator, q_probs=None, **_):
    """REST's bias: accept a draft whenever the target gives it enough mass, no coin."""
    kids = children_lists(tree)
    path, cur = [], -1
    while True:
        p = probs[cur + 1]
        nxt = next((c for c in kids.get(cur, []) if float(p[int(tree.tokens[c])]) > 0.05), None)
        if nxt is None:
            return path, int(torch.multinomial(p, 1, generator=generator).item())
        path.append(nxt)
        cur = nxt


def model_rule_without_residual(tree, probs, generator, q_probs=None, **_):
    """min(1, p/q) acceptance, but a rejection samples from p instead of max(0, p - q)."""
    kids = children_lists(tree)
    path, cur = [], -1
    while True:
        p = probs[cur + 1]
        nxt = None
        for c in kids.get(cur, []):
            q = q_probs[c]
            x = int(tree.tokens[c])
            if torch.rand((), generator=generator).item() < min(1.0, float(p[x]) / max(float(q[x]), 1e-12)):
                nxt = c
            break
        if nxt is None:
            return path, int(torch.multinomial(p, 1, generator=generator).item())
        path.append(nxt)
        cur = nxt


def score_ranked_merge(trees, budget, weights=None):
    """The old composite: sampled drafts compete with the others by score (so their own sampled
    probability decides whether they stay) and merge into equal deterministic nodes."""
    from draftscope.engine.drafters.trie import PathTrie

    trie = PathTrie()
    q_by_node = {}
    for tree in trees:
        scores = composite_mod.path_scores(tree)
        q_probs = tree.extra.get("q_probs", {})
        for i in range(len(tree)):
            leaf = trie.add(tree.token_path(i), 0.0, int(tree.source[i]), combine="max")[-1]
            if scores[i] >= trie.score[leaf]:
                trie.score[leaf] = float(scores[i])
                trie.source[leaf] = int(tree.source[i])
            if i in q_probs:
                q_by_node[leaf] = q_probs[i]
    merged, order = trie.select(budget)
    q = {out: q_by_node[n] for out, n in enumerate(order) if n in q_by_node and merged.source[out] == DraftSource.MODEL}
    return DraftTree(merged.tokens, merged.parents, merged.depth, merged.support, merged.source, extra={"q_probs": q})


class BeamsAsDraws:
    """ReDrafter's admitted bias: the beams' first tokens (the head's two likeliest) verified by
    the min(1, p/q) rule as if they had been drawn from the head's distribution q."""

    name, source = "recurrent", DraftSource.RECURRENT
    wants_hidden = True

    def __init__(self, setup):
        self.inner = setup.drafter()
        self.inner.width, self.inner.length = 2, 1
        self.setup = setup

    def reset(self, context_ids):
        self.inner.reset(context_ids)

    def observe(self, ids):
        pass

    def set_hidden(self, hidden):
        self.inner.set_hidden(hidden)

    def propose(self, context_ids, budget):
        tree = self.inner.propose(context_ids, budget)
        head, embed = self.setup.head, self.setup.embed
        with torch.no_grad():
            state = head.first_state(embed(torch.tensor([context_ids[-1]])).float())
            q = head.full_distribution(head.logits(state, self.inner.hidden.float()[None]).softmax(-1))[0]
        return DraftTree(tree.tokens, tree.parents, tree.depth, tree.support, tree.source,
                         extra={"q_probs": {i: q for i in range(len(tree))}, "slots": len(tree)})


def test_the_check_rejects_recurrent_beams_verified_as_draws(target, head):
    counts, accepted = sample_runs(target, T1, lambda: [BeamsAsDraws(head)], budget=8, seed0=5000, runs=1000)
    stat, critical = chi_square(counts, exact_joint(target, T1))
    print(f"beams verified as draws: chi2 {stat:.1f} (critical {critical:.1f}), {accepted} accepted")
    assert stat > critical, f"beams verified as draws not detected (chi2 {stat:.1f} <= {critical:.1f})"


BIASED = [
    ("REST-style deterministic rule", "verify", rest_style, "tree", T1, 16),
    ("model rule without residual", "verify", model_rule_without_residual, "model", T1, 8),
    ("sampled drafts ranked by score", "merge", score_ranked_merge, "tree+model", PROCESSED, 4),
]


@pytest.mark.parametrize("name,where,variant,drafters,params,budget", BIASED, ids=[b[0] for b in BIASED])
def test_the_check_rejects_a_biased_variant(target, draft_model, datastore, monkeypatch, name, where, variant,
                                            drafters, params, budget):
    if where == "verify":
        monkeypatch.setattr(engine_mod, "verify_sampling", variant)
    else:
        monkeypatch.setattr(composite_mod, "merge_trees", variant)
    counts, _ = sample_runs(target, params, drafters_for(drafters, draft_model, datastore), budget=budget, seed0=5000,
                            runs=1000)
    stat, critical = chi_square(counts, exact_joint(target, params))
    print(f"{name}: chi2 {stat:.1f} (critical {critical:.1f})")
    assert stat > critical, f"{name} not detected (chi2 {stat:.1f} <= {critical:.1f})"


class ForeignTree(FixedTree):
    """FixedTree with ids the model does not have (a datastore of another tokenizer, damage):
    11 at the first level with children, 9 under a good node."""

    def propose(self, context_ids, budget):
        return DraftTree(
            tokens=np.array([3, 11, 5, 9, 2, 4], dtype=np.int64),
            parents=np.array([-1, -1, -1, 0, 0, 1], dtype=np.int32),
            depth=np.array([1, 1, 1, 2, 2, 2], dtype=np.int32),
            support=np.array([8, 7, 6, 5, 3, 4], np.float32),
            source=np.full(6, DraftSource.RETRIEVAL, np.int8),
        )


def test_drafts_outside_the_vocabulary_are_dropped_and_sampling_stays_exact(target):
    engine = Engine(target, IdTokenizer())
    plain = list(engine.generate(GenerationRequest(prompt_ids=PROMPT, max_new_tokens=12)))[-1]
    events = list(engine.generate(GenerationRequest(prompt_ids=PROMPT, max_new_tokens=12, drafters=[ForeignTree()],
                                                    budget=16)))
    assert events[-1].error is None and events[-1].token_ids == plain.token_ids
    assert all(t < V for ev in events[:-1] for t in ev.tree["tokens"]), "foreign ids never reach the model"
    counts, accepted = sample_runs(target, T1, lambda: [ForeignTree()], budget=16, runs=1000)
    stat, critical = chi_square(counts, exact_joint(target, T1))
    print(f"foreign ids dropped: chi2 {stat:.1f} (critical {critical:.1f}), {accepted} accepted")
    assert stat <= critical and accepted > 250


def test_sampled_drafts_keep_their_place_whatever_they_draw():
    """The composite never ranks a sampled draft by its own probability nor merges it away: a
    draw equal to a deterministic proposal is one node with both attempts."""
    from draftscope.engine.drafters.composite import merge_trees

    fixed = FixedTree().propose([0], 16)
    for drawn, support in (([3, 2], 1e-6), ([6, 6], 0.9)):  # unlikely draws and a novel path
        q = {0: torch.full((V,), 1 / V), 1: torch.full((V,), 1 / V)}
        chain = DraftTree(np.array(drawn), np.array([-1, 0], np.int32), np.array([1, 2], np.int32),
                          np.array([support, support * support], np.float32), np.full(2, DraftSource.MODEL, np.int8),
                          extra={"q_probs": q, "slots": 2})
        merged = merge_trees([fixed, chain], budget=5)
        paths = {tuple(merged.token_path(i)) for i in range(len(merged))}
        assert (drawn[0],) in paths and tuple(drawn) in paths, "both draws kept"
        assert len(merged) <= 5
        sampled = set(merged.extra["q_probs"])
        assert {tuple(merged.token_path(i)) for i in sampled} == {(drawn[0],), tuple(drawn)}
        also = {tuple(merged.token_path(i)) for i in merged.extra["also_proposed"]}
        assert also == ({(3,), (3, 2)} if drawn == [3, 2] else set())
