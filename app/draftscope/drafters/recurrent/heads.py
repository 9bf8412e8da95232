"""A model's recurrent head, found and opened from outside the recurrent drafter (the runtime, the
commands, the benches, the window) without importing torch until a head is there: the default path,
a GGUF on llama.cpp with no head trained, never imports it, and a head on a machine without torch
is refused in words (files.HeadNeedsTorch, a HeadError: a notice, not a crash)."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from draftscope.drafters.recurrent.files import default_head_path, json_path, require_torch_for

if TYPE_CHECKING:
    from draftscope.drafters.recurrent.head_drafter import RecurrentSetup


def find_head(model: str, head: str | Path | None = None) -> Path | None:
    """``head`` (a path given: it must load), else the app's head for ``model`` when one was
    trained; None when there is none."""
    path = Path(head) if head else default_head_path(model)
    if not head and not json_path(path).exists():
        return None
    return path


def find_recurrent(model: str, engine, head: str | Path | None = None) -> RecurrentSetup | None:
    """The head for ``engine`` (see :func:`find_head`), loaded and tuned to this device; None when
    there is none. Raises files.HeadError (HeadNeedsTorch where torch is not installed)."""
    path = find_head(model, head)
    if path is None:
        return None
    require_torch_for("The recurrent drafter (its head, a torch module)")
    from draftscope.drafters.recurrent.head_drafter import RecurrentSetup  # noqa: PLC0415  # torch: asked for above

    return RecurrentSetup.for_engine(path, engine)


def training_target(engine):
    """What a head trains on for a loaded engine (head_drafter.target_for: its torch model, or its
    GGUF read through llama.cpp). Raises files.HeadError: HeadNeedsTorch where torch is not
    installed, or a backend that gives no hidden states."""
    require_torch_for("Training a recurrent head (draftscope drafter train)")
    from draftscope.drafters.recurrent.head_drafter import target_for  # noqa: PLC0415  # torch: asked for above

    return target_for(engine)
