"""Verification of a draft tree: the greedy walk on the target's own tokens.

``chosen[0]`` is the target's token after the root, ``chosen[1 + i]`` its token after node i,
each picked by the one sampling rule (engine.sampling.choose: the argmax, or the Gumbel-max sample
keyed by seed and position). Walk from the root, follow the child whose token is the target's;
at the first node with no such child, emit the target's token. The answer is therefore the one
plain decoding writes with the same seed, token for token, whatever the drafts were: no drafter,
mix of drafters or policy decision can bias it (the argument is in docs/architecture.md).
"""

from __future__ import annotations

from collections.abc import Sequence

from draftscope.draft_tree import DraftTree, children_lists
from draftscope.engine.sampling import SeenTokens, recent_entries


def verify_tree(tree: DraftTree, chosen: Sequence[int]) -> tuple[list[int], int]:
    """(accepted node indices root-down, the target's own next token after them)."""
    kids = children_lists(tree)
    tokens = tree.tokens.tolist()
    path: list[int] = []
    cur = -1
    while True:
        want = int(chosen[cur + 1])
        nxt = next((c for c in kids.get(cur, []) if tokens[c] == want), None)
        if nxt is None:
            return path, want
        path.append(nxt)
        cur = nxt


def token_positions(tree: DraftTree, next_position: int) -> list[int]:
    """The absolute position each verify row chooses a token for: the root's row the next token
    of the answer (``next_position``), node i's row the one after it, ``depth[i]`` further on."""
    return [next_position] + [next_position + int(d) for d in tree.depth.tolist()]


def row_contexts(context: Sequence[int], tree: DraftTree, window: int) -> list[list[int]]:
    """The last ``window`` tokens before each verify row's position: the root's row the context's,
    node i's row the context's followed by the path to node i (its own tokens included), so a
    node at depth d looks back over exactly the tokens plain decoding would have at that position."""
    tail = list(context[-window:])
    return [tail] + [(tail + tree.token_path(i))[-window:] for i in range(len(tree))]


def penalised_rows(context: Sequence[int], tree: DraftTree, window: int, vocab: int) -> SeenTokens:
    """The tokens the repetition penalty covers at each of the 1 + len(tree) verify rows."""
    return recent_entries(row_contexts(context, tree, window), window, vocab)
