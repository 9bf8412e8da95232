"""The engine's side of drafting: the Drafter protocol every drafter follows (``propose`` turns the
context into a DraftTree, ``observe`` hears what was accepted), the composite that merges several
drafters' trees into one, and the path trie it merges them in. The drafters themselves live in
draftscope/drafters/."""

from draftscope.engine.drafting.interface import Drafter
from draftscope.engine.drafting.composite import CompositeDrafter

__all__ = ["CompositeDrafter", "Drafter"]
