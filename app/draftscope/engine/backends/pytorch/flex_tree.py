"""Tree attention on FlexAttention for the graphed static-cache steps (issue 42, item 2).

SDPA's kernels read every key of a step's span, masked or not, so a tree step's cost followed the
span (static_cache.spans_for) rather than the context. FlexAttention visits only the key blocks a
block mask lists: the committed prefix as full blocks (no mask evaluated), the blocks holding the
step's own slots as partial ones (the tree's ancestor mask evaluated), nothing past them.

Each bucket (tree size x span) holds one :class:`TreeMask`, made once when its graph is captured;
a step fills it in place on the device from the cache length and the tree (``fill``): the block
counts and indices are computed from a device tensor holding the cache length, so a captured graph
reads the same buffers every replay and no ``create_block_mask`` runs per step.

Query heads are padded with zero heads to a power of two per key/value head (the catalogue's ratios
are 3, 6 and 7): FlexAttention's split-KV decoding kernel on CUDA takes only power-of-two groups
(pytorch issues 143117, 151359), and without it a few queries over many keys run on one block of
the card. The padded heads' outputs are dropped; the real heads' are unchanged (tests).

The attention function is registered with transformers under ``ATTENTION``; it runs FlexAttention
where the mask it gets is a BlockMask (the graphed tree steps) and transformers' SDPA otherwise
(prompts, eager steps), so one model serves both.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch.nn.attention.flex_attention import BlockMask, flex_attention

BLOCK = 128  # FlexAttention's block of keys (and of queries: a step's <= 65 queries are one block)
ATTENTION = "draftscope_flex_tree"  # the name transformers knows the attention function by


def padded_group(group: int) -> int:
    """Query heads per key/value head once padded: the next power of two."""
    return 1 << max(0, group - 1).bit_length()


class TreeMask:
    """A step's mask over ``q`` queries (root + tree + padding, written at slots past .. past + q)
    and ``span`` keys, as a FlexAttention BlockMask whose buffers ``fill`` rewrites in place: every
    query sees the committed prefix [0, past) and, among the step's own slots, what ``own`` [q, q]
    allows (its ancestors and itself); nothing else (stale entries, other steps' padding)."""

    def __init__(self, q: int, span: int, device) -> None:
        self.q, self.span = q, span
        q_blocks, self.kv_blocks = -(-q // BLOCK), -(-span // BLOCK)
        self.past = torch.zeros((), dtype=torch.int32, device=device)  # the cache length, on the device
        self.own = torch.zeros(q, q, dtype=torch.bool, device=device)
        self._blocks = torch.arange(self.kv_blocks, dtype=torch.int32, device=device)
        self.partial_count = torch.zeros(1, 1, q_blocks, dtype=torch.int32, device=device)
        self.partial = self._blocks.expand(1, 1, q_blocks, self.kv_blocks).clone()
        self.full_count = torch.zeros(1, 1, q_blocks, dtype=torch.int32, device=device)
        self.full = self._blocks.expand(1, 1, q_blocks, self.kv_blocks).clone()  # prefix blocks: 0, 1, ...
        past, own, steps = self.past, self.own, q

        def mask_mod(b, h, q_idx, kv_idx):
            offset = kv_idx - past  # where a key sits among the step's own slots
            inside = (offset >= 0) & (offset < steps)
            # indices clamped: a compiled kernel may ask past the last query or key of its block
            return (kv_idx < past) | (inside & own[q_idx.clamp(0, steps - 1), offset.clamp(0, steps - 1)])

        self.mask_mod = mask_mod
        self.block_mask = BlockMask.from_kv_blocks(
            self.partial_count,
            self.partial,
            self.full_count,
            self.full,
            BLOCK_SIZE=BLOCK,
            mask_mod=mask_mod,
            seq_lengths=(q, span),
            compute_q_blocks=False,
        )

    def fill(self, past: int | torch.Tensor, own: torch.Tensor) -> None:
        """The step at cache length ``past`` (an int, or a device tensor) whose own slots see each
        other as ``own`` [q, q] says: every buffer the BlockMask reads, rewritten in place."""
        if not isinstance(past, torch.Tensor) and past + self.q > self.span:
            raise ValueError(f"a step at {past} of {self.q} queries does not fit a span of {self.span} keys")
        self.past.copy_(torch.as_tensor(past, dtype=torch.int32))
        self.own.copy_(own)
        full = torch.div(self.past, BLOCK, rounding_mode="floor")  # blocks wholly inside the prefix
        end = torch.div(self.past + (self.q + BLOCK - 1), BLOCK, rounding_mode="floor")  # first block past the step
        self.full_count.copy_(full.expand_as(self.full_count))
        self.partial_count.copy_((end - full).expand_as(self.partial_count))
        # the partial blocks, from the first one not wholly in the prefix (the list's tail is never read)
        first = torch.clamp(self._blocks + full, max=self.kv_blocks - 1)
        self.partial.copy_(first.expand_as(self.partial))

    def dense(self) -> torch.Tensor:
        """[q, span] bool: what each query sees, as the block lists and the mask read together."""
        q_idx = torch.arange(self.q, device=self.own.device)[:, None]
        kv_idx = torch.arange(self.span, device=self.own.device)[None, :]
        block = kv_idx // BLOCK
        full = int(self.full_count[0, 0, 0])
        partial = self.partial[0, 0, 0, : int(self.partial_count[0, 0, 0])]
        visited_full = block < full
        visited_partial = torch.isin(block, partial.long())
        return visited_full | (visited_partial & self.mask_mod(0, 0, q_idx, kv_idx))


def tree_attention(
    module, query, key, value, attention_mask, dropout: float = 0.0, scaling: float | None = None, **kwargs
):
    """transformers' attention interface: FlexAttention under a :class:`TreeMask`'s BlockMask with
    query heads padded per key/value head, else SDPA. ``query`` [B, Hq, q, D], ``key``/``value``
    [B, Hkv, keys, D]; returns ([B, q, Hq, D], None)."""
    if not isinstance(attention_mask, BlockMask):
        from transformers.integrations.sdpa_attention import sdpa_attention_forward  # noqa: PLC0415  # heavy

        return sdpa_attention_forward(
            module, query, key, value, attention_mask, dropout=dropout, scaling=scaling, **kwargs
        )
    out = padded_flex(query, key, value, attention_mask, scaling)
    return out.transpose(1, 2).contiguous(), None


def padded_flex(query, key, value, block_mask: BlockMask, scale: float | None) -> torch.Tensor:
    """FlexAttention with the query heads of each key/value head padded to a power of two:
    [B, Hq, q, D] out, the padded heads dropped."""
    batch, heads, q, dim = query.shape
    kv_heads = key.shape[1]
    group = heads // kv_heads
    wide = padded_group(group)
    if wide != group:
        # zero heads after each group's, by a pad (inductor's CPU lowering of flex_attention refused a
        # query made by concatenation or slice assignment: "too many values to unpack")
        query = F.pad(query.reshape(batch, kv_heads, group, q * dim), (0, 0, 0, wide - group))
        query = query.view(batch, kv_heads * wide, q, dim)
    out = flex_attention(query, key, value, block_mask=block_mask, scale=scale, enable_gqa=kv_heads != query.shape[1])
    if wide != group:
        out = out.view(batch, kv_heads, wide, q, dim)[:, :, :group].reshape(batch, heads, q, dim)
    return out


def register() -> str:
    """Make :func:`tree_attention` known to transformers (once); returns its name."""
    from transformers import AttentionInterface  # noqa: PLC0415  # heavy
    from transformers.masking_utils import AttentionMaskInterface, sdpa_mask  # noqa: PLC0415  # heavy

    AttentionInterface.register(ATTENTION, tree_attention)
    AttentionMaskInterface.register(ATTENTION, sdpa_mask)  # prompts and eager steps build SDPA's masks
    return ATTENTION
