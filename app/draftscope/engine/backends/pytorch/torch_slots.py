"""The torch backend holding several answers at once, so the answers stepping together share one
forward (the stepper, engine/stepper.py, gathers their work).

Each answer slot owns one row of a static KV buffer per layer ([slots, kv heads, positions, head
dim]). A forward stacks the slots' items as a padded batch: each row is its slot's prompt chunk or
its [root] + draft tree, padded to the longest row; a 4D mask per row lets each query see its
slot's committed prefix and, inside its own step, its ancestors (a prompt chunk: the tokens before
it); padding queries see only themselves and their rows are dropped. Every row writes its keys at
its own slot's positions, so no answer ever reads another's. Commit moves a slot's accepted entries
into place; truncate and clear only move that slot's end.

CPU and CUDA run the same eager steps (the batch's shape changes with the answers in it, so there
are no CUDA graphs here): tree steps on the math kernel on CUDA, as engine/backends/pytorch/attention.py decides.
"""

from __future__ import annotations

import numpy as np
import torch
from transformers.cache_utils import Cache, StaticLayer

from draftscope.engine.backends.base import Backend, Verified
from draftscope.engine.backends.held import HeldTokens
from draftscope.engine.backends.pytorch.attention import step_kernels
from draftscope.engine.backends.pytorch.static_cache import span_for, spans_for, written_layers
from draftscope.engine.backends.pytorch.torch_backend import TorchBackend
from draftscope.engine.backends.work import MAX_TREE, PREFILL_BATCH, SHARED_PREFILL, Prefill

# Positions each slot's cache holds: every forward reads each row's buffer up to the batch's span.
SLOT_CONTEXT = 8192
# The shortest span: no graphs are captured here, so spans can start short (a forward's attention
# reads every key of its span, masked or not; on a CPU that is most of a small model's step).
SLOT_FIRST_SPAN = 128


class _RowsLayer(StaticLayer):
    """One layer's keys and values for every slot; a forward writes each batch row's keys at its
    slot's positions and returns the rows' buffers up to the forward's span."""

    def __init__(self, owner: _RowsCache) -> None:
        super().__init__(max_cache_len=owner.max_len)
        self.owner = owner

    def update(self, key_states, value_states, *args, **kwargs):
        owner = self.owner
        if not self.is_initialized:
            heads, k_dim, v_dim = key_states.shape[1], key_states.shape[-1], value_states.shape[-1]
            self.keys = key_states.new_zeros(owner.slots, heads, owner.max_len, k_dim)
            self.values = value_states.new_zeros(owner.slots, heads, owner.max_len, v_dim)
            self.device, self.is_initialized = key_states.device, True
        q = key_states.shape[2]
        for b, (slot, past) in enumerate(owner.writes):  # each row's keys at its own slot's positions
            self.keys[slot, :, past : past + q] = key_states[b]
            self.values[slot, :, past : past + q] = value_states[b]
        if owner.block is not None:  # the rows are consecutive slots: a view, no copy
            first, last = owner.block
            return self.keys[first:last, :, : owner.span], self.values[first:last, :, : owner.span]
        return self.keys[owner.rows, :, : owner.span], self.values[owner.rows, :, : owner.span]

    def get_seq_length(self) -> int:
        return 0

    def get_mask_sizes(self, *args, **kwargs) -> tuple[int, int]:
        return self.owner.span, 0


class _RowsCache(Cache):
    def __init__(self, layers: int, slots: int, max_len: int) -> None:
        self.slots, self.max_len = slots, max_len
        super().__init__(layers=[_RowsLayer(self) for _ in range(layers)])
        # set for each forward: (slot, past) of each batch row, the rows' slots as a tensor, and
        # (first, last + 1) when they are consecutive slots
        self.writes: list[tuple[int, int]] = []
        self.rows: torch.Tensor | None = None
        self.block: tuple[int, int] | None = None
        self.span = max_len

    def move(self, slot: int, sources: list[int], targets: list[int]) -> None:
        """Copy a slot's entries at ``sources`` to ``targets`` in every layer."""
        for keys, values in written_layers(self):
            src = torch.tensor(sources, device=keys.device)
            dst = torch.tensor(targets, device=keys.device)
            keys[slot, :, dst] = keys[slot, :, src]
            values[slot, :, dst] = values[slot, :, src]


