"""Sampling (T > 0): an answer is a function of its seed alone, token for token the same with and
without drafts, and plain sampling with the seeded rule is exact.

Two kinds of test, each with a deliberately broken variant it must reject:

- Token identity (the promise, fp32): for many seeds, every drafter alone and in mixes (retrieval,
  context, one and two draft models, recurrent beams, the step policy under steep costs), with
  top-k, top-p and repetition penalty, EOS and stop strings inside trees, the answer equals plain
  decoding's with the same seed. A verifier that keys the noise by the step instead of the
  absolute position is caught.
- The sampler is exact: on a tiny random Llama with 8 tokens, the exact joint distribution of the
  first three tokens is computed with transformers' own logits processors (one forward per
  prefix), and thousands of seeded runs are compared with it by a chi-square test at p = 0.001,
  plain and with two sampling drafters in one tree (biased under the previous rule). Noise reused
  across positions is rejected by the same test, so it can fail.
"""

from __future__ import annotations

import math
from dataclasses import replace

import numpy as np
import pytest
import torch
from engine_fixtures import FixedTree, IdTokenizer, tiny_llama
from transformers import (
    LogitsProcessorList,
    RepetitionPenaltyLogitsProcessor,
    TemperatureLogitsWarper,
    TopKLogitsWarper,
    TopPLogitsWarper,
)

import draftscope.engine.answer as engine_mod
from draftscope.draft_tree import DraftSource, DraftTree
from draftscope.drafters import (
    ContextDrafter,
    RetrievalDrafter,
)
from draftscope.drafters.model_drafter import ModelDrafter
from draftscope.drafters.recurrent.head import RecurrentHead
from draftscope.drafters.recurrent.head_drafter import RecurrentSetup
from draftscope.engine.engine import Engine, GenerationRequest
from draftscope.engine.sampling import PositionNoise, SamplingParams
from draftscope.retrieval import Writer

V = 8
PROMPT = [3, 5, 1, 3]
CONTEXT_PROMPT = [0, 4, 3, 0, 4]  # "4" recurs, and what followed it is likely again: context drafts get accepted
TOKENS = 3
RUNS = 2000

T1 = SamplingParams(temperature=1.0)
PROCESSED = SamplingParams(temperature=0.8, top_k=4, repetition_penalty=1.3)
TOP_P = SamplingParams(temperature=0.7, top_p=0.9)


pytestmark = pytest.mark.usefixtures("one_thread")


@pytest.fixture(scope="module")
def target():
    return tiny_llama(V, seed=3, layers=1, hidden=32, sharpen=10.0)


@pytest.fixture(scope="module")
def draft_model():
    return tiny_llama(V, seed=4, layers=1, hidden=32, sharpen=6.0)


@pytest.fixture(scope="module")
def second_draft_model():
    return tiny_llama(V, seed=5, layers=1, hidden=32, sharpen=8.0)


@pytest.fixture(scope="module")
def head(target):
    """A recurrent head for the target (beams 3 wide, 2 deep), fitted for a few hundred steps to
    the target's own next-token distributions, so its beams get accepted."""
    return RecurrentSetup(fitted_head(target), target.get_input_embeddings(), width=3, length=2)


def fitted_head(target, steps: int = 300) -> RecurrentHead:
    from draftscope.drafters.recurrent.head_loss import head_losses, target_outputs

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


def with_seed(params: SamplingParams, seed: int) -> SamplingParams:
    return replace(params, seed=seed)


def answer(engine, prompt, params, drafters, *, budget, tokens, **kw):
    events = list(
        engine.generate(
            GenerationRequest(
                prompt_ids=prompt, max_new_tokens=tokens, sampling=params, drafters=drafters, budget=budget, **kw
            )
        )
    )
    final = events[-1]
    assert final.error is None, final.error
    return final, sum(ev.accepted for ev in events[:-1])


# ----------------------------------------------------------------------------- token identity

STEEP_COSTS = {0: 1.0, 2: 1.15, 4: 1.3, 8: 1.6, 16: 2.2, 32: 3.4, 64: 5.8}


