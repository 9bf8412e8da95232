"""Lossless verification of a draft tree against the target's distributions.

``probs[0]`` is the target's (processed) distribution after the root, ``probs[1 + i]`` after
node i. Greedy: follow the child equal to the argmax. Sampling (exact): at each node try the
children in order; a deterministic child x is accepted with probability p(x), else p(x) <- 0 and
p is renormalised; a model child with draft distribution q is accepted with probability
min(1, p(x) / q(x)), else p <- normalise(max(0, p - q)). Descend into an accepted child; when
all are rejected, sample from what is left of p; at an accepted leaf sample from its p. The
result is distributed exactly as plain sampling (never "pick the best branch" afterwards).
"""

from __future__ import annotations

import torch

from draftscope.draft_tree import DraftSource, DraftTree


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


def verify_sampling(
    tree: DraftTree, probs: torch.Tensor, generator: torch.Generator, q_probs: dict[int, torch.Tensor] | None = None
) -> tuple[list[int], int]:
    kids = children_lists(tree)
    tokens = tree.tokens.tolist()
    sources = tree.source.tolist()
    q_probs = q_probs or {}
    path, cur = [], -1
    while True:
        p = probs[cur + 1].clone()
        accepted = None
        for c in kids.get(cur, []):
            x = tokens[c]
            u = torch.rand((), generator=generator).item()
            q = q_probs.get(c) if sources[c] == DraftSource.MODEL else None
            if q is not None and q.shape[0] != p.shape[0]:  # draft head padded differently
                q = torch.nn.functional.pad(q[: p.shape[0]], (0, max(0, p.shape[0] - q.shape[0])))
            if q is not None:
                qx = float(q[x])
                if qx > 0 and u < min(1.0, float(p[x]) / qx):
                    accepted = c
                    break
                residual = torch.clamp(p - q.to(p.dtype), min=0)
                total = float(residual.sum())
                p = residual / total if total > 0 else p
            else:
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