class TorchSlotsBackend(TorchBackend):
    """``slots`` answers on one torch model; the stepper (engine/stepper.py) gives each answer a
    slot. Its start/verify/commit/truncate are slot 0's (the load-time measurements)."""

    reads_in_chunks = True
    saves_slots = False  # its rows cache is not saved on disk (yet)

    def __init__(self, model, tokenizer, *, slots: int, first_span: int = SLOT_FIRST_SPAN, **kwargs) -> None:
        super().__init__(model, tokenizer, **kwargs)
        if slots < 1:
            raise ValueError(f"slots (answers at once) must be at least 1, not {slots}")
        self.slots = slots
        self.max_context = min(self.max_context, SLOT_CONTEXT)
        self.batch_capacity = max(PREFILL_BATCH, slots * (MAX_TREE + 1) + SHARED_PREFILL)
        self.max_tree = MAX_TREE
        # a slot holds max_context + a tree; a forward's padding may write a prompt chunk's length past that
        self._holds = self.max_context + MAX_TREE + 1
        self._rows = _RowsCache(int(model.config.num_hidden_layers), slots, self._holds + PREFILL_BATCH)
        self.spans = spans_for(self._rows.max_len, first_span)
        self._pasts = [0] * slots
        self.held = HeldTokens(slots)  # the tokens at those positions: a new prompt keeps what it shares

    def describe(self) -> str:
        return f"{super().describe()} · {self.slots} answers at once"

    # one answer's verbs are slot 0's through the one slot view (engine/backends/base.py), as on
    # every slotted backend, not the one-answer cache TorchBackend keeps
    start, verify, commit, truncate, cached = (
        Backend.start,
        Backend.verify,
        Backend.commit,
        Backend.truncate,
        Backend.cached,
    )

    def prefill(self, tokens: list[int], start: int, *, want_hidden: bool = False):
        raise NotImplementedError("several answers read their prompts through decode_many")

    # ------------------------------------------------------------------ slots

    def slot_cached(self, slot: int) -> int:
        return self._pasts[slot]

    def clear_slot(self, slot: int) -> None:
        self._pasts[slot] = 0
        self.held.clear(slot)

    def truncate_slot(self, slot: int, length: int) -> None:
        self._pasts[slot] = min(self._pasts[slot], length)
        self.held.cut(slot, length)

    copies_slots = True

    @torch.inference_mode()
    def copy_slot(self, source: int, target: int, length: int) -> None:
        if not 0 <= length <= self._pasts[source] or source == target:
            raise ValueError(
                f"slot {source} holds {self._pasts[source]} positions: {length} cannot be copied to {target}"
            )
        for keys, values in written_layers(self._rows):
            keys[target, :, :length] = keys[source, :, :length]
            values[target, :, :length] = values[source, :, :length]
        self._pasts[target] = length
        self.held.copy(source, target, length)

    @torch.inference_mode()
    def commit_slot(self, slot: int, path: list[int]) -> None:
        self.held.committed(slot, self._pasts[slot], path)
        base = self._pasts[slot] + 1
        if path != list(range(len(path))):  # a chain from the first node is already in place
            self._rows.move(slot, [base + i for i in path], list(range(base, base + len(path))))
        self._pasts[slot] += 1 + len(path)

    @torch.inference_mode()
    def decode_many(self, work: dict) -> dict:
        """One forward for several slots' Prefill and Verify items: a Verified for each Verify (a
        Prefill's tokens join its slot's cache). An item that cannot be run gets its error as its
        result; the others run without it."""
        failed = {slot: ValueError(p) for slot, item in work.items() if (p := self._problem(slot, item))}
        work = {slot: work[slot] for slot in sorted(work) if slot not in failed}  # by slot: often one block
        if not work:
            return failed
        layouts = {slot: self._layout(slot, item) for slot, item in work.items()}
        q = max(len(ids) for ids, *_ in layouts.values())
        end = max(self._pasts[slot] + q for slot in work)
        span = span_for(self.spans, end)
        batch = len(work)
        ids = np.zeros((batch, q), np.int64)
        positions = np.zeros((batch, q), np.int64)
        allowed = np.zeros((batch, q, span), bool)
        for b, (slot, (row_ids, row_positions, own)) in enumerate(layouts.items()):
            n, past = len(row_ids), self._pasts[slot]
            ids[b, :n], ids[b, n:] = row_ids, row_ids[0]  # padding: any token, nothing reads its row
            positions[b, :n], positions[b, n:] = past + row_positions, past
            allowed[b, :, :past] = True
            allowed[b, :n, past : past + n] = own
            allowed[b, np.arange(n, q), past + np.arange(n, q)] = True  # padding sees the prefix and itself
        device = self.device
        mask = torch.zeros(batch, 1, q, span, dtype=self.dtype, device=device)
        mask.masked_fill_(~torch.from_numpy(allowed).to(device)[:, None], torch.finfo(self.dtype).min)
        rows_cache = self._rows
        slots = list(work)
        rows_cache.writes = [(slot, self._pasts[slot]) for slot in slots]
        rows_cache.rows = torch.tensor(slots, device=device)
        consecutive = slots == list(range(slots[0], slots[0] + batch))
        rows_cache.block = (slots[0], slots[0] + batch) if consecutive else None
        rows_cache.span = span
        wants_hidden = any(item.want_hidden for item in work.values())
        # a forward of prompt chunks alone needs no logits (a 512-token chunk's would be 512 x vocab)
        keep = 1 if all(isinstance(item, Prefill) for item in work.values()) else 0
        with step_kernels(self.kernel_device, tree=True):
            out = self.model(
                input_ids=torch.from_numpy(ids).to(device),
                position_ids=torch.from_numpy(positions).to(device),
                attention_mask=mask,
                past_key_values=rows_cache,
                use_cache=True,
                output_hidden_states=wants_hidden,
                logits_to_keep=keep,
            )
        results = {}
        for b, (slot, item) in enumerate(work.items()):
            if isinstance(item, Prefill):
                self.held.read(slot, item.start, item.tokens)
                self._pasts[slot] += len(item.tokens)
                if item.want_hidden:  # the prompt's last position: the recurrent drafter's first state
                    results[slot] = out.hidden_states[-1][b, len(item.tokens) - 1]
                continue
            rows = len(item.tree) + 1
            self.held.verifying(slot, item.root, item.tree.tokens)
            hidden = out.hidden_states[-1][b, :rows] if item.want_hidden else None
            results[slot] = Verified(out.logits[b, :rows, : self.vocab], hidden)
        return {**results, **failed}

    def _layout(self, slot: int, item) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(token ids [n], position offsets [n], which of the row's own slots each sees [n, n])."""
        if isinstance(item, Prefill):
            n = len(item.tokens)
            return np.array(item.tokens, np.int64), np.arange(n), np.tril(np.ones((n, n), bool))
        tree, n = item.tree, len(item.tree)
        row_ids = np.concatenate([[item.root], tree.tokens]).astype(np.int64)
        row_positions = np.concatenate([[0], tree.depth]).astype(np.int64)
        own = np.eye(n + 1, dtype=bool)
        own[:, 0] = True
        if n:
            own[1:, 1:] = tree.ancestor_mask()
        return row_ids, row_positions, own

    def _problem(self, slot: int, item) -> str | None:
        if not 0 <= slot < self.slots:
            return f"no slot {slot}: this model holds {self.slots} answers"
        if isinstance(item, Prefill):
            if not item.tokens:
                return "a prefill chunk with no tokens"
            if item.start != self._pasts[slot]:
                return f"slot {slot} holds {self._pasts[slot]} positions; a prefill from {item.start} does not follow"
            if len(item.tokens) > PREFILL_BATCH:
                return f"a prefill chunk of {len(item.tokens)} tokens; at most {PREFILL_BATCH} a forward"
            room = len(item.tokens)
        else:
            if item.past is not None and item.past != self._pasts[slot]:
                return (
                    f"this answer's cache was lost (it held {item.past} positions, the model now {self._pasts[slot]})"
                )
            if len(item.tree) > MAX_TREE:
                return f"a draft tree of {len(item.tree)} nodes; at most {MAX_TREE} with several answers at once"
            room = len(item.tree) + 1
        if self._pasts[slot] + room > self._holds:
            return f"the answer's cache holds {self._holds:,} positions: no room for this step"
        return None