def drafters_for(case, draft_model, second_draft_model, datastore, head):
    model = lambda: ModelDrafter(draft_model, max_tokens=3)  # noqa: E731
    return {
        "tree": lambda: [FixedTree()],
        "retrieval": lambda: [RetrievalDrafter(str(datastore), min_suffix=1)],
        "context": lambda: [ContextDrafter(min_suffix=1)],
        # long verbatim matches draft long chains (an answer following an attached file)
        "context-long": lambda: [ContextDrafter(min_suffix=1, max_depth=3, long_depth=32)],
        "model": lambda: [model()],
        "model+model": lambda: [model(), ModelDrafter(second_draft_model, max_tokens=3)],
        "recurrent": lambda: [head.drafter()],
        "retrieval+context+model+recurrent": lambda: [
            RetrievalDrafter(str(datastore), min_suffix=1),
            ContextDrafter(min_suffix=1),
            model(),
            head.drafter(),
        ],
        "tree+model+model": lambda: [FixedTree(), model(), ModelDrafter(second_draft_model, max_tokens=3)],
    }[case]


IDENTITY_CASES = [
    # (drafters, params, budget: nodes per step, or None for the step policy under steep costs)
    ("tree", T1, 16),
    ("retrieval", PROCESSED, 8),
    ("context", TOP_P, 8),
    ("context-long", T1, 32),
    ("context-long", T1, None),  # the policy trusting a long verbatim match, drafting lazily
    ("model", T1, 8),
    ("model", TOP_P, 4),
    ("model+model", T1, 8),
    ("model+model", PROCESSED, 16),
    ("recurrent", T1, 8),
    ("recurrent", TOP_P, 4),
    ("retrieval+context+model+recurrent", PROCESSED, 16),
    ("retrieval+context+model+recurrent", T1, None),
    ("tree+model+model", TOP_P, None),
]
SEEDS = 25
ANSWER = 24
PLAIN_ANSWERS: dict = {}  # plain decoding's answers, shared by the identity cases of one prompt and sampling


def _id(case):
    drafters, params, budget = case
    p = {T1: "t1", PROCESSED: "t0.8-topk4-rep1.3", TOP_P: "t0.7-topp0.9"}[params]
    return f"{drafters}-{p}-{'policy' if budget is None else f'b{budget}'}"


@pytest.fixture
def steep_policy(monkeypatch):
    """The step policy keeps the steep costs it is given (a tiny model's real costs are flat), so
    it trims trees, or verifies none, by what each step drafted; the trims are counted."""
    from draftscope.engine.policy import StepPolicy

    monkeypatch.setattr(StepPolicy, "_learn_cost", lambda self, n, seconds: None)
    counts = {"trimmed": 0, "steps": 0}
    trim = StepPolicy.trim

    def counting(self, tree, asked=None, shared=None):
        kept = trim(self, tree, asked, shared)
        counts["steps"] += 1
        counts["trimmed"] += len(kept) < len(tree)
        return kept

    monkeypatch.setattr(StepPolicy, "trim", counting)
    return counts


def identity_run(target, make, params, budget, *, prompt, seeds=SEEDS, eos=None, stop=(), plain_answers=None):
    """(answers that differ from plain decoding's with the same seed, draft tokens accepted).
    ``plain_answers``: plain decoding's answers kept across the cases that share prompt and sampling."""
    engine = Engine(target, IdTokenizer())
    engine.verify_costs = dict(STEEP_COSTS)
    if eos is not None:
        engine.eos_ids = {eos}
    differ, accepted, finishes = [], 0, set()
    for seed in range(seeds):
        p = with_seed(params, 100 + seed)
        key = (tuple(prompt), repr(p), eos, tuple(stop))
        plain = (plain_answers or {}).get(key)
        if plain is None:
            plain, _ = answer(engine, prompt, p, [], budget=None, tokens=ANSWER, stop_strings=stop)
            if plain_answers is not None:
                plain_answers[key] = plain
        drafted, got = answer(engine, prompt, p, make(), budget=budget, tokens=ANSWER, stop_strings=stop)
        accepted += got
        finishes.add(drafted.finish_reason)
        if (drafted.token_ids, drafted.finish_reason, drafted.text) != (
            plain.token_ids,
            plain.finish_reason,
            plain.text,
        ):
            differ.append(seed)
        assert drafted.stats.seed == plain.stats.seed == 100 + seed
    return differ, accepted, finishes


