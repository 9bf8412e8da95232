"""min-p and the repetition penalty over the last N tokens keep answers exact: a seeded answer, with
any drafts, is token for token the one a reference decoder writes (a whole forward per token, the
distribution from transformers' own processors, the penalty over ``input_ids[-N:]``, the token by
the seeded rule). A verifier that ignores min-p, a penalty window off by one at the tree's nodes,
and a draft model whose window differs from the target's are each caught.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
import torch
from engine_fixtures import IdTokenizer, tiny_llama
from transformers import (
    LogitsProcessorList,
    MinPLogitsWarper,
    RepetitionPenaltyLogitsProcessor,
    TemperatureLogitsWarper,
    TopKLogitsWarper,
    TopPLogitsWarper,
)

import draftscope.engine.answer as answer_mod
import draftscope.engine.verify as verify_mod
from draftscope.draft_tree import DraftSource, DraftTree
from draftscope.drafters import ContextDrafter, Drafter
from draftscope.drafters.model_drafter import ModelDrafter
from draftscope.engine.engine import Engine, GenerationRequest
from draftscope.engine.sampling import PositionNoise, SamplingParams, probabilities, recent_tokens
from draftscope.engine.verify import row_contexts

V = 8
PROMPT = [3, 5, 1, 3, 0, 4, 3, 0]
ANSWER = 24
SEEDS = 12
WINDOW = 3  # shorter than prompt + answer: a penalty over the whole context answers differently

# min-p that drops tokens at these temperatures; a strong penalty, so the window decides tokens
MIN_P = SamplingParams(temperature=1.0, min_p=0.2)
WINDOWED = SamplingParams(
    temperature=0.8, top_k=6, top_p=0.95, min_p=0.05, repetition_penalty=2.0, repetition_window=WINDOW
)
GREEDY_WINDOWED = SamplingParams(repetition_penalty=3.0, repetition_window=WINDOW)

pytestmark = pytest.mark.usefixtures("one_thread")


class FixedTree(Drafter):
    """The same two-level tree every step (siblings at both levels)."""

    name = "retrieval"
    source = DraftSource.RETRIEVAL

    def reset(self, context_ids):
        pass

    def observe(self, ids):
        pass

    def propose(self, context_ids, budget):
        return DraftTree(
            tokens=np.array([3, 5, 1, 2, 7, 0, 4, 6, 3], dtype=np.int64),
            parents=np.array([-1, -1, -1, 0, 0, 1, 1, 2, 2], dtype=np.int32),
            depth=np.array([1, 1, 1, 2, 2, 2, 2, 2, 2], dtype=np.int32),
            support=np.array([8, 6, 4, 5, 3, 4, 2, 3, 1], np.float32),
            source=np.full(9, DraftSource.RETRIEVAL, np.int8),
        )


@pytest.fixture(scope="module")
def target():
    return tiny_llama(V, seed=3, layers=1, hidden=32, sharpen=10.0)


@pytest.fixture(scope="module")
def draft_model():
    return tiny_llama(V, seed=4, layers=1, hidden=32, sharpen=6.0)


def hf_processors(params: SamplingParams) -> LogitsProcessorList:
    procs = LogitsProcessorList()
    if params.temperature != 1.0:
        procs.append(TemperatureLogitsWarper(params.temperature))
    if params.top_k:
        procs.append(TopKLogitsWarper(params.top_k))
    if params.top_p < 1.0:
        procs.append(TopPLogitsWarper(params.top_p))
    if params.min_p > 0.0:
        procs.append(MinPLogitsWarper(params.min_p))
    return procs


@torch.no_grad()
def reference_answer(model, prompt: list[int], params: SamplingParams, tokens: int) -> list[int]:
    """Plain decoding written from the definitions: a whole forward per token; the penalty (HF's
    rule) over the last N tokens before the position; transformers' warpers; the seeded Gumbel-max."""
    ids = list(prompt)
    noise = None if params.greedy else PositionNoise(params.seed, V)
    penalty = RepetitionPenaltyLogitsProcessor(params.repetition_penalty)
    for _ in range(tokens):
        scores = model(torch.tensor([ids])).logits[:, -1].float()
        scores = penalty(torch.tensor([ids[-params.repetition_window :]]), scores)
        if params.greedy:
            ids.append(int(scores.argmax()))
            continue
        probs = hf_processors(params)(torch.tensor([ids]), scores).softmax(-1)[0]
        ids.append(int((probs.log() + torch.from_numpy(noise.at(len(ids)))).argmax()))
    return ids[len(prompt) :]


