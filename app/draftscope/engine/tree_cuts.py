"""Draft trees cut to fit what a step may hold (engine/answer.py plans each step with these): tokens
the model cannot embed, nodes past the length limit, more nodes than the budget, more leaves than
the backend's sequences; and a step's pieces cut before a stop string."""

from __future__ import annotations

import numpy as np

from draftscope.draft_tree import DraftTree
from draftscope.engine.policy import subtree


def cut_pieces(pieces: list[str], room: int) -> list[str]:
    """The step's pieces cut after ``room`` characters (the text before a stop string): the stream
    never says the stop or anything after it."""
    ends = np.cumsum([0] + [len(p) for p in pieces])
    return [p[: max(0, room - int(at))] for p, at in zip(pieces, ends)]


def drop_foreign_tokens(tree: DraftTree, vocab: int) -> DraftTree:
    """Drafts whose token is not in the model's vocabulary (a datastore built for another
    tokenizer, a damaged index) are dropped with everything below them: they could never be
    accepted, and the model cannot even embed them."""
    if len(tree) == 0:
        return tree
    bad = (tree.tokens < 0) | (tree.tokens >= vocab)
    if not bad.any():
        return tree
    keep = ~bad
    for i in range(len(tree)):
        parent = int(tree.parents[i])
        if parent >= 0 and not keep[parent]:
            keep[i] = False
    return subtree(tree, keep)


def prune_depth(tree: DraftTree, max_depth: int) -> DraftTree:
    """Drop nodes deeper than ``max_depth`` (they could only produce tokens past the limit)."""
    if len(tree) == 0 or tree.max_depth <= max_depth:
        return tree
    return subtree(tree, tree.depth <= max_depth)


def first_nodes(tree: DraftTree, most: int) -> DraftTree:
    """The tree's first ``most`` nodes (parents come before children, so it stays a tree)."""
    if len(tree) <= most:
        return tree
    return subtree(tree, np.arange(len(tree)) < most)


def limit_leaves(tree: DraftTree, max_leaves: int | None) -> DraftTree:
    """At most ``max_leaves`` leaves (a backend shared by several answers gives each fewer cache
    sequences, one per leaf): nodes are kept in the tree's order, parents first, while they do not
    add a leaf past the limit."""
    if max_leaves is None or len(tree) == 0 or len(tree.leaves()) <= max_leaves:
        return tree
    keep = np.zeros(len(tree), dtype=bool)
    is_leaf = np.zeros(len(tree), dtype=bool)
    leaves = 0
    for i in range(len(tree)):
        parent = int(tree.parents[i])
        if parent >= 0 and not keep[parent]:
            continue
        extends = parent >= 0 and is_leaf[parent]  # the parent stops being a leaf: the count holds
        if not extends and leaves >= max_leaves:
            continue
        keep[i], is_leaf[i] = True, True
        if extends:
            is_leaf[parent] = False
        else:
            leaves += 1
    return subtree(tree, keep)
