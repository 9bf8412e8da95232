"""Trees made and cut beside DraftTree (draft_tree.py): what every step's planning relies on."""

from __future__ import annotations

import numpy as np

from draftscope.draft_tree import (
    DraftTree,
    chain_tree,
    children_lists,
    drop_foreign_tokens,
    first_nodes,
    leaves_below,
    prune_depth,
    subtree,
    tree_from_parents,
)


def branchy() -> DraftTree:
    """Two branches under the root: 10 -> 11 -> 12 and 20 -> 21."""
    return DraftTree(
        np.array([10, 20, 11, 21, 12], np.int64),
        np.array([-1, -1, 0, 1, 2], np.int32),
        np.array([1, 1, 2, 2, 3], np.int32),
        np.ones(5, np.float32),
        np.ones(5, np.int8),
    )


def test_a_chain_hangs_each_node_off_the_one_before():
    chain = chain_tree([4, 5, 6])
    chain.validate()
    assert chain.token_path(2) == [4, 5, 6]


def test_a_tree_from_parents_has_their_depths_and_children():
    tree = tree_from_parents([10, 20, 11, 21, 12], [-1, -1, 0, 1, 2])
    tree.validate()
    expected = branchy()
    assert tree.depth.tolist() == expected.depth.tolist() and tree.tokens.tolist() == expected.tokens.tolist()
    assert children_lists(tree) == {-1: [0, 1], 0: [2], 1: [3], 2: [4]}


def test_a_token_outside_the_vocabulary_goes_with_everything_below_it():
    cut = drop_foreign_tokens(branchy(), vocab=15)

    cut.validate()
    assert cut.tokens.tolist() == [10, 11, 12]


def test_cuts_keep_a_well_formed_tree():
    for cut in (
        prune_depth(branchy(), 2),
        first_nodes(branchy(), 3),
        subtree(branchy(), np.array([1, 0, 1, 0, 1], bool)),
    ):
        cut.validate()
    assert prune_depth(branchy(), 2).tokens.tolist() == [10, 20, 11, 21]
    assert first_nodes(branchy(), 3).tokens.tolist() == [10, 20, 11]


def test_each_node_lies_above_the_leaves_of_its_branch():
    assert leaves_below(branchy()) == [(1,), (0,), (1,), (0,), (1,)]  # leaf 0 is 21, leaf 1 is 12