def answer(engine, params, drafters, *, budget):
    request = GenerationRequest(
        prompt_ids=PROMPT, max_new_tokens=ANSWER, sampling=params, drafters=drafters, budget=budget
    )
    events = list(engine.generate(request))
    assert events[-1].error is None, events[-1].error
    return events[-1].token_ids, sum(ev.accepted for ev in events[:-1])


def differing_seeds(target, params, make_drafters, *, budget=8, seeds=SEEDS):
    """(seeds whose answers differ from the reference's, plain or with drafts; draft tokens accepted)."""
    engine = Engine(target, IdTokenizer())
    differ, accepted = [], 0
    for seed in range(seeds):
        p = dataclasses.replace(params, seed=500 + seed)
        want = reference_answer(target, PROMPT, p, ANSWER)
        plain, _ = answer(engine, p, [], budget=None)
        drafted, got = answer(engine, p, make_drafters(), budget=budget)
        accepted += got
        if plain != want or drafted != want:
            differ.append(seed)
    return differ, accepted


def drafters(draft_model):
    return {
        "tree": lambda: [FixedTree()],
        "model": lambda: [ModelDrafter(draft_model, max_tokens=3)],
        "tree+model+context": lambda: [
            FixedTree(),
            ModelDrafter(draft_model, max_tokens=3),
            ContextDrafter(min_suffix=1),
        ],
    }


@pytest.mark.parametrize(
    "params,case",
    [
        (MIN_P, "tree"),
        (MIN_P, "model"),
        (WINDOWED, "tree"),
        (WINDOWED, "tree+model+context"),
        (GREEDY_WINDOWED, "tree"),
    ],
    ids=["min_p-tree", "min_p-model", "window-tree", "window-mix", "greedy-window-tree"],
)
def test_min_p_and_the_penalty_window_give_the_reference_answer_with_and_without_drafts(
    target, draft_model, params, case
):
    seeds = 2 if params.greedy else SEEDS  # greedy answers depend on no seed
    differ, accepted = differing_seeds(target, params, drafters(draft_model)[case], seeds=seeds)
    assert not differ, f"seeds {differ}: an answer differs from the reference decoder's"
    assert accepted > seeds, f"only {accepted} draft tokens accepted: the case proves little"


def test_the_cases_exercise_min_p_and_the_window(target):
    """The reference itself changes when min-p is off or the penalty covers the whole context: the
    identity above would catch a verifier that did either."""
    for params, broken in (
        (MIN_P, dataclasses.replace(MIN_P, min_p=0.0)),
        (WINDOWED, dataclasses.replace(WINDOWED, repetition_window=len(PROMPT) + ANSWER)),
    ):
        changed = sum(
            reference_answer(target, PROMPT, dataclasses.replace(params, seed=s), ANSWER)
            != reference_answer(target, PROMPT, dataclasses.replace(broken, seed=s), ANSWER)
            for s in range(500, 500 + SEEDS)
        )
        assert changed >= SEEDS // 3, f"only {changed} of {SEEDS} answers depend on it"


def test_a_verifier_that_ignores_min_p_is_caught(target, draft_model, monkeypatch):
    choose_tokens = answer_mod.next_tokens

    def without_min_p(logits, params, *args):
        return choose_tokens(logits, dataclasses.replace(params, min_p=0.0), *args)

    monkeypatch.setattr(answer_mod, "next_tokens", without_min_p)
    differ, _ = differing_seeds(target, MIN_P, drafters(draft_model)["tree"])
    assert len(differ) >= SEEDS // 3, f"a verifier ignoring min-p not detected (only seeds {differ} differ)"


