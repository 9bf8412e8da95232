"""The per-step policy: a tree when the step's drafts can pay for their verification, plain
decoding when they cannot, learned acceptance, and drafting itself skipped while it does not pay."""

import numpy as np

from draftscope.draft_tree import DraftSource, DraftTree
from draftscope.drafters import Drafter
from draftscope.engine.policy import StepPolicy, shares, subtree

# Seconds per verify forward by tree size, shaped like a small model on this CPU.
CPU_LIKE = {0: 0.060, 2: 0.066, 4: 0.072, 8: 0.085, 16: 0.100, 32: 0.130, 64: 0.190}


def true_cost(n):
    return StepPolicy(dict(CPU_LIKE)).cost(n)


def chain(n, source=DraftSource.RETRIEVAL, support=100.0):
    """A chain every match agrees on (share 1 at every level)."""
    return DraftTree(
        np.arange(10, 10 + n),
        np.arange(-1, n - 1, dtype=np.int32),
        np.arange(1, n + 1, dtype=np.int32),
        np.full(n, support, np.float32),
        np.full(n, source, np.int8),
    )


def scattered(n, source=DraftSource.RETRIEVAL):
    """n first-level candidates, one match each: no candidate is likelier than 1/n."""
    return DraftTree(
        np.arange(10, 10 + n),
        np.full(n, -1, np.int32),
        np.ones(n, np.int32),
        np.ones(n, np.float32),
        np.full(n, source, np.int8),
    )


def test_a_tree_the_matches_agree_on_is_verified_and_scattered_guesses_are_not():
    policy = StepPolicy(dict(CPU_LIKE))
    kept = policy.trim(chain(8))
    assert len(kept) >= 4 and policy.last.reason == "tree", policy.last
    assert len(policy.trim(scattered(32))) == 0 and policy.last.reason == "plain: drafts cannot pay"


def test_acceptance_is_learned_per_drafter():
    policy = StepPolicy(dict(CPU_LIKE))
    for _ in range(60):  # the datastore's unanimous chains are always rejected here
        tree = policy.trim(chain(8))
        policy.update(tree, [], draft_seconds=0.001, verify_seconds=true_cost(len(tree)), drafted=True)
    verified = [len(policy.trim(chain(8))) for _ in range(12)]
    # No longer verified, but for one node now and then (to notice when they start to be accepted).
    assert max(verified) <= 1 and sum(verified) <= 2, verified
    for _ in range(30):  # while the conversation's chains are accepted whole
        tree = policy.trim(chain(8, DraftSource.CONTEXT))
        policy.update(
            tree, list(range(len(tree))), draft_seconds=0.001, verify_seconds=true_cost(len(tree)), drafted=True
        )
    assert len(policy.trim(chain(8, DraftSource.CONTEXT))) == 8
    # The datastore's chain: its first node's 1-in-8 estimate still pays where a node costs 5% of a
    # step, and a node below an accepted one is likelier (the rule of succession): a few nodes at most.
    assert len(policy.trim(chain(8))) <= 3


def test_drafting_that_does_not_pay_costs_at_most_a_look_now_and_then():
    """Never slower: while drafts are not taken, asking a dear drafter (a draft model, 50 ms on a
    60 ms step) costs about LOOK_SHARE of the plain steps' time; a cheap one (the conversation's,
    0.1 ms) still looks every step, so a text the answer starts to copy is drafted at once."""
    from draftscope.engine.policy import MAX_LOOK_INTERVAL

    dear = StepPolicy(dict(CPU_LIKE))
    asked = []
    for _ in range(240):
        n = dear.draft_budget()
        asked.append(n)
        dear.update(DraftTree.empty(), [], draft_seconds=0.05 if n else 0.0, verify_seconds=CPU_LIKE[0], drafted=n > 0)
    looks = sum(n > 0 for n in asked)
    assert 2 <= looks and looks * 0.05 <= 0.025 * 240 * CPU_LIKE[0], f"{looks} looks in 240 steps: {asked}"
    for _ in range(MAX_LOOK_INTERVAL + 4):  # drafts start to win (a copy-heavy stretch): drafting resumes
        n = dear.draft_budget()
        asked.append(n)
        dear.update(
            chain(6),
            list(range(6)) if n else [],
            draft_seconds=0.002 if n else 0.0,
            verify_seconds=CPU_LIKE[8] if n else CPU_LIKE[0],
            drafted=n > 0,
        )
    assert all(n > 0 for n in asked[-4:]), asked
    cheap = StepPolicy(dict(CPU_LIKE))
    for _ in range(50):
        n = cheap.draft_budget()
        assert n > 0, "a drafter that costs 0.1 ms a look is asked every step"
        cheap.update(DraftTree.empty(), [], draft_seconds=0.0001, verify_seconds=CPU_LIKE[0], drafted=True)


def test_a_long_verbatim_match_is_trusted_with_a_longer_chain():
    """An answer that has followed a text for 40 tokens is likelier to go on following it than one
    that matched 3: before any evidence, more of the same chain is verified for it."""
    steep = {0: 1.0, 1: 1.56, 2: 2.0, 4: 2.9, 8: 4.8, 16: 8.6, 32: 16.5, 64: 32.0}  # a 2-core CPU's curve
    policy = StepPolicy(steep)
    short = chain(16, DraftSource.CONTEXT, support=1.0)
    long = DraftTree(short.tokens, short.parents, short.depth, short.support, short.source, match_len=40)
    assert len(policy.trim(long)) > len(policy.trim(short)) >= 0
    assert len(policy.trim(long)) >= 2


