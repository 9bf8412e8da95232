"""The drafter kinds, one row each: every face reads this table (the factory, the settings, the
settings dialog, the command line and its help, the benchmarks, the palettes' check, the merging of
drafts), so a new drafter is its module, its row here, its builder in core/drafter_factory.py and its
two colours in gui/palettes.py. Also the one parser of ``--drafters`` (``auto``, ``none`` or a comma
list) and the one rule for what drafts out of the box. Plain Python (no torch, no Qt).
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass

from draftscope.draft_tree import DraftSource


@dataclass(frozen=True)
class Need:
    """What a drafter needs besides the model, in the words every face uses: ``what`` it needs (the
    error when a listed drafter cannot run), what is ``missing`` (the note when a switched-on one
    cannot; empty: nothing is said, the dialog shows it), the ``fix`` in the app and the terminal,
    and the dialog's ``hint`` on a switch that cannot be used."""

    key: str
    what: str = ""
    missing: str = ""
    fix: str = ""
    hint: str = ""


NOTHING = Need("nothing")
DATASTORE = Need(
    "datastore",
    what="a datastore for this model",
    missing="no datastore for this model",
    fix="File ▸ Build a datastore… in the app, or draftscope datastore build-default",
)
LEARNED = Need("learned answers", what="the model's learned answers", fix="none are kept for it")
DRAFT_MODEL = Need(
    "draft model",
    what="a draft model",
    missing="no usable draft model is set",
    fix="the Model tab's draft model in the app, or --draft-model",
    hint="Set a draft model on the Model tab to use this drafter",
)
HEAD = Need(
    "head",
    what="a head trained for this model",
    fix="File ▸ Train the recurrent drafter… in the app, or draftscope drafter train",
    hint="Train one: File ▸ Train the recurrent drafter…",
)


class Support(enum.Enum):
    """What a draft node's support is: a count of matches, or the drafter's path probability."""

    COUNT = "count"
    PROBABILITY = "probability"


@dataclass(frozen=True)
class DrafterKind:
    """One drafter kind. ``name``: its switch and ``--drafters`` name, the provenance events give
    (``source``'s name); ``label``: its switch in the settings dialog (``tip``: the switch's
    tooltip); ``drafted``: a drafted token's words; ``on_by_default``: in the settings out of the
    box and in ``auto``."""

    name: str
    source: DraftSource
    label: str
    drafted: str
    on_by_default: bool
    needs: Need
    support: Support
    tip: str = ""

    def needs_message(self) -> str:
        """Why a drafter that was asked for by name cannot run."""
        return f"the {self.name} drafter needs {self.needs.what} ({self.needs.fix})"

    def off_note(self) -> str | None:
        """Why a drafter switched on in the settings does not draft (None: nothing to say)."""
        if not self.needs.missing:
            return None
        return f"{self.name} drafts are off: {self.needs.missing} ({self.needs.fix})"


KINDS: tuple[DrafterKind, ...] = (
    DrafterKind(
        "retrieval",
        DraftSource.RETRIEVAL,
        "Retrieval (suffix search in the datastore)",
        "drafted from the datastore",
        True,
        DATASTORE,
        Support.COUNT,
    ),
    DrafterKind(
        "learned",
        DraftSource.LEARNED,
        "Learned (this model's own past answers; learns as you chat)",
        "drafted from the model's past answers",
        True,
        LEARNED,
        Support.COUNT,
        tip="Each answer is added to a datastore of the model's own answers, indexed in the background; "
        "drafts that sound like the model get accepted more. Off: nothing is recorded and nothing drafted from it.",
    ),
    DrafterKind(
        "context",
        DraftSource.CONTEXT,
        "Context (repeats from this conversation)",
        "drafted from the conversation",
        True,
        NOTHING,
        Support.COUNT,
    ),
    DrafterKind(
        "model",
        DraftSource.MODEL,
        "Draft model",
        "drafted by the draft model",
        False,  # auto turns it on when a draft model is given (auto_switches)
        DRAFT_MODEL,
        Support.PROBABILITY,
    ),
    DrafterKind(
        "recurrent",
        DraftSource.RECURRENT,
        "Recurrent (a head trained on this model's own predictions)",
        "drafted by the recurrent drafter",
        True,
        HEAD,
        Support.PROBABILITY,
        tip="A small network drafts a few tokens ahead from the model's hidden state",
    ),
)


def kinds() -> tuple[DrafterKind, ...]:
    """The table as it is when asked (every reader asks, so a row added in a test is seen everywhere)."""
    return KINDS


def drafter_names() -> tuple[str, ...]:
    return tuple(k.name for k in KINDS)


def kind(name: str) -> DrafterKind:
    """The kind named ``name`` (a ValueError naming the known ones for any other)."""
    for k in KINDS:
        if k.name == name:
            return k
    raise ValueError(f"unknown drafter: {name} (known: {', '.join(drafter_names())})")


def default_switches() -> dict[str, bool]:
    """The settings' drafter switches out of the box."""
    return {k.name: k.on_by_default for k in KINDS}


def switched_on(switches: Mapping[str, bool], name: str) -> bool:
    """A drafter's switch in the settings; one they do not name has its default."""
    return bool(switches.get(name, kind(name).on_by_default))


def auto_switches(*, draft_model: bool) -> dict[str, bool]:
    """What ``auto`` drafts with: the kinds on by default, and a draft model's kind when one is given."""
    return {k.name: k.on_by_default or (draft_model and k.needs is DRAFT_MODEL) for k in KINDS}


def parse_drafters(text: str) -> list[str] | None:
    """``--drafters``: None for ``auto``, [] for ``none`` (plain decoding), else the names listed
    in their order; an unknown name is a ValueError naming the known ones."""
    text = text.strip()
    if text == "auto":
        return None
    if text == "none":
        return []
    names = [n.strip() for n in text.split(",") if n.strip()]
    unknown = sorted(set(names) - set(drafter_names()))
    if unknown:
        raise ValueError(f"unknown drafter(s): {', '.join(unknown)} (known: {', '.join(drafter_names())})")
    return names


def drafter_switches(text: str, *, draft_model: bool) -> tuple[dict[str, bool], list[str]]:
    """``--drafters`` as the settings' switches, and the drafters it names (which must then run;
    none for ``auto`` and ``none``)."""
    names = parse_drafters(text)
    if names is None:
        return auto_switches(draft_model=draft_model), []
    return {k.name: k.name in names for k in KINDS}, names


def drafters_help() -> str:
    """``--drafters``' help: the names, ``auto`` and ``none``."""
    return (
        f"comma list of {', '.join(drafter_names())}; 'auto' = the app's defaults whose inputs exist, "
        "and the draft model when one is given; 'none' = plain decoding"
    )


def probability_sources() -> tuple[int, ...]:
    """The DraftSource values whose supports are path probabilities (the others are counts)."""
    return tuple(int(k.source) for k in KINDS if k.support is Support.PROBABILITY)