@pytest.mark.parametrize("case", IDENTITY_CASES, ids=[_id(c) for c in IDENTITY_CASES])
def test_seeded_answers_equal_plain_decoding_token_for_token(
    target, draft_model, second_draft_model, datastore, head, steep_policy, case
):
    drafters, params, budget = case
    prompt = CONTEXT_PROMPT if "context" in drafters else PROMPT
    make = drafters_for(drafters, draft_model, second_draft_model, datastore, head)
    differ, accepted, _ = identity_run(target, make, params, budget, prompt=prompt, plain_answers=PLAIN_ANSWERS)
    print(
        f"{_id(case)}: {SEEDS - len(differ)}/{SEEDS} identical, {accepted} draft tokens accepted, "
        f"{steep_policy['trimmed']} of {steep_policy['steps']} trees trimmed"
    )
    assert not differ, f"seeds {differ}: the answer with drafts differs from plain decoding's"
    assert accepted > SEEDS * 2, f"only {accepted} draft tokens accepted in {SEEDS} answers: the case proves little"
    if budget is None:
        assert steep_policy["trimmed"] > steep_policy["steps"] // 10, steep_policy


def test_eos_and_stop_strings_inside_trees_end_answers_as_plain_decoding_does(target, draft_model, datastore, head):
    make = drafters_for("retrieval+context+model+recurrent", draft_model, None, datastore, head)
    differ, accepted, finishes = identity_run(target, make, T1, 16, prompt=CONTEXT_PROMPT, eos=6)
    assert not differ and accepted > SEEDS and "eos" in finishes, (differ, accepted, finishes)
    differ, accepted, finishes = identity_run(target, make, PROCESSED, 16, prompt=CONTEXT_PROMPT, stop=[" 4 3"])
    assert not differ and accepted > SEEDS and "stop" in finishes, (differ, accepted, finishes)


def test_a_draft_model_coupled_to_the_seed_proposes_what_the_target_picks(target):
    """The target drafting for itself with the same keyed noise: every draft is the target's own
    choice, so every one is accepted (with independent draws, about sum p^2 would be)."""
    engine = Engine(target, IdTokenizer())
    for seed in range(5):
        events = list(
            engine.generate(
                GenerationRequest(
                    prompt_ids=PROMPT,
                    max_new_tokens=ANSWER,
                    sampling=with_seed(T1, seed),
                    drafters=[ModelDrafter(target, max_tokens=4)],
                    budget=4,
                )
            )
        )
        steps = events[:-1]
        assert all(s.accepted == s.proposed == 4 for s in steps[:-1]), [(s.proposed, s.accepted) for s in steps]


def test_the_same_seed_gives_the_same_answer_and_another_seed_another(target, draft_model, datastore, head):
    engine = Engine(target, IdTokenizer())
    one, _ = answer(engine, PROMPT, with_seed(T1, 7), [], budget=None, tokens=ANSWER)
    again, _ = answer(
        engine,
        PROMPT,
        with_seed(T1, 7),
        drafters_for("model", draft_model, None, datastore, head)(),
        budget=8,
        tokens=ANSWER,
    )
    other, _ = answer(engine, PROMPT, with_seed(T1, 8), [], budget=None, tokens=ANSWER)
    assert one.token_ids == again.token_ids and one.token_ids != other.token_ids
    unseeded, _ = answer(engine, PROMPT, T1, [], budget=None, tokens=ANSWER)
    assert isinstance(unseeded.stats.seed, int), "an answer that asked for no seed still keeps the one it drew"
    replayed, _ = answer(engine, PROMPT, with_seed(T1, unseeded.stats.seed), [FixedTree()], budget=16, tokens=ANSWER)
    assert replayed.token_ids == unseeded.token_ids, "the kept seed reproduces the answer"
    greedy, _ = answer(engine, PROMPT, SamplingParams(), [], budget=None, tokens=ANSWER)
    assert greedy.stats.seed is None, "greedy answers depend on no seed"


def test_noise_is_a_function_of_seed_and_position_only():
    a, b = PositionNoise(5, 1000), PositionNoise(5, 1000)
    same = np.array_equal
    assert same(a.at(17), b.at(17)) and same(a.at(3), PositionNoise(5, 1000).at(3))
    assert not same(a.at(17), a.at(18)) and not same(a.at(17), PositionNoise(6, 1000).at(17))
    assert same(PositionNoise(-1, 10).at(0), PositionNoise(2**64 - 1, 10).at(0)), "OpenAI seeds may be negative"
    # Gumbel(0, 1): mean Euler's gamma, variance pi^2 / 6.
    g = np.concatenate([PositionNoise(0, 10_000).at(p) for p in range(20)]).astype(np.float64)
    assert abs(float(g.mean()) - 0.5772) < 0.02 and abs(float(g.var(ddof=1)) - math.pi**2 / 6) < 0.05


