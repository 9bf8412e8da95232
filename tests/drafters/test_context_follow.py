"""The conversation drafter follows a copy through small edits (issue 63): an answer that gives back
a function with a renamed identifier, type hints added after its parameters or a token dropped
keeps drafting after each change, the renamed identifier drafted renamed once the answer has
renamed it, and a followed copy drafts as deep as the budget asks, reporting its run.

Three kinds of test: a perfect-acceptance walk over scripted token streams (the drafter alone);
the engine on a scripted model whose answer is a renamed copy of its prompt (drafted and accepted
tokens counted); and the promise, on a tiny fp32 model at T > 0 and greedy: the answer with the
re-anchoring drafter equals plain decoding's token for token, the re-anchors exercised, and a
verifier biased to accept a drafted token at a miss is caught by the same check."""

from __future__ import annotations

import random

import numpy as np
import pytest
import torch
from engine_fixtures import IdTokenizer, Scripted, tiny_llama

import draftscope.engine.answer as engine_mod
from draftscope.draft_tree import children_lists
from draftscope.drafters.composite import CompositeDrafter
from draftscope.drafters.context import ContextDrafter
from draftscope.engine.engine import Engine, GenerationRequest
from draftscope.engine.sampling import SamplingParams
from draftscope.engine.verify import verify_tree

# ----------------------------------------------------------------------------- scripted streams

PAT, PATTERN = 7, (8, 9)  # the identifier, and its new name of two tokens
HINT = (5, 6)  # ": str" after a parameter
PARAMS = (PAT, 150, 151, 152, 153)
INSTRUCTION, ASK = [90, 91, 92], [93, 94]
EOS = 0
VOCAB = 512


def function(seed: int = 1) -> list[int]:
    """A 'function' of about 110 tokens: ``def name(pat, a, b, c, d):`` and twelve lines, six of
    which use ``pat``; words from a wide vocabulary, punctuation from a narrow one (as code has)."""
    rng = random.Random(seed)
    out = [1, 40, 41, 3, PAT, 11, 150, 11, 151, 11, 152, 11, 153, 4, 12, 13]
    for line in range(12):
        words = [rng.randrange(100, 400) for _ in range(3)]
        body = [13, 14, words[0], rng.randrange(10, 30), words[1], rng.randrange(10, 30), words[2], 12]
        if line % 2:
            body.insert(3, PAT)
        out += body
    return out


SOURCE = function()
PROMPT = INSTRUCTION + SOURCE + ASK


def renamed(source: list[int]) -> list[int]:
    return [t for s in source for t in (PATTERN if s == PAT else (s,))]


def hinted(source: list[int]) -> list[int]:
    """Type hints after each parameter (in the signature only: the body keeps ``pat`` bare)."""
    signature = source.index(4)
    return [t for i, s in enumerate(source) for t in ((s, *HINT) if i < signature and s in PARAMS else (s,))]


def trimmed(source: list[int]) -> list[int]:
    """Every body line's first word dropped (deletions)."""
    return [s for i, s in enumerate(source) if not (i > 1 and source[i - 2 : i] == [13, 14])]


def longest_drafted(tree, truth: list[int]) -> int:
    """How many of ``truth``'s tokens the tree drafts along one path from the root."""
    kids, tokens = children_lists(tree), tree.tokens.tolist()
    node, n = -1, 0
    while n < len(truth):
        node = next((c for c in kids.get(node, []) if tokens[c] == truth[n]), None)
        if node is None:
            return n
        n += 1
    return n


def walk(drafter, answer: list[int], budget: int = 64, *, stop: int | None = None, prompt=PROMPT):
    """A perfect-acceptance walk: each step accepts the longest drafted prefix of the true answer
    and the target's own next token, up to ``stop`` tokens. (per answer token: was it drafted, steps)."""
    stop = len(answer) if stop is None else stop
    drafter.reset(prompt)
    drafted, steps = [], 0
    while len(drafted) < stop:
        at = len(drafted)
        k = min(longest_drafted(drafter.propose(prompt + answer[:at], budget), answer[at:]), stop - at)
        drafted += [True] * k + [False] * (at + k < stop)
        drafter.observe(answer[at : len(drafted)])
        steps += 1
    return drafted, steps


