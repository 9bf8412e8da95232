"""How answer slots and draft trees fit one llama.cpp batch, for ``llamacpp.py``: the sequence ids
a slot gets, the context's cells and a decode's capacity, and the check that a work item fits
before anything is decoded (each tree node's leaves, its sequence ids, are draft_tree.leaves_below).

Apart from the backend because none of it calls llama.cpp: plain arithmetic on the sizes, which the
backend reads at load and keeps as its own attributes.
"""

from __future__ import annotations

from typing import NamedTuple

from draftscope.engine.backends.work import MAX_DRAFT, MAX_TREE, PREFILL_BATCH, SHARED_PREFILL, Prefill

MAX_LEAVES = 64  # sequence ids per tree: a tree of the policy's largest size (64 nodes) fits
MAX_SEQUENCES = 256  # llama.cpp's LLAMA_MAX_SEQ: all slots' leaves together


class BatchSizes(NamedTuple):
    leaves: int  # sequence ids (tree leaves) per slot
    cells: int  # the context's cells, all slots together
    batch_capacity: int  # tokens one decode takes
    prefill_batch: int  # prompt tokens a slot reads a decode
    max_tree: int  # draft tree nodes one verify takes


def batch_sizes(slots: int, max_context: int) -> BatchSizes:
    """The sizes of a context for ``slots`` answers of up to ``max_context`` positions each."""
    leaves = min(MAX_LEAVES, MAX_SEQUENCES // slots)
    tree = MAX_TREE if slots > 1 else MAX_DRAFT  # shared forwards keep room for each answer's tree
    # Room for every slot's whole tree past the last position its answer may reach: tree
    # siblings take cells too. (llama.cpp also aborts on a context smaller than its sequence count.)
    cells = slots * (max_context + tree + 1)
    # llama.cpp takes at most n_ctx tokens a decode (and aborts on more): a short context's batches are shorter
    capacity = min(cells, max(PREFILL_BATCH, slots * (MAX_TREE + 1) + SHARED_PREFILL))
    max_tree = min(tree, capacity - 1)
    return BatchSizes(leaves, cells, capacity, min(PREFILL_BATCH, capacity), max_tree)


def work_problem(slot: int, item, past: int, slots: int, sizes: BatchSizes) -> str | None:
    """Why a Prefill or Verify item of ``slot`` (whose cache holds ``past`` positions) cannot be
    decoded by a context of ``slots`` answers and ``sizes``; None when it can."""
    if isinstance(item, Prefill):
        if item.start != past:
            return f"slot {slot} holds {past} positions; a prefill from {item.start} does not follow"
        if len(item.tokens) > sizes.prefill_batch:
            return f"a prefill chunk of {len(item.tokens)} tokens; at most {sizes.prefill_batch} a forward"
        return None
    if item.past is not None and item.past != past:
        return (
            f"this answer's cache was lost (it held {item.past} positions, the model now {past}): "
            "the model was opened again"
        )
    leaves = len(item.tree.leaves()) if len(item.tree) else 1
    if leaves > sizes.leaves:
        return (
            f"a draft tree of {leaves} leaves; llama.cpp verifies at most {sizes.leaves} per answer with "
            f"{slots} answers at once"
        )
    if len(item.tree) > sizes.max_tree:
        return f"a draft tree of {len(item.tree)} nodes; at most {sizes.max_tree}"
    return None