def noise_keyed_by_step(tree, next_position):
    """A broken verifier: the noise of each row keyed by its depth in this step's tree, not by the
    absolute position (each answer is still a sample, but not the one plain decoding draws)."""
    return [0] + [int(d) for d in tree.depth.tolist()]


@pytest.mark.parametrize("drafters,budget", [("model", 8), ("context-long", 32), ("context-long", None)])
def test_the_identity_check_rejects_noise_keyed_by_the_step(
    target, draft_model, datastore, head, monkeypatch, steep_policy, drafters, budget
):
    monkeypatch.setattr(engine_mod, "token_positions", noise_keyed_by_step)
    prompt = CONTEXT_PROMPT if "context" in drafters else PROMPT
    differ, _, _ = identity_run(
        target, drafters_for(drafters, draft_model, None, datastore, head), T1, budget, prompt=prompt, seeds=10
    )
    assert len(differ) >= 5, f"noise keyed by the step not detected (only seeds {differ} differ)"


# ----------------------------------------------------------------------------- exact sampling


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


def sample_runs(target, params, make_drafters, *, budget, seed0=1000, runs=RUNS, prompt=PROMPT):
    """Counts of the first TOKENS tokens over seeded runs, and the draft tokens accepted."""
    engine = Engine(target, IdTokenizer())
    counts = np.zeros(V**TOKENS)
    accepted = 0
    for r in range(runs):
        final, got = answer(engine, prompt, with_seed(params, seed0 + r), make_drafters(), budget=budget, tokens=TOKENS)
        assert final.finish_reason == "length"
        a, b, c = final.token_ids
        counts[(a * V + b) * V + c] += 1
        accepted += got
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


@pytest.mark.parametrize("params", [T1, PROCESSED, TOP_P], ids=["t1", "t0.8-topk4-rep1.3", "t0.7-topp0.9"])
def test_seeded_plain_sampling_follows_the_exact_distribution(target, params):
    counts, _ = sample_runs(target, params, lambda: [], budget=None)
    stat, critical = chi_square(counts, exact_joint(target, params))
    print(f"plain: chi2 {stat:.1f} (critical {critical:.1f})")
    assert stat <= critical, f"chi2 {stat:.1f} > {critical:.1f}: seeded sampling is not exact"


def test_two_sampling_drafters_in_one_tree_keep_the_exact_distribution(target, draft_model, second_draft_model):
    """The case the previous rule (rejection sampling, siblings ordered by draft probability) got
    wrong: chi2 394 against a critical 175 there."""
    make = lambda: [ModelDrafter(draft_model, max_tokens=2), ModelDrafter(second_draft_model, max_tokens=2)]  # noqa: E731
    counts, accepted = sample_runs(target, T1, make, budget=8)
    stat, critical = chi_square(counts, exact_joint(target, T1))
    print(f"model+model: chi2 {stat:.1f} (critical {critical:.1f}), {accepted} draft tokens accepted")
    assert stat <= critical, f"chi2 {stat:.1f} > {critical:.1f}: the distribution differs from plain sampling"
    assert accepted > RUNS // 2, f"only {accepted} draft tokens accepted in {RUNS} runs: the case proves little"


def test_the_check_rejects_noise_reused_across_positions(target, monkeypatch):
    at = PositionNoise.at
    monkeypatch.setattr(PositionNoise, "at", lambda self, position: at(self, 0))
    counts, _ = sample_runs(target, T1, lambda: [], budget=None, seed0=5000, runs=1000)
    stat, critical = chi_square(counts, exact_joint(target, T1))
    print(f"noise reused across positions: chi2 {stat:.1f} (critical {critical:.1f})")
    assert stat > critical, f"noise reused across positions not detected (chi2 {stat:.1f} <= {critical:.1f})"


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


def test_drafts_outside_the_vocabulary_are_dropped_and_answers_stay_plain_decodings(target):
    engine = Engine(target, IdTokenizer())
    for params in (SamplingParams(), with_seed(T1, 3)):
        plain, _ = answer(engine, PROMPT, params, [], budget=None, tokens=12)
        events = list(
            engine.generate(
                GenerationRequest(
                    prompt_ids=PROMPT, max_new_tokens=12, sampling=params, drafters=[ForeignTree()], budget=16
                )
            )
        )
        assert events[-1].error is None and events[-1].token_ids == plain.token_ids
        assert all(t < V for ev in events[:-1] for t in ev.tree.tokens), "foreign ids never reach the model"
