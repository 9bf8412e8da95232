"""Drafters: each turns the context into a DraftTree (``propose``) and hears what was accepted
(``observe``)."""

from draftscope.engine.drafters.base import Drafter
from draftscope.engine.drafters.composite import CompositeDrafter
from draftscope.engine.drafters.context import ContextDrafter
from draftscope.engine.drafters.retrieval import RetrievalDrafter

__all__ = ["CompositeDrafter", "ContextDrafter", "Drafter", "RetrievalDrafter"]
