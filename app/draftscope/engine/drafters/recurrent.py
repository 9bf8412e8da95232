"""Drafts from the recurrent head (ReDrafter): beam search from the target's own hidden state.

The engine hands the drafter the target's last-layer hidden state at the last accepted position
(``set_hidden``), taken from the verify forward it already ran, so drafting costs only the head:
a few small matrix products per depth, all beams at once.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import torch

from draftscope.draft_tree import DraftSource, DraftTree
from draftscope.recurrent.beams import beam_search, beams_to_tree

DEFAULT_WIDTH = 4
DEFAULT_LENGTH = 4


class RecurrentDrafter:
    name = "recurrent"
    source = DraftSource.RECURRENT
    wants_hidden = True  # the engine passes the target's hidden state after each step

    def __init__(self, head, embed, *, width: int = DEFAULT_WIDTH, length: int = DEFAULT_LENGTH,
                 eos_ids: Sequence[int] = ()) -> None:
        if width < 1 or length < 1:
            raise ValueError(f"beam width and length must be >= 1, got {width} and {length}")
        self.head = head
        self.embed = embed  # the target's input embedding module
        self.width = width
        self.length = length
        self.eos_ids = frozenset(int(e) for e in eos_ids)
        self.hidden: torch.Tensor | None = None

    def reset(self, context_ids: Sequence[int]) -> None:
        self.hidden = None

    def set_hidden(self, hidden: torch.Tensor) -> None:
        """The target's hidden state at the position before the current root (it predicted the root)."""
        self.hidden = hidden

    def observe(self, accepted_ids: Sequence[int]) -> None:
        pass  # set_hidden carries everything the head needs

    def propose(self, context_ids: Sequence[int], budget: int) -> DraftTree:
        if budget <= 0 or self.hidden is None or not context_ids:
            return DraftTree.empty()
        length = min(self.length, budget)
        width = min(self.width, budget)
        paths, scores = beam_search(self.head, self.hidden, self.embed, int(context_ids[-1]), width=width,
                                    length=length, eos_ids=self.eos_ids)
        return beams_to_tree(paths, scores, budget)


@dataclass
class RecurrentSetup:
    """A head loaded for a model: what the factory needs to make a RecurrentDrafter per answer."""

    head: object  # RecurrentHead, on the model's device
    embed: object  # the model's input embedding module
    eos_ids: tuple[int, ...] = ()
    path: Path | None = None
    meta: dict | None = None
    width: int = DEFAULT_WIDTH
    length: int = DEFAULT_LENGTH

    def drafter(self) -> RecurrentDrafter:
        return RecurrentDrafter(self.head, self.embed, width=self.width, length=self.length, eos_ids=self.eos_ids)

    @classmethod
    def load(cls, path, model, *, model_name: str = "", eos_ids: Sequence[int] = ()) -> RecurrentSetup:
        """Raises recurrent.files.HeadError (missing, damaged, or trained for another model)."""
        from draftscope.recurrent.files import load_head

        head, meta = load_head(path, model, model_name=model_name)
        device = next(model.parameters()).device
        trained = ((meta.get("training") or {}).get("options") or {}).get("length")
        return cls(head.to(device), model.get_input_embeddings(), tuple(int(e) for e in eos_ids), Path(path), meta,
                   length=int(trained) if trained else DEFAULT_LENGTH)
