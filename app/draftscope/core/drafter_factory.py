"""The one place drafters are built: names (``retrieval``, ``learned``, ``context``, ``model``,
``recurrent``) and what
they need become a function that makes fresh drafters for each answer (readers and models are
shared; each drafter's own state is per answer). The desktop app (settings switches), ``draftscope
chat/generate`` and ``draftscope bench spec`` (a ``--drafters`` list) all come through
:func:`setup_drafters`."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from draftscope.rules import DRAFTER_NAMES
from draftscope.rules import DRAFTERS_ON as ON_BY_DEFAULT


def parse_drafter_names(
    text: str, *, have_datastore: bool, have_draft_model: bool, have_learned: bool = False, have_head: bool = False
) -> list[str]:
    """``auto`` = what the app uses by default (Settings), for the inputs that exist, plus the
    draft model when one is given; ``none`` = plain decoding; else a comma list."""
    if text == "none":
        return []
    if text == "auto":
        have = {
            "retrieval": have_datastore,
            "learned": have_learned,
            "context": True,
            "model": have_draft_model,
            "recurrent": have_head,
        }
        return [n for n in DRAFTER_NAMES if (n in ON_BY_DEFAULT or n == "model") and have[n]]
    names = [n.strip() for n in text.split(",") if n.strip()]
    unknown = sorted(set(names) - set(DRAFTER_NAMES))
    if unknown:
        raise ValueError(f"unknown drafter(s): {', '.join(unknown)} (known: {', '.join(DRAFTER_NAMES)})")
    return names


def names_from_switches(
    switches: Mapping[str, bool],
    *,
    have_datastore: bool,
    have_draft_model: bool,
    have_learned: bool = True,
    have_head: bool = False,
) -> tuple[list[str], list[str]]:
    """The drafters switched on in the settings that can run, and a note for each that cannot."""
    names, notes = [], []
    for name in DRAFTER_NAMES:
        if not switches.get(name, name in ("context", "learned", "recurrent")):
            continue
        if name == "learned" and not have_learned:
            continue  # nothing learned for this model yet: nothing to say
        if name == "recurrent" and not have_head:
            continue  # no head trained for this model: the recurrent drafter turns on once one exists
        if name == "retrieval" and not have_datastore:
            notes.append(
                "retrieval drafts are off: no datastore for this model (File ▸ Build a datastore… in the app, or "
                "draftscope datastore build-default)"
            )
        elif name == "model" and not have_draft_model:
            notes.append("the draft model drafter is off: no usable draft model is set")
        else:
            names.append(name)
    return names, notes


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
    datastore: str | Path | None,
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
    from draftscope.retrieval import Reader

    have_datastore = isinstance(datastore, Reader) or (datastore is not None and Path(datastore).is_file())
    mismatch = _datastore_mismatch(datastore, vocab_size, tokenizer) if have_datastore else None
    if mismatch and not isinstance(requested, str):
        have_datastore = False  # settings: leave retrieval out and say why below
    elif mismatch:
        raise ValueError(mismatch)
    if isinstance(requested, str):
        names = parse_drafter_names(
            requested,
            have_datastore=have_datastore,
            have_draft_model=draft_model is not None,
            have_learned=learned is not None and learned.stats().answers > 0,
            have_head=recurrent is not None,
        )
        notes = []
        if "learned" in names and learned is None:
            raise ValueError("the learned drafter needs the model's learned answers (none are kept for it)")
        if "recurrent" in names and recurrent is None:
            raise ValueError("the recurrent drafter needs a head trained for this model (draftscope drafter train)")
    else:
        names, notes = names_from_switches(
            requested,
            have_datastore=have_datastore,
            have_draft_model=draft_model is not None,
            have_learned=learned is not None,
            have_head=recurrent is not None,
        )
    if mismatch and requested.get("retrieval"):
        notes = [mismatch if n.startswith("retrieval drafts are off") else n for n in notes]
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
    label = str(datastore.path if isinstance(datastore, Reader) else datastore) if "retrieval" in names else "none"
    return DrafterSetup(names, make, label, notes)


def _datastore_mismatch(datastore, vocab_size: int | None, tokenizer=None) -> str | None:
    """Why a datastore cannot draft for a model with ``vocab_size`` ids and ``tokenizer`` (made
    for another tokenizer)."""
    from draftscope.retrieval import Reader

    try:
        reader = datastore if isinstance(datastore, Reader) else Reader(str(datastore), in_memory=False)
    except Exception:  # noqa: BLE001 - a damaged index is reported when it is opened for drafting
        return None
    return _reader_mismatch(reader, vocab_size, tokenizer)


def tokenizer_gap(reader, vocab_size: int | None, tokenizer=None) -> str | None:
    """How a datastore's tokenizer differs from the model's: "ids" (ids past the model's vocabulary),
    "tokenizer" (its fingerprint names another one), or None (the same, or not recorded)."""
    from draftscope.datastore.fingerprint import same_tokenizer

    if vocab_size and reader.vocab_size > vocab_size:
        return "ids"
    if tokenizer is not None and same_tokenizer(reader.tokenizer_fingerprint, tokenizer) is False:
        return "tokenizer"
    return None


def _reader_mismatch(reader, vocab_size: int | None, tokenizer=None) -> str | None:
    from draftscope.datastore.fingerprint import tokenizer_fingerprint
    from draftscope.datastore.manifest import read_manifest

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
        except Exception:  # noqa: BLE001 - the manifest only adds a name to the message
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
    datastore: str | Path | object | None = None,
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
    from draftscope.drafters.context import ContextDrafter
    from draftscope.drafters.model_drafter import ModelDrafter
    from draftscope.drafters.retrieval import LearnedDrafter, RetrievalDrafter
    from draftscope.retrieval import Reader
    from draftscope.retrieval.live import LiveReader

    live = None
    if "retrieval" in names:
        if datastore is None:
            raise ValueError("the retrieval drafter needs a datastore")
        if not isinstance(datastore, Reader) and not Path(datastore).is_file():
            raise FileNotFoundError(
                f"datastore not found: {datastore} (build one with `draftscope datastore build-default`)"
            )
        live = LiveReader(datastore if isinstance(datastore, Reader) else str(datastore), check=check)
    if "model" in names and draft_model is None:
        raise ValueError("the model drafter needs a draft model (--draft-model)")
    if "recurrent" in names and recurrent is None:
        raise ValueError("the recurrent drafter needs a head trained for this model (draftscope drafter train)")

    def make() -> list:
        made = []
        for name in names:
            if name == "retrieval":
                reader, notice = live.current()
                if notice and notify is not None:
                    notify(notice)
                if reader is not None:
                    made.append(RetrievalDrafter(reader))
            elif name == "learned":
                learned_reader = learned.reader() if learned is not None else None
                if learned_reader is not None:
                    made.append(LearnedDrafter(learned_reader))
            elif name == "context":
                made.append(ContextDrafter())
            elif name == "model":
                made.append(ModelDrafter(draft_model, eos_token_id=eos_token_id))
            elif name == "recurrent":
                made.append(recurrent.drafter())
        return made

    return make
