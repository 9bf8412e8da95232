"""Lossless verification of a draft tree against the target's distributions.

``probs[0]`` is the target's (processed) distribution after the root, ``probs[1 + i]`` after
node i. Greedy: follow the child equal to the argmax.

Sampling (exact; the argument is in docs/architecture.md, "Exact sampling"). At each node the
children are tried one attempt at a time against the current distribution p:

1. model attempts first: a child that a drafter *sampled* from its distribution q (the tree's
   ``q_probs``) is accepted with probability min(1, p(x)/q(x)); on rejection
   p <- normalise(max(0, p - q)), a residual that does not depend on x;
2. then deterministic attempts: every child some drafter proposed without sampling (a sampled
   child that a deterministic drafter also proposed gets this second chance) is accepted with
   probability p(x); on rejection p(x) <- 0 and p is renormalised.

Descend into an accepted child; when every attempt fails, sample from what is left of p. Each
rule returns a token distributed as the p it started from, provided the model's x is distributed
as q given everything that decided its attempt (the composite drafter keeps it so: sampled
children are never merged away, reordered or pruned by their own value) and deterministic
proposals use none of the target's random numbers.

A sampled child may instead be verified by the deterministic rule (exact for any proposal;
``rule="deterministic"``). The model rule is the default: at every node it is at least as
likely to accept something (min(p, q) >= p * q), and it kept more tokens on SmolLM2 at T = 1
(docs/benchmarks.md, "Exact sampling").
"""

from __future__ import annotations

import torch

from draftscope.draft_tree import DraftTree

RULES = ("model", "deterministic")


def children_lists(tree: DraftTree) -> dict[int, list[int]]:
    kids: dict[int, list[int]] = {-1: []}
    for i, p in enumerate(tree.parents.tolist()):
        kids.setdefault(int(p), []).append(i)
    return kids


def verify_greedy(tree: DraftTree, probs: torch.Tensor) -> tuple[list[int], int]:
    """(accepted node indices root-down, the target's own next token)."""
    kids = children_lists(tree)
    best = probs.argmax(-1).tolist()
    tokens = tree.tokens.tolist()
    path, cur = [], -1
    while True:
        want = best[cur + 1]
        nxt = next((c for c in kids.get(cur, []) if tokens[c] == want), None)
        if nxt is None:
            return path, want
        path.append(nxt)
        cur = nxt


def fit_vocab(q: torch.Tensor, size: int) -> torch.Tensor:
    """A draft distribution over the target's vocabulary (a draft head may be padded differently;
    mass on ids the target lacks can never be accepted, so it is simply dropped)."""
    if q.shape[0] == size:
        return q
    return torch.nn.functional.pad(q[:size], (0, max(0, size - q.shape[0])))


def draft_distributions(q) -> list[torch.Tensor]:
    """A sampled node's draft distributions: one per drafter that sampled it (two model drafters
    may draw the same token; each draw is its own attempt)."""
    return list(q) if isinstance(q, (list, tuple)) else [q]


def verify_sampling(
    tree: DraftTree,
    probs: torch.Tensor,
    generator: torch.Generator,
    q_probs: dict[int, torch.Tensor] | None = None,
    *,
    also_proposed: set[int] | frozenset[int] = frozenset(),
    rule: str = "model",
) -> tuple[list[int], int]:
    """(accepted node indices root-down, the token sampled after them).

    ``q_probs[i]``: node i was sampled from this distribution (or from each of a list of them);
    other nodes are deterministic proposals. ``also_proposed``: sampled nodes a deterministic drafter
    proposed too. ``rule``: "model" or "deterministic", for sampled nodes."""
    if rule not in RULES:
        raise ValueError(f"unknown verification rule {rule!r} (one of {', '.join(RULES)})")
    kids = children_lists(tree)
    tokens = tree.tokens.tolist()
    q_probs = q_probs or {}
    path, cur = [], -1
    while True:
        p = probs[cur + 1].clone()
        children = kids.get(cur, [])
        sampled = [c for c in children if c in q_probs]
        deterministic = [c for c in children if c not in q_probs or c in also_proposed]
        accepted = None
        for c, q in ((c, q) for c in sampled for q in draft_distributions(q_probs[c])):
            q = fit_vocab(q, p.shape[0]).to(p.dtype)
            if rule == "deterministic":
                if c not in deterministic:
                    deterministic.insert(0, c)
                continue
            x = tokens[c]
            u = torch.rand((), generator=generator).item()
            qx = float(q[x])
            if qx > 0 and u < min(1.0, float(p[x]) / qx):
                accepted = c
                break
            residual = torch.clamp(p - q, min=0)
            total = float(residual.sum())
            if total > 0:  # zero only when p <= q everywhere, i.e. p == q: then x was accepted surely
                p = residual / total
        if accepted is None:
            for c in deterministic:
                x = tokens[c]
                u = torch.rand((), generator=generator).item()
                if u < float(p[x]):
                    accepted = c
                    break
                p[x] = 0
                total = float(p.sum())
                if total <= 0:  # cannot happen unless p(x) was 1 and u >= 1
                    break
                p = p / total
        if accepted is None:
            return path, int(torch.multinomial(p, 1, generator=generator).item())
        path.append(accepted)
        cur = accepted
