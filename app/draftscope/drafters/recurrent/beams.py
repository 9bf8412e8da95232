"""Beam search with the recurrent head, merged into one draft tree.

Every hypothesis that is in the beam at some depth becomes a node (width W, length L: at most
W x L nodes); hypotheses sharing a prefix share its nodes, which is ReDrafter's dynamic tree
attention: the target verifies each shared prefix once. A node's support is its path
probability under the head, so the step policy and the composite drafter read it like a draft
model's (its share of its parent's support is the head's probability given the parent).

Beams chosen by search are proposals like any other: verification accepts a node when its token is
the target's own choice there (verify.py), so they are exact at every temperature (ReDrafter's
own README admits a bias at T > 0, where it accepts beams by min(1, p/q) as if they were draws).
"""

from __future__ import annotations

import numpy as np
import torch

from draftscope.draft_tree import DraftSource, DraftTree


def end_rows(head, eos_ids) -> torch.Tensor | None:
    """bool [R]: which draft-vocabulary rows are end tokens (None when none are)."""
    if not eos_ids:
        return None
    mask = torch.isin(head.vocab_ids, torch.tensor(sorted(eos_ids), device=head.vocab_ids.device))
    return mask if bool(mask.any()) else None


@torch.inference_mode()
def beam_search(
    head, hidden: torch.Tensor, embed, root: int, *, width: int, length: int, eos_mask: torch.Tensor | None = None
) -> tuple[list[list[list[int]]], list[list[float]]]:
    """Beams at each depth: (token ids per depth [depth][beam] -> path, log-probabilities).

    ``hidden`` [H]: the target's last hidden state before ``root``; ``embed``: the target's
    embedding module; ``root``: the token the target wrote last; ``eos_mask``: end_rows()."""
    vocab_ids = head.vocab_ids
    dev = hidden.device
    state = head.first_state(embed(torch.tensor([root], device=dev)).float())  # [1, d]
    scores = torch.zeros(1, device=dev)
    paths: list[list[int]] = [[]]
    out_paths, out_scores = [], []
    h = hidden.float()[None]
    for depth in range(length):
        logp = torch.log_softmax(head.logits(state, h.expand(state.shape[0], -1)).float(), dim=-1)  # [b, R]
        cand = (scores[:, None] + logp).reshape(-1)
        k = min(width, cand.numel())
        top = torch.topk(cand, k)
        parent = top.indices // logp.shape[1]
        rows = top.indices % logp.shape[1]
        tokens = vocab_ids[rows]
        parent_l, tokens_l = parent.tolist(), tokens.tolist()
        paths = [paths[p] + [t] for p, t in zip(parent_l, tokens_l)]
        scores = top.values
        out_paths.append(paths)
        out_scores.append(scores.tolist())
        if depth + 1 == length:
            break
        state = head.next_state(state[parent], embed(tokens).float())
        if eos_mask is not None:
            ended = eos_mask[rows]
            if bool(ended.all()):
                break
            scores = torch.where(ended, torch.full_like(scores, float("-inf")), scores)  # EOS ends a beam
    return out_paths, out_scores


def beams_to_tree(paths_by_depth: list[list[list[int]]], scores_by_depth: list[list[float]], budget: int) -> DraftTree:
    """One tree of every beam prefix (shared prefixes once), BFS order, the ``budget`` most
    probable nodes kept (path probability falls with depth, so what is kept stays connected)."""
    nodes: dict[tuple, int] = {}
    tokens, parents, depth, support = [], [], [], []
    candidates = [
        (s, d, b) for d, level in enumerate(scores_by_depth) for b, s in enumerate(level) if s > float("-inf")
    ]
    keep = sorted(candidates, key=lambda c: (-c[0], c[1]))[: max(0, budget)]
    chosen = {(d, b) for _, d, b in keep}
    for d, level in enumerate(paths_by_depth):
        for b, path in enumerate(level):
            key = tuple(path)
            if (d, b) not in chosen or key in nodes or key[:-1] not in nodes and d > 0:
                continue
            nodes[key] = len(tokens)
            tokens.append(path[-1])
            parents.append(nodes[key[:-1]] if d > 0 else -1)
            depth.append(d + 1)
            support.append(float(np.exp(scores_by_depth[d][b])))
    k = len(tokens)
    return DraftTree(
        np.array(tokens, dtype=np.int64),
        np.array(parents, dtype=np.int32),
        np.array(depth, dtype=np.int32),
        np.array(support, dtype=np.float32),
        np.full(k, DraftSource.RECURRENT, dtype=np.int8),
    )