# The drafter before issue 63 drafted 91 of the 125 renamed tokens (73%, in 35 steps), 106 of the
# 128 hinted (83%, 22 steps) and 79 of the 106 trimmed (75%, 28 steps) in these walks.
@pytest.mark.parametrize("edit", [renamed, hinted, trimmed], ids=lambda f: f.__name__)
def test_a_copy_with_small_edits_keeps_drafting_after_each_change(edit):
    answer = edit(SOURCE)
    drafter = ContextDrafter()
    drafted, steps = walk(drafter, answer)
    print(f"{edit.__name__}: {sum(drafted)}/{len(answer)} tokens drafted in {steps} steps")
    assert sum(drafted) >= 0.85 * len(answer), f"only {sum(drafted)} of {len(answer)} answer tokens were drafted"
    assert drafter.follower.reanchors >= 1, "the copy was never re-anchored: the edits went unfollowed"


def test_the_renamed_identifier_is_drafted_renamed_once_the_answer_renamed_it():
    answer = renamed(SOURCE)
    drafter = ContextDrafter()
    drafted, _ = walk(drafter, answer, budget=len(answer))  # steps end at misses only
    starts = [i for i in range(len(answer) - 1) if tuple(answer[i : i + 2]) == PATTERN]
    assert len(starts) == 7
    for i in starts[2:]:  # the first rename is learned; by the third every one is drafted
        assert drafted[i] and drafted[i + 1], f"the renamed identifier at {i} was not drafted"
    assert drafter.follower.subs.pairs == {(PAT,): PATTERN}


def test_a_followed_copy_drafts_as_deep_as_asked_and_reports_its_run_through_changes():
    rng = random.Random(5)
    long_source = [rng.randrange(100, 400) for _ in range(600)]
    for i in range(20, 600, 60):
        long_source[i] = PAT
    drafter = ContextDrafter()
    prompt = INSTRUCTION + long_source + ASK
    drafter.reset(prompt)
    answer = renamed(long_source)
    fed = 0
    while fed < 320:  # the answer copies 320 tokens, renaming as it goes (a draft per step, 16 deep)
        tree = drafter.propose(prompt + answer[:fed], 16)
        k = longest_drafted(tree, answer[fed:])
        drafter.observe(answer[fed : fed + k + 1])
        fed += k + 1
    tree = drafter.propose(prompt + answer[:fed], 200)
    assert tree.max_depth == 200 and len(tree) == 200, "a followed copy drafts as deep as the budget asks"
    assert longest_drafted(tree, answer[fed:]) == 200, "the renames ahead are drafted renamed"
    # the first rename re-anchored; the next four were predicted: trusted as one long run
    assert tree.extra["copy_run"] >= tree.match_len >= 300, "five renames later the copy is still a long run"
    assert tree.extra["reanchored"] is False
    # with another drafter beside it, the merged tree still says what the copy is
    other = ContextDrafter(min_suffix=2, max_suffix=2, max_depth=4)
    other.reset(prompt + answer[:fed])
    other.follower.min_run = 10**6  # never drafts a followed copy deep: a plain n-gram drafter
    merged = CompositeDrafter([drafter, other]).propose(prompt + answer[:fed], 64)
    assert merged.extra["copy_run"] >= merged.match_len >= 300


def test_just_after_a_change_the_tree_says_it_continues_from_a_reanchor():
    body = SOURCE.index(4) + 3
    answer = SOURCE[:body] + renamed(SOURCE[body:])  # renamed in the body only: first met in a long copy
    first = answer.index(PATTERN[0])
    drafter = ContextDrafter()
    walk(drafter, answer, stop=first + 3)  # the renamed identifier and the token after it
    tree = drafter.propose(PROMPT + answer[: first + 3], 32)
    assert tree.extra["reanchored"] is True and tree.extra["since_change"] == 0
    assert tree.extra["copy_run"] >= first - 2, "the run goes on through the change"
    assert tree.match_len < 4, "but the step policy trusts the copy anew from the change"
    assert longest_drafted(tree, answer[first + 3 :]) == 32
    assert drafter.follower.subs.pairs == {(PAT,): PATTERN}


