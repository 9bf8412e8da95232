"""Turning a draft tree into one target forward: the input is [root] + tree tokens, each node
attends to the cache, the root, its ancestors and itself, at position past + depth."""

from __future__ import annotations

import numpy as np
import torch

from draftscope.draft_tree import DraftTree


def tree_inputs(
    root: int, tree: DraftTree, past_len: int, device, dtype
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor | None]:
    """(input_ids [1, n+1], position_ids [1, n+1], additive 4D mask [1, 1, n+1, past+n+1]).
    With an empty tree the mask is None: one token attends to everything, the model's own path."""
    n = len(tree)
    if n == 0:
        return (torch.tensor([[root]], device=device), torch.tensor([[past_len]], device=device), None)
    ids = np.empty(n + 1, dtype=np.int64)
    ids[0] = root
    ids[1:] = tree.tokens
    positions = past_len + np.concatenate([[0], tree.depth.astype(np.int64)])
    allowed = np.zeros((n + 1, n + 1), dtype=bool)
    allowed[:, 0] = True
    allowed[1:, 1:] = tree.ancestor_mask()
    full = np.ones((n + 1, past_len + n + 1), dtype=bool)
    full[:, past_len:] = allowed
    mask = torch.zeros(full.shape, dtype=dtype)
    mask.masked_fill_(torch.from_numpy(~full), torch.finfo(dtype).min)
    return (
        torch.from_numpy(ids).to(device).unsqueeze(0),
        torch.from_numpy(positions).to(device).unsqueeze(0),
        mask.to(device)[None, None],
    )


def keep_accepted(cache, past_len: int, path: list[int]) -> None:
    """After a tree forward the cache holds past + root + every node; keep past + root + the
    accepted nodes. Only the tail moves: accepted entries are gathered into place and the rest
    is cut off, so the cost is the path length, not the cache length."""
    base = past_len + 1
    contiguous = path == list(range(len(path)))  # plain steps and accepted chains: just cut
    for layer in cache.layers:
        if getattr(layer, "keys", None) is None or layer.keys.numel() == 0:
            continue
        if not contiguous:
            idx = torch.tensor(path, dtype=torch.long, device=layer.keys.device) + base
            layer.keys[..., base : base + len(path), :] = layer.keys.index_select(-2, idx)
            layer.values[..., base : base + len(path), :] = layer.values.index_select(-2, idx)
        layer.keys = layer.keys[..., : base + len(path), :]
        layer.values = layer.values[..., : base + len(path), :]


def crop_cache(cache, length: int) -> None:
    """Keep the first ``length`` positions (sliced directly: ``Cache.crop``'s meaning changed
    between transformers releases)."""
    for layer in cache.layers:
        if getattr(layer, "keys", None) is not None and layer.keys.numel() and layer.keys.shape[-2] > length:
            layer.keys = layer.keys[..., :length, :]
            layer.values = layer.values[..., :length, :]
