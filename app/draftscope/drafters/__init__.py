"""Drafting, in one place: the seam and every drafter the app builds.

The seam: the Drafter protocol every drafter follows (interface.py: ``propose`` turns the context
into a DraftTree, ``observe`` hears what was accepted), the composite that merges several drafters'
trees into one step's tree (composite.py) and the path trie it merges them in (path_trie.py); the
engine's answer loop drives them. The drafters: the datastore's (retrieval) and the model's learned
answers (retrieval.LearnedDrafter over learned.py's store), the conversation's (context), a small
draft model's (model_drafter.py, opened by draft_model.py), the recurrent head's (recurrent/), and
the benchmarks' oracle. core/drafter_factory.py turns settings into them.
"""

from draftscope.drafters.composite import CompositeDrafter
from draftscope.drafters.context import ContextDrafter
from draftscope.drafters.interface import Drafter
from draftscope.drafters.retrieval import LearnedDrafter, RetrievalDrafter
from draftscope.engine.drafting import use_combiner

# The engine, below drafting, merges an answer's several drafters with the composite (it never imports drafters/).
use_combiner(CompositeDrafter)

__all__ = ["CompositeDrafter", "ContextDrafter", "Drafter", "LearnedDrafter", "RetrievalDrafter"]