def node_window_off_by_one(context, tree, window):
    """A broken window: each node's row looks back from its parent's position (its own token left out)."""
    tail = list(context[-window:])
    return [tail] + [(tail + tree.token_path(i)[:-1])[-window:] for i in range(len(tree))]


def test_a_penalty_window_off_by_one_at_the_nodes_is_caught(target, draft_model, monkeypatch):
    monkeypatch.setattr(verify_mod, "row_contexts", node_window_off_by_one)
    differ, _ = differing_seeds(target, WINDOWED, drafters(draft_model)["tree"])
    assert len(differ) >= SEEDS // 3, f"a window off by one not detected (only seeds {differ} differ)"


def test_each_row_looks_back_over_the_tokens_plain_decoding_has_there():
    tree = FixedTree().propose([], 9)
    rows = row_contexts([9, 8, 7, 6, 5], tree, 3)
    assert rows[0] == [7, 6, 5]
    assert rows[1] == [6, 5, 3]  # node 0 (token 3, depth 1)
    assert rows[4] == [5, 3, 2]  # node 3 (token 2 under token 3, depth 2)
    seen = recent_tokens(rows[:2], 3, 10)
    assert seen[0].nonzero()[0].tolist() == [5, 6, 7]
    assert seen[1].nonzero()[0].tolist() == [3, 5, 6]


def test_min_p_drops_tokens_below_its_share_of_the_top_token():
    """Worked by hand: probabilities 0.5, 0.25, 0.125, 0.125; min_p 0.3 keeps those >= 0.15."""
    logits = torch.tensor([[4.0, 2.0, 1.0, 1.0]]).log()
    kept = probabilities(logits, SamplingParams(temperature=1.0, min_p=0.3))[0].tolist()
    assert kept == pytest.approx([2 / 3, 1 / 3, 0.0, 0.0])
    assert probabilities(logits, SamplingParams(temperature=1.0, min_p=1.0))[0].tolist() == [1.0, 0.0, 0.0, 0.0]
    # temperature first: at T = 0.5 the odds square (16 : 4 : 1 : 1), and 4/16 < 0.3 drops the second
    assert probabilities(logits, SamplingParams(temperature=0.5, min_p=0.3))[0].tolist() == [1.0, 0.0, 0.0, 0.0]


def test_a_draft_model_drafting_for_itself_under_the_penalty_has_every_draft_accepted(target, monkeypatch):
    """Its penalty covers the window the target's does at each drafted position, so a target drafting
    for itself proposes exactly what the target picks; a drafter looking back one token short does not."""

    def acceptance() -> tuple[int, int]:
        engine = Engine(target, IdTokenizer())
        proposed = accepted = 0
        for seed in range(4):
            request = GenerationRequest(
                prompt_ids=PROMPT,
                max_new_tokens=ANSWER,
                sampling=dataclasses.replace(WINDOWED, seed=seed),
                drafters=[ModelDrafter(target, max_tokens=4)],
                budget=4,
            )
            steps = list(engine.generate(request))[:-2]  # the last step may be cut by the length
            proposed += sum(s.proposed for s in steps)
            accepted += sum(s.accepted for s in steps)
        return proposed, accepted

    proposed, accepted = acceptance()
    assert accepted == proposed > 0
    monkeypatch.setattr(ModelDrafter, "_penalised", lambda self, tokens, row: _short_window(self, tokens, row))
    proposed, accepted = acceptance()
    assert accepted < proposed, "a draft model with another window was not noticed"


def _short_window(drafter, tokens, row):
    params = drafter.sampling
    return recent_tokens([list(tokens)[:-1]], params.repetition_window, row.shape[-1], like=row)
