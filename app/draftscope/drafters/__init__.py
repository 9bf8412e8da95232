"""Every drafter the app builds: the datastore's (retrieval) and the model's learned answers
(retrieval.LearnedDrafter over learned.py's store), the conversation's (context), a small draft
model's (draft_model), the recurrent head's (recurrent/), and the benchmarks' oracle. Each follows
engine/drafting's Drafter protocol; core/drafter_factory.py turns settings into them."""

from draftscope.drafters.context import ContextDrafter
from draftscope.drafters.retrieval import LearnedDrafter, RetrievalDrafter

__all__ = ["ContextDrafter", "LearnedDrafter", "RetrievalDrafter"]
