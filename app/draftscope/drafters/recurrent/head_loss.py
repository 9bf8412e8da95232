"""The recurrent head against its frozen target, one batch at a time: the target's outputs (hidden
states, its logits over the draft vocabulary, the input embeddings, its greedy tokens), the head's
per-depth loss against them, and the validation figures (top-1/top-4 by depth, the greedy
chain's τ). Split from ``train`` so that module keeps the run (data, steps, checkpoints); this one
reads no datastore, so it sits in the drafters' layer."""

from __future__ import annotations

import numpy as np
import torch
from torch.nn import functional as F

from draftscope.drafters.recurrent.head import RecurrentHead
from draftscope.drafters.recurrent.target import as_target


def target_outputs(target, ids: torch.Tensor, lm_rows: torch.Tensor, *, full_logits: bool = False):
    """The frozen target (a transformers model or a recurrent.target view) on a batch: hidden states [B, T, H], its logits
    over the draft vocabulary [B, T, R], the input embeddings, and (``full_logits``) its greedy next
    tokens over the whole vocabulary."""
    target = as_target(target)
    with torch.no_grad():
        hidden, greedy = target.outputs(ids, greedy=full_logits)
        hidden = hidden.to(lm_rows.device)
        emb = target.embed(ids).float().to(lm_rows.device)
        return hidden, hidden @ lm_rows.T, emb, greedy.to(lm_rows.device) if greedy is not None else None


def head_losses(head: RecurrentHead, hidden: torch.Tensor, teacher: torch.Tensor, emb: torch.Tensor, length: int):
    """Per-depth soft cross-entropy against the target (a list of scalars) and the head's logits
    per depth; position t is drafted from h_t and the tokens after it."""
    n = hidden.shape[1] - length
    h = hidden[:, :n]
    losses, logits_by_depth = [], []
    state = None
    for k in range(1, length + 1):
        e = emb[:, k : k + n]
        state = head.first_state(e) if state is None else head.next_state(state, e)
        logits = head.logits(state, h)
        target = teacher[:, k : k + n].softmax(-1)
        losses.append(-(target * F.log_softmax(logits, dim=-1)).sum(-1).mean())
        logits_by_depth.append(logits)
    return losses, logits_by_depth


@torch.no_grad()
def validate(
    head: RecurrentHead, target, sequences: np.ndarray, length: int, lm_rows: torch.Tensor, device, batch: int = 8
) -> dict:
    """Figures on held-out sequences: per depth, how often the head's first choice is the target's
    own greedy next token (over the full vocabulary) and how often it is among the head's first
    four; the expected tokens per step of a greedy chain (1 + leading matches, teacher-forced: the
    exact figure when the data is the model's own greedy text); the loss."""
    top1 = np.zeros(length)
    top4 = np.zeros(length)
    lead_total, positions, loss_total, batches = 0.0, 0, 0.0, 0
    for start in range(0, len(sequences), batch):
        ids = torch.from_numpy(sequences[start : start + batch]).to(device)
        hidden, teacher, emb, greedy = target_outputs(target, ids, lm_rows, full_logits=True)
        losses, logits_by_depth = head_losses(head, hidden, teacher, emb, length)
        n = ids.shape[1] - length
        leading = torch.ones(ids.shape[0], n, dtype=torch.bool, device=device)
        lead = torch.zeros(ids.shape[0], n, device=device)
        for k, logits in enumerate(logits_by_depth, start=1):
            want = greedy[:, k : k + n]
            best = head.vocab_ids[logits.topk(4, dim=-1).indices]
            hit1 = best[..., 0] == want
            top1[k - 1] += float(hit1.sum())
            top4[k - 1] += float((best == want[..., None]).any(-1).sum())
            leading &= hit1
            lead += leading
        lead_total += float(lead.sum())
        positions += ids.shape[0] * n
        loss_total += float(sum(losses)) / length
        batches += 1
    return {
        "top1_by_depth": [round(float(x) / positions, 4) for x in top1],  # plain floats: checkpoints load them
        "top4_by_depth": [round(float(x) / positions, 4) for x in top4],  # with weights_only (no pickled numpy)
        "tau_chain": round(1 + lead_total / positions, 3),
        "loss": round(loss_total / max(1, batches), 4),
        "positions": int(positions),
    }