def test_costs_recover_from_a_spike():
    spiked = {n: (c if n == 0 else c * 4) for n, c in CPU_LIKE.items()}  # measured while the machine was busy
    policy = StepPolicy(spiked)
    for _ in range(20):
        tree = chain(4)
        policy.update(tree, list(range(4)), draft_seconds=0.001, verify_seconds=CPU_LIKE[4], drafted=True)
    assert abs(policy.cost(4) - CPU_LIKE[4]) < 0.01
    assert len(policy.trim(chain(8))) > 0


def test_subtree_keeps_parents_and_renumbers():
    tree = DraftTree(
        np.array([5, 6, 7, 8]),
        np.array([-1, -1, 0, 1], np.int32),
        np.array([1, 1, 2, 2], np.int32),
        np.array([3, 1, 3, 1], np.float32),
        np.full(4, DraftSource.MODEL, np.int8),
    )
    sub = subtree(tree, np.array([False, True, False, True]))
    assert sub.tokens.tolist() == [6, 8] and sub.parents.tolist() == [-1, 0]
    assert np.allclose(shares(tree), [0.75, 0.25, 1.0, 1.0])


class _Clock:
    """The composite's clock, advanced only by the drafters' declared costs: the test is about the
    gate's decisions, not about how busy the machine running it is."""

    now = 0.0

    @classmethod
    def perf_counter(cls):
        return cls.now


class _Drafter(Drafter):
    """Proposes a fixed chain; ``delay`` seconds of drafting (a draft model's cost) on _Clock."""

    def __init__(self, name, source, delay):
        self.name, self.source, self.delay, self.calls = name, source, delay, 0

    def reset(self, ids):
        pass

    def observe(self, ids):
        pass

    def propose(self, ids, budget):
        self.calls += 1
        _Clock.now += self.delay
        tree = chain(3, self.source)
        return DraftTree(tree.tokens + 100 * int(self.source), tree.parents, tree.depth, tree.support, tree.source)


def test_a_slow_drafter_sits_out_while_its_drafts_do_not_pay_for_its_time(monkeypatch):
    import draftscope.drafters.composite as composite_mod
    from draftscope.drafters.composite import CompositeDrafter

    monkeypatch.setattr(composite_mod, "time", _Clock)

    slow = _Drafter("model", DraftSource.MODEL, 0.02)
    fast = _Drafter("context", DraftSource.CONTEXT, 0.0)
    composite = CompositeDrafter([slow, fast], step_cost=0.1)
    for _ in range(60):  # nothing the slow drafter proposes is accepted
        tree = composite.propose([1, 2, 3], 8)
        composite.feedback(tree, [])
    assert fast.calls == 60 and slow.calls <= 12, (slow.calls, "it still tries now and then, ever more rarely")
    slow.calls = 0
    for _ in range(80):  # its drafts start to be accepted (2 tokens a step): it runs every step again
        tree = composite.propose([1, 2, 3], 8)
        path = [i for i in range(len(tree)) if tree.source[i] == DraftSource.MODEL][:2]
        composite.feedback(tree, path)
    assert slow.calls >= 40, slow.calls


# Measured at load on a 2-core AVX2 box (Qwen2.5-Coder-1.5B Q4_K_M on llama.cpp): one more token
# nearly doubles a step.
LLAMA_CPU = {0: 0.064, 1: 0.105, 2: 0.155, 3: 0.182, 4: 0.227, 8: 0.596, 16: 0.736, 32: 1.2, 64: 2.29}


def test_a_one_node_tree_is_learned_at_its_own_size_never_as_a_plain_step():
    policy = StepPolicy(dict(LLAMA_CPU))
    for _ in range(30):
        policy.update(chain(1), [0], draft_seconds=0.001, verify_seconds=0.130, drafted=True)
    assert abs(policy.cost(0) - LLAMA_CPU[0]) < 1e-9, "a plain step's cost moved with one-node trees"
    assert abs(policy.cost(1) - 0.130) < 0.002
    for _ in range(30):  # a size the curve never measured starts from its estimate, then follows the steps
        policy.update(chain(5), [], draft_seconds=0.001, verify_seconds=0.300, drafted=True)
    assert abs(policy.cost(5) - 0.300) < 0.003 and policy.cost(4) <= policy.cost(5)


def test_where_one_more_token_nearly_doubles_a_step_only_near_certain_drafts_are_verified():
    policy = StepPolicy(dict(LLAMA_CPU))
    assert len(policy.trim(chain(8))) == 0, "an unproven datastore chain (prior 0.6 a node) cannot pay here"
    for _ in range(40):  # the conversation's drafts are accepted whole, again and again
        policy.calibration.observe(chain(4, DraftSource.CONTEXT), [0, 1, 2, 3])
    kept = policy.trim(chain(8, DraftSource.CONTEXT))
    assert len(kept) >= 3 and policy.last.reason == "tree", policy.last


def explorations(costs, steps=300):
    policy = StepPolicy(dict(costs))
    verified = 0
    for _ in range(steps):
        tree = policy.trim(scattered(8))  # never worth a tree: only exploration verifies a node
        verified += len(tree) > 0
        policy.update(tree, [], draft_seconds=0.0, verify_seconds=policy.cost(len(tree)), drafted=True)
    return verified


def test_exploring_costs_a_small_share_of_the_time_wherever_it_runs():
    on_cpu, flat = explorations(LLAMA_CPU), explorations(CPU_LIKE)
    extra = (LLAMA_CPU[1] - LLAMA_CPU[0]) / LLAMA_CPU[0]  # what a wasted exploration costs, in plain steps
    assert on_cpu * extra <= 0.04 * 300, f"{on_cpu} explorations of +{extra:.0%} each in 300 steps"
    assert on_cpu >= 3, "drafts that start to be accepted must still be noticed"
    assert flat >= 40, f"where a node is nearly free, exploring stays frequent ({flat} in 300 steps)"
