"""The one place drafters are built: names (``retrieval``, ``context``, ``model``) and what
they need become a function that makes fresh drafters for each answer (readers and models are
shared; each drafter's own state is per answer)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path

DRAFTER_NAMES = ("retrieval", "context", "model")


def parse_drafter_names(text: str, *, have_datastore: bool, have_draft_model: bool) -> list[str]:
    """``auto`` = every drafter whose inputs exist; ``none`` = plain decoding; else a comma list."""
    if text == "none":
        return []
    if text == "auto":
        return [n for n, ok in (("retrieval", have_datastore), ("context", True), ("model", have_draft_model)) if ok]
    names = [n.strip() for n in text.split(",") if n.strip()]
    unknown = sorted(set(names) - set(DRAFTER_NAMES))
    if unknown:
        raise ValueError(f"unknown drafter(s): {', '.join(unknown)} (known: {', '.join(DRAFTER_NAMES)})")
    return names


def drafter_maker(names: Sequence[str], *, datastore: str | Path | object | None = None, draft_model=None,
                  eos_token_id: int | None = None, draft_temperature: float | None = None) -> Callable[[], list]:
    """A function returning fresh drafters named ``names``. ``datastore``: an index path or an
    open Reader; ``draft_model``: a loaded causal LM for the model drafter."""
    from draftscope.engine.drafters.context import ContextDrafter
    from draftscope.engine.drafters.model import ModelDrafter
    from draftscope.engine.drafters.retrieval import RetrievalDrafter
    from draftscope.retrieval import Reader

    reader = None
    if "retrieval" in names:
        if datastore is None:
            raise ValueError("the retrieval drafter needs a datastore")
        if isinstance(datastore, Reader):
            reader = datastore
        else:
            if not Path(datastore).is_file():
                raise FileNotFoundError(
                    f"datastore not found: {datastore} (build one with `draftscope datastore build-default`)")
            reader = Reader(str(datastore))
    if "model" in names and draft_model is None:
        raise ValueError("the model drafter needs a draft model (--draft-model)")

    def make() -> list:
        made = []
        for name in names:
            if name == "retrieval":
                made.append(RetrievalDrafter(reader))
            elif name == "context":
                made.append(ContextDrafter())
            elif name == "model":
                made.append(ModelDrafter(draft_model, eos_token_id=eos_token_id, temperature=draft_temperature))
        return made

    return make
