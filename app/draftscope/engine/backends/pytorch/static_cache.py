"""A static KV cache for the torch backend, so each step's forward has the same shapes every time.

Keys and values live in tensors allocated once (``max_len`` positions per layer). A step writes its
tokens at the slots the backend names (``slots``, a tensor the model's attention layers read); the
attention sees the whole buffer through a mask that allows the committed prefix and, for a tree,
each node's ancestors. Tree steps are padded to a few sizes (:data:`BUCKETS`): padding nodes attend
to the prefix and themselves, are written past the real nodes and never accepted, so every step of
a bucket has one shape, which a CUDA graph can replay (engine/backends/pytorch/step_graphs.py). Commit moves the
accepted nodes' entries into place and truncate only moves the end: stale entries past it are
masked out and overwritten by later steps.
"""

from __future__ import annotations

import numpy as np
import torch
from transformers.cache_utils import Cache, StaticLayer

from draftscope.draft_tree import DraftTree

BUCKETS = (0, 4, 8, 16, 32, 64)  # tree sizes a step is padded to (larger trees run unpadded)
# A step's attention reads the buffer's first `span` slots, the smallest span that holds the step:
# a kernel's time grows with the keys it reads, masked or not (on an H200 a tree step over all 8,257
# slots cost 8-9 ms more than a plain one whatever the model's size), so a short conversation should
# not pay for the whole buffer. Spans double from the first; the last is the whole buffer.
FIRST_SPAN = 1024


def bucket_for(nodes: int) -> int:
    """The padded size of a tree of ``nodes`` nodes."""
    return next((b for b in BUCKETS if b >= nodes), nodes)


def spans_for(max_len: int, first: int = FIRST_SPAN) -> tuple[int, ...]:
    """The key spans of a buffer of ``max_len`` slots: ``first``, doubling while at most half the
    buffer, then ``max_len``."""
    spans, span = [], first
    while 2 * span <= max_len:
        spans.append(span)
        span *= 2
    return (*spans, max_len)


def span_for(spans: tuple[int, ...], end: int) -> int:
    """The smallest of ``spans`` holding slots [0, end)."""
    return next(s for s in spans if s >= end)


class _SlotLayer(StaticLayer):
    """One layer's keys and values, written at the owner's current slots."""

    def __init__(self, max_len: int, owner: StaticTreeCache) -> None:
        super().__init__(max_cache_len=max_len)
        self.owner = owner

    def update(self, key_states, value_states, *args, **kwargs):
        if not self.is_initialized:
            self.lazy_initialization(key_states, value_states)
        self.keys.index_copy_(2, self.owner.slots, key_states)
        self.values.index_copy_(2, self.owner.slots, value_states)
        view = self.owner.view
        if view is not None:  # a prefill (the prompt alone, causally) or a step's span (masked)
            return self.keys[:, :, :view], self.values[:, :, :view]
        return self.keys, self.values

    def get_seq_length(self) -> int:
        return self.owner.past

    def get_mask_sizes(self, *args, **kwargs) -> tuple[int, int]:
        view = self.owner.view
        return (self.max_cache_len if view is None else view), 0


class StaticTreeCache(Cache):
    def __init__(self, layers: int, max_len: int, device) -> None:
        super().__init__(layers=[_SlotLayer(max_len, self) for _ in range(layers)])
        self.max_len = max_len
        self.past = 0  # committed positions
        self.slots = torch.zeros(1, dtype=torch.long, device=device)  # where the running step writes
        # attention sees only the first `view` slots: during a prefill the prompt's, during a step its span
        self.view: int | None = None

    def move(self, sources: list[int], targets: list[int]) -> None:
        """Copy the entries at ``sources`` to ``targets`` in every layer (an accepted path into place)."""
        device = self.slots.device
        src = torch.tensor(sources, dtype=torch.long, device=device)
        dst = torch.tensor(targets, dtype=torch.long, device=device)
        for keys, values in written_layers(self):
            keys.index_copy_(2, dst, keys.index_select(2, src))
            values.index_copy_(2, dst, values.index_select(2, src))


def written_layers(cache: Cache) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """(keys, values) of each of ``cache``'s static layers that a forward has written (a layer
    allocates its buffers at its first write)."""
    return [
        (layer.keys, layer.values)
        for layer in cache.layers
        if isinstance(layer, StaticLayer)
        and layer.is_initialized
        and layer.keys is not None
        and layer.values is not None
    ]


def step_layout(tree: DraftTree, past: int, padded: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """For [root] + ``tree`` padded to ``padded`` nodes, written at slots past .. past + padded:
    (position offsets [q], allowed [q, q] among the step's own slots, real [q]) with q = padded + 1.
    Padding rows see only themselves here (and the prefix, as every row does)."""
    n, q = len(tree), padded + 1
    positions = np.ones(q, dtype=np.int64)  # padding: any position inside the context will do
    positions[0] = 0
    positions[1 : n + 1] = tree.depth
    allowed = np.eye(q, dtype=bool)
    allowed[: n + 1, 0] = True
    if n:
        allowed[1 : n + 1, 1 : n + 1] = tree.ancestor_mask()
    real = np.zeros(q, dtype=bool)
    real[: n + 1] = True
    return positions, allowed, real


def additive_mask(allowed_own: torch.Tensor, past: int, max_len: int, dtype) -> torch.Tensor:
    """[1, 1, q, max_len] (``max_len``: the step's span): every row sees the committed prefix [0, past) and the step's own slots
    as ``allowed_own`` [q, q] says; nothing else (stale entries, other steps' padding)."""
    q = allowed_own.shape[0]
    device = allowed_own.device
    allowed = torch.zeros(q, max_len, dtype=torch.bool, device=device)
    allowed[:, :past] = True
    allowed[:, past : past + q] = allowed_own
    mask = torch.zeros(q, max_len, dtype=dtype, device=device)
    mask.masked_fill_(~allowed, torch.finfo(dtype).min)
    return mask[None, None]


def fill_additive_mask(mask: torch.Tensor, past: torch.Tensor, own: torch.Tensor, keys: torch.Tensor) -> None:
    """``additive_mask`` computed on the mask's device and written into ``mask`` [1, 1, q, span] in
    place, from the cache length ``past`` (a device tensor) and ``own`` [q, q]; ``keys`` is
    arange(span) on the device. No host work: a captured graph can run it, so a step sends the card
    its cache length and tree (q x q), not a q x span mask."""
    q = own.shape[0]
    offset = keys - past  # where each key sits among the step's own slots
    inside = (offset >= 0) & (offset < q)
    allowed = (keys < past) | (inside & own[:, offset.clamp(0, q - 1)])
    mask.zero_()
    mask[0, 0].masked_fill_(~allowed, torch.finfo(mask.dtype).min)