def test_a_learned_substitution_the_answer_does_not_make_is_forgotten_and_the_copy_goes_on():
    third = [i for i, t in enumerate(SOURCE) if t == PAT][3]
    # renamed up to the third use in the body, which keeps the old name (say, in a string), as the rest does
    answer = renamed(SOURCE[:third]) + SOURCE[third:]
    at = len(renamed(SOURCE[:third]))
    drafter = ContextDrafter()
    drafted, _ = walk(drafter, answer, stop=at)
    assert drafted[at - 10 :] == [True] * 10 and drafter.follower.subs.pairs == {(PAT,): PATTERN}
    walk(drafter, answer, stop=at + 2)
    assert drafter.follower.following and not drafter.follower.subs.pairs, "the pair goes, the copy stays"
    tree = drafter.propose(PROMPT + answer[: at + 2], 64)
    rest = answer[at + 2 :]
    assert PAT in rest and longest_drafted(tree, rest) == min(64, len(rest)), "the old name is drafted at its next uses"


def test_without_a_copy_occurrences_still_branch_as_before():
    """A context whose last two tokens occurred three times, followed by three different tokens,
    and no copy run: one branch per occurrence, no copy reported."""
    context = [50, 51, 60, 61, 70, 50, 51, 62, 63, 71, 50, 51, 64, 65, 72, 80, 50, 51]
    drafter = ContextDrafter()
    drafter.reset(context)
    tree = drafter.propose(context, 64)
    assert sorted(tree.tokens[tree.parents == -1].tolist()) == [60, 62, 64]
    assert tree.match_len == 2 and tree.match_count == 3 and tree.max_depth <= 10
    assert tree.extra["copy_run"] == 0 and tree.extra["reanchored"] is False


def test_the_followed_copy_has_the_top_support_where_other_occurrences_branch():
    """The prompt holds one passage twice, followed by different text; the answer copies the
    second (its opening too). The copy's chain leads; the other occurrence still branches."""
    passage = list(range(200, 210))
    first, second = list(range(60, 70)), list(range(70, 80))
    prompt = [30, 31, 32, 33, *passage, *first, 38, 34, 35, 36, 37, *passage, *second, 39]
    answer = [34, 35, 36, 37, *passage]
    drafter = ContextDrafter()
    walk(drafter, answer, prompt=prompt)
    tree = drafter.propose(prompt + answer, 64)
    top = np.flatnonzero(tree.parents == -1)
    assert sorted(tree.tokens[top].tolist()) == [60, 70], "one branch per occurrence"
    assert int(tree.tokens[top[np.argmax(tree.support[top])]]) == 70, "the followed copy leads"
    assert tree.extra["copy_run"] >= 14 and tree.max_depth > 10


# ----------------------------------------------------------------------------- a scripted model


def test_a_scripted_rename_answer_keeps_drafting_after_each_renamed_identifier():
    script = renamed(SOURCE)
    engine = Engine(backend=Scripted(IdTokenizer(), len(PROMPT), script, eos=EOS, vocab=VOCAB))
    request = GenerationRequest(
        prompt_ids=PROMPT, max_new_tokens=400, drafters=[ContextDrafter()], budget=200, stop_loops=False
    )
    *steps, final = engine.generate(request)
    assert final.token_ids[:-1] == script and final.finish_reason == "eos"
    accepted = sum(s.accepted for s in steps)
    provenance = [p for s in steps for p in s.provenance]
    print(
        f"{accepted} of {len(script)} tokens accepted of {sum(s.proposed for s in steps)} drafted, {len(steps)} steps"
    )
    assert accepted >= 0.9 * len(script) and len(steps) <= 12, (accepted, len(steps))
    starts = [i for i in range(len(script) - 1) if tuple(script[i : i + 2]) == PATTERN]
    for i in starts[2:]:
        assert provenance[i] == provenance[i + 1] == "context", f"the renamed identifier at {i} was not drafted"


# ----------------------------------------------------------------------------- the promise

V = 8
SEEDS = 8
ANSWER = 40


