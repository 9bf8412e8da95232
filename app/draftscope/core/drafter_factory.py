"""The one place drafters are built: the kinds' names (drafter_kinds.py) and what they need become a
function that makes fresh drafters for each answer (readers and models are shared; each drafter's
own state is per answer). The desktop app (settings switches), ``draftscope chat/generate`` and
``draftscope bench spec`` (a ``--drafters`` list) all come through :func:`setup_drafters`; a new
kind's builder goes in :func:`_builders`."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from draftscope.datastore.fingerprint import same_tokenizer, tokenizer_fingerprint
from draftscope.datastore.manifest import read_manifest
from draftscope.drafter_kinds import (
    DATASTORE,
    DRAFT_MODEL,
    HEAD,
    LEARNED,
    NOTHING,
    auto_switches,
    kind,
    kinds,
    parse_drafters,
    switched_on,
)
from draftscope.drafters.context import ContextDrafter
from draftscope.drafters.model_drafter import ModelDrafter
from draftscope.drafters.retrieval import LearnedDrafter, RetrievalDrafter
from draftscope.retrieval import Reader
from draftscope.retrieval.live import LiveReader


def parse_drafter_names(
    text: str, *, have_datastore: bool, have_draft_model: bool, have_learned: bool = False, have_head: bool = False
) -> list[str]:
    """``auto`` = what the app uses by default (Settings), for the inputs that exist, plus the
    draft model when one is given; ``none`` = plain decoding; else a comma list."""
    names = parse_drafters(text)
    if names is not None:
        return names
    have = _have(datastore=have_datastore, draft_model=have_draft_model, learned=have_learned, head=have_head)
    on = auto_switches(draft_model=have_draft_model)
    return [k.name for k in kinds() if on[k.name] and have[k.needs]]


def names_from_switches(
    switches: Mapping[str, bool],
    *,
    have_datastore: bool,
    have_draft_model: bool,
    have_learned: bool = True,
    have_head: bool = False,
) -> tuple[list[str], list[str]]:
    """The drafters switched on in the settings that can run, and a note for each that cannot
    (none for nothing learned yet or no head: the dialog shows those, and they turn on by themselves)."""
    have = _have(datastore=have_datastore, draft_model=have_draft_model, learned=have_learned, head=have_head)
    names, notes = [], []
    for k in kinds():
        if not switched_on(switches, k.name):
            continue
        if have[k.needs]:
            names.append(k.name)
        elif (note := k.off_note()) is not None:
            notes.append(note)
    return names, notes


def _have(*, datastore: bool, draft_model: bool, learned: bool, head: bool) -> dict:
    """Which needs are met."""
    return {NOTHING: True, DATASTORE: datastore, LEARNED: learned, DRAFT_MODEL: draft_model, HEAD: head}


def _refuse_missing(names: Sequence[str], have: Mapping) -> None:
    """A drafter asked for by name whose need is not met is an error saying what it needs."""
    for name in names:
        if not have[kind(name).needs]:
            raise ValueError(kind(name).needs_message())


@dataclass
class DrafterSetup:
    """What answers draft with: ``make()`` returns fresh drafters; ``label`` names the datastore in
    use (or "none"); ``notes`` say why a drafter that was asked for is not used."""

    names: list[str]
    make: Callable[[], list]
    label: str
    notes: list[str] = field(default_factory=list)


def setup_drafters(
    requested: str | Mapping[str, bool],
    *,
    datastore: str | Path | Reader | None,
    draft_model=None,
    eos_token_id: int | None = None,
    vocab_size: int | None = None,
    learned=None,
    recurrent=None,
    tokenizer=None,
    notify: Callable[[str], None] | None = None,
) -> DrafterSetup:
    """``requested``: the settings' switches (a mapping; drafters whose inputs are missing are
    left out with a note) or a ``--drafters`` text (``auto``, ``none`` or a list; a listed drafter
    whose inputs are missing is an error). ``recurrent``: a RecurrentSetup (a head for this model).
    ``vocab_size`` / ``tokenizer``: the model's, checked against the datastore's. ``notify(text)``
    hears of a datastore changed on disk between answers."""
    have_datastore = isinstance(datastore, Reader) or (datastore is not None and Path(datastore).is_file())
    mismatch = _datastore_mismatch(datastore, vocab_size, tokenizer) if have_datastore else None
    if mismatch and not isinstance(requested, str):
        have_datastore = False  # settings: leave retrieval out and say why below
    elif mismatch:
        raise ValueError(mismatch)
    names, notes = _requested_names(
        requested,
        datastore=datastore,
        have_datastore=have_datastore,
        draft_model=draft_model,
        learned=learned,
        recurrent=recurrent,
    )
    if mismatch:  # the datastore's drafters say why it is not used
        off = {k.off_note() for k in kinds() if k.needs is DATASTORE}
        notes = [mismatch if n in off else n for n in notes]
    make = drafter_maker(
        names,
        datastore=datastore,
        draft_model=draft_model,
        eos_token_id=eos_token_id,
        learned=learned,
        recurrent=recurrent,
        notify=notify,
        check=lambda reader: _reader_mismatch(reader, vocab_size, tokenizer),
    )
    reads = any(kind(name).needs is DATASTORE for name in names)
    label = str(datastore.path if isinstance(datastore, Reader) else datastore) if reads else "none"
    return DrafterSetup(names, make, label, notes)


def _requested_names(
    requested, *, datastore, have_datastore: bool, draft_model, learned, recurrent
) -> tuple[list, list]:
    """The drafters that run and notes on those left out: switches leave out what cannot run (a
    note says why); a ``--drafters`` list names what must run (an error says what is missing)."""
    if not isinstance(requested, str):
        return names_from_switches(
            requested,
            have_datastore=have_datastore,
            have_draft_model=draft_model is not None,
            have_learned=learned is not None,
            have_head=recurrent is not None,
        )
    names = parse_drafter_names(
        requested,
        have_datastore=have_datastore,
        have_draft_model=draft_model is not None,
        have_learned=learned is not None and learned.stats().answers > 0,
        have_head=recurrent is not None,
    )
    given = _have(
        datastore=datastore is not None,  # a path with no file behind it: drafter_maker says so
        draft_model=draft_model is not None,
        learned=learned is not None,
        head=recurrent is not None,
    )
    _refuse_missing(names, given)
    return names, []


def _datastore_mismatch(datastore, vocab_size: int | None, tokenizer=None) -> str | None:
    """Why a datastore cannot draft for a model with ``vocab_size`` ids and ``tokenizer`` (made
    for another tokenizer)."""
    try:
        reader = datastore if isinstance(datastore, Reader) else Reader(str(datastore), in_memory=False)
    except Exception:  # a damaged index is reported when it is opened for drafting
        return None
    return _reader_mismatch(reader, vocab_size, tokenizer)


def tokenizer_gap(reader, vocab_size: int | None, tokenizer=None) -> str | None:
    """How a datastore's tokenizer differs from the model's: "ids" (ids past the model's vocabulary),
    "tokenizer" (its fingerprint names another one), or None (the same, or not recorded)."""
    if vocab_size and reader.vocab_size > vocab_size:
        return "ids"
    if tokenizer is not None and same_tokenizer(reader.tokenizer_fingerprint, tokenizer) is False:
        return "tokenizer"
    return None


def _reader_mismatch(reader, vocab_size: int | None, tokenizer=None) -> str | None:
    name = Path(reader.path).name
    fix = "build one for this model: File ▸ Build a datastore… in the app, or draftscope datastore build"
    gap = tokenizer_gap(reader, vocab_size, tokenizer)
    if gap == "ids":
        return (
            f"retrieval drafts are off: {name} was built for a tokenizer of {reader.vocab_size:,} ids, "
            f"the model has {vocab_size:,} ({fix})"
        )
    if gap == "tokenizer":
        try:
            built_for = (read_manifest(reader.path) or {}).get("model")
        except Exception:  # the manifest only adds a name to the message
            built_for = None
        made = f" (made for {built_for})" if isinstance(built_for, str) and built_for else ""
        return (
            f"retrieval drafts are off: {name}{made} was built with another tokenizer: its ids stand for "
            f"other text ({reader.tokenizer_fingerprint} against the model's {tokenizer_fingerprint(tokenizer)}; "
            f"{fix})"
        )
    return None


def drafter_maker(
    names: Sequence[str],
    *,
    datastore: str | Path | Reader | None = None,
    draft_model=None,
    eos_token_id: int | None = None,
    learned=None,
    recurrent=None,
    notify: Callable[[str], None] | None = None,
    check: Callable[[object], str | None] | None = None,
) -> Callable[[], list]:
    """A function returning fresh drafters named ``names``. ``datastore``: an index path or an
    open Reader, followed on disk between answers (a LiveReader: ``check`` vets a reopened file,
    ``notify`` hears what happened); ``draft_model``: a loaded causal LM for the model drafter;
    ``learned``: the model's LearnedStore (its newest index is opened for each answer; none yet: no
    drafter); ``recurrent``: a RecurrentSetup (the head and the target's embeddings)."""
    # no learned answers yet is no error here: the learned drafter makes no drafter until there are
    given = _have(
        datastore=datastore is not None, draft_model=draft_model is not None, learned=True, head=recurrent is not None
    )
    _refuse_missing(names, given)
    live = None
    if any(kind(name).needs is DATASTORE for name in names):
        # (None is refused above: a datastore's kind needs one)
        if datastore is None or not isinstance(datastore, Reader) and not Path(datastore).is_file():
            raise FileNotFoundError(
                f"datastore not found: {datastore} (build one with `draftscope datastore build-default`)"
            )
        live = LiveReader(datastore if isinstance(datastore, Reader) else str(datastore), check=check)
    build = _builders(
        live=live,
        learned=learned,
        draft_model=draft_model,
        eos_token_id=eos_token_id,
        recurrent=recurrent,
        notify=notify,
    )
    if unbuilt := sorted(set(names) - set(build)):
        raise ValueError(f"no builder for the drafter(s) {', '.join(unbuilt)} (core/drafter_factory.py: _builders)")

    def make() -> list:
        made = (build[name]() for name in names)
        return [drafter for drafter in made if drafter is not None]

    return make


def _builders(*, live, learned, draft_model, eos_token_id, recurrent, notify) -> dict[str, Callable[[], object]]:
    """How each kind is made for one answer, by its name (None: nothing to draft with yet)."""

    def retrieval():
        reader, notice = live.current()  # the datastore followed on disk between answers
        if notice and notify is not None:
            notify(notice)
        return RetrievalDrafter(reader) if reader is not None else None

    def learned_answers():
        reader = learned.reader() if learned is not None else None  # none indexed yet: no drafter
        return LearnedDrafter(reader) if reader is not None else None

    return {
        "retrieval": retrieval,
        "learned": learned_answers,
        "context": ContextDrafter,
        "model": lambda: ModelDrafter(draft_model, eos_token_id=eos_token_id),
        "recurrent": lambda: recurrent.drafter(),
    }