@pytest.fixture(scope="module")
def copier():
    """A peaked tiny Llama (8 tokens); its prompt is its own sampled answer, so a new answer
    follows the prompt for stretches and leaves it now and then: the drafter re-anchors."""
    torch.manual_seed(0)
    model = tiny_llama(V, seed=3, layers=1, hidden=32, sharpen=10.0)
    engine = Engine(model, IdTokenizer())
    *_, own = engine.generate(
        GenerationRequest(prompt_ids=[1, 2, 3], max_new_tokens=80, sampling=SamplingParams(temperature=1.0, seed=7))
    )
    return engine, [1, 2, 3, *own.token_ids]


class CountingContext(ContextDrafter):
    """Counts the draft tokens accepted from trees that continue a re-anchored copy or guess
    where a change ends."""

    def __init__(self) -> None:
        super().__init__()
        self.after_changes = 0
        self._last: dict = {}

    def propose(self, context_ids, budget):
        tree = super().propose(context_ids, budget)
        self._last = {"after_change": tree.extra.get("reanchored") or bool(self.follower.lost)}
        return tree

    def feedback(self, tree, accepted_path):
        if self._last.get("after_change"):
            self.after_changes += len(accepted_path)


def seeded_answer(engine, prompt, params: SamplingParams, drafters, budget) -> tuple[list[int], int]:
    """(the answer's tokens, draft tokens accepted)."""
    request = GenerationRequest(
        prompt_ids=prompt, max_new_tokens=ANSWER, sampling=params, drafters=drafters, budget=budget
    )
    *steps, final = engine.generate(request)
    assert final.error is None, final.error
    return final.token_ids, sum(s.accepted for s in steps)


def identity(engine, prompt, params, *, seeds: int = SEEDS) -> tuple[list[int], int, int, int]:
    """(seeds whose answer with the drafter differs from plain decoding's, draft tokens accepted,
    of those after a change, re-anchors)."""
    differ, accepted, after, reanchors = [], 0, 0, 0
    for seed in range(seeds):
        p = SamplingParams(temperature=params.temperature, seed=100 + seed)
        plain, _ = seeded_answer(engine, prompt, p, [], None)
        drafter = CountingContext()
        drafted, got = seeded_answer(engine, prompt, p, [drafter], 32)
        accepted, after, reanchors = (
            accepted + got,
            after + drafter.after_changes,
            reanchors + drafter.follower.reanchors,
        )
        if drafted != plain:
            differ.append(seed)
    return differ, accepted, after, reanchors


@pytest.mark.usefixtures("one_thread")
@pytest.mark.parametrize("temperature", [1.0, 0.0], ids=["t1", "greedy"])
def test_answers_with_reanchored_drafts_equal_plain_decoding(copier, temperature):
    engine, prompt = copier
    differ, accepted, after, reanchors = identity(engine, prompt, SamplingParams(temperature=temperature))
    print(f"T={temperature}: {accepted} draft tokens accepted, {after} after a change, {reanchors} re-anchors")
    assert not differ, f"seeds {differ}: the answer with drafts differs from plain decoding's"
    assert accepted >= SEEDS * 4, f"only {accepted} draft tokens accepted: the case proves little"
    if temperature > 0:  # greedy, the model repeats itself exactly: nothing to re-anchor
        assert reanchors >= SEEDS and after >= SEEDS, "the re-anchoring path was hardly exercised"


def accepts_a_draft_at_a_miss(tree, chosen):
    """A broken verifier: where the target's token has no drafted child, it takes the first
    drafted child anyway."""
    path, bonus = verify_tree(tree, chosen)
    kids = children_lists(tree).get(path[-1] if path else -1, [])
    if kids:
        path = [*path, kids[0]]
        bonus = int(chosen[kids[0] + 1])
    return path, bonus


@pytest.mark.usefixtures("one_thread")
def test_the_identity_check_rejects_a_verifier_that_accepts_a_draft_at_a_miss(copier, monkeypatch):
    monkeypatch.setattr(engine_mod, "verify_tree", accepts_a_draft_at_a_miss)
    engine, prompt = copier
    differ, *_ = identity(engine, prompt, SamplingParams(temperature=1.0), seeds=6)
    assert len(differ) >= 4, f"a biased verifier went unnoticed (only seeds {differ} differ)"
