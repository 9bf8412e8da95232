"""The runtime: what answers are made with, built from Settings in one place.

A :class:`Runtime` holds the loaded model (the engine), the draft model loaded beside it, the
model's learned answers (and the learner that indexes new ones in the background), its recurrent
head and the notices saying what could not be used and why.
The window, ``draftscope chat / generate / serve`` and the Settings dialog's changes all come
through :func:`load_runtime` and :meth:`Runtime.apply` (as llama.cpp's ``common/`` turns
parameters into a context in one place). Nothing here knows Qt.

Drafters are made fresh for each request (:meth:`Runtime.make_drafters`); the sampling of a
request reaches them through the engine at each answer, never as a copy made when they are built.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from psygnal import Signal, SignalGroup

from draftscope.core.datastore_choice import datastore_for
from draftscope.core.drafter_factory import DrafterSetup, setup_drafters
from draftscope.drafter_kinds import switched_on
from draftscope.drafters.draft_model import load_draft_model
from draftscope.drafters.learned import LearnedStore, Learner, model_key
from draftscope.drafters.recurrent.files import HeadError
from draftscope.drafters.recurrent.heads import find_recurrent
from draftscope.engine.backends import answers_held
from draftscope.engine.backends.base import Backend
from draftscope.engine.backends.llama.rpc import parse_workers
from draftscope.engine.engine import Engine
from draftscope.engine.kv_disk import KvDiskStore
from draftscope.engine.load_spec import LoadSpec
from draftscope.engine.stages import LOADING_DRAFT_MODEL, Stage
from draftscope.models.recommended_sampling import ModelSampling, recommended_sampling
from draftscope.paths import kv_cache_dir
from draftscope.storage.settings import Change, Settings, answer_slots, change_between

if TYPE_CHECKING:
    from draftscope.documents.folder import FolderIndex
    from draftscope.drafters.recurrent.head_drafter import RecurrentSetup


class RuntimeEvents(SignalGroup):
    """What happens to the runtime after loading, for the views that show it (emitted on the thread
    it happens on)."""

    notice = Signal(str)  # something the user should know (a datastore changed on disk between answers)
    learned = Signal(object)  # LearnedStats, after the learned answers were re-indexed (the learner's thread)


@dataclass
class Runtime:
    settings: Settings
    engine: Engine
    # the model drafter's model: a torch model or a Backend (None: none set, or it cannot draft here)
    draft_model: object | None = None
    learned: LearnedStore | None = None  # the model's learned answers (None: learning is off, see notices)
    recurrent: RecurrentSetup | None = None  # the head trained for this model
    notices: list[str] = field(default_factory=list)  # what was left out when loading, and why
    # Learns from kept answers on a background thread (start_learning).
    learner: Learner | None = None
    # a folder of documents the answers search (serve/chat --documents)
    documents: FolderIndex | None = None
    # the sampling the model's files recommend (None: none)
    recommended: ModelSampling | None = None
    events: RuntimeEvents = field(default_factory=RuntimeEvents, repr=False)
    _setup: DrafterSetup | None = field(default=None, repr=False)  # the drafters for the current settings

    # ------------------------------------------------------------------ drafters

    @property
    def drafter_setup(self) -> DrafterSetup:
        """The drafters the settings ask for (names, label, notes), built once per settings change."""
        if self._setup is None:
            self._setup = self._build_drafters(self.settings)
        return self._setup

    def make_drafters(self) -> list:
        """Fresh drafters for one request."""
        return self.drafter_setup.make()

    @property
    def datastore_label(self) -> str:
        return self.drafter_setup.label

    def _build_drafters(self, settings: Settings) -> DrafterSetup:
        # the chosen datastore where the model shares its tokenizer, else the model's own default
        path, passed_over = datastore_for(settings.datastore, settings.model, self.engine.tokenizer, self.engine.vocab)
        # the model drafter stops at the draft model's own end tokens, whatever backend runs it
        setup = setup_drafters(
            settings.drafters,
            datastore=path,
            draft_model=self.draft_model,
            vocab_size=self.engine.vocab,
            learned=self.learned,
            recurrent=self.recurrent,
            tokenizer=self.engine.tokenizer,
            notify=self.events.notice.emit,
        )
        setup.notes[:0] = [passed_over] if passed_over and switched_on(settings.drafters, "retrieval") else []
        return setup

    # ------------------------------------------------------------------ learning from answers

    def start_learning(self) -> None:
        """Index kept answers from now on (no-op without a learned store, or when started). Only
        the desktop app does (its window and the server beside it share this runtime): the store
        has one writer, and a terminal or a separate ``draftscope serve`` process must not append
        to the same files at the same time."""
        if self.learned is not None and self.learner is None:
            self.learner = Learner(self.learned, on_change=self.events.learned.emit)

    def learn(self, prompt_ids: Sequence[int], answer_ids: Sequence[int]) -> None:
        """Learn from a finished answer, when learning is on (Settings ▸ Drafting ▸ learned)."""
        if self.learner is not None and switched_on(self.settings.drafters, "learned"):
            self.learner.submit(prompt_ids, answer_ids)

    def learned_text(self, *, brief: bool = False) -> str:
        """What the model has learned from its answers, in words ("" when it cannot learn);
        ``brief``: in few words."""
        if self.learned is None:
            return ""
        stats = self.learned.stats()
        text = stats.brief() if brief else stats.describe()
        return text + ("" if switched_on(self.settings.drafters, "learned") else " (off)")

    def close(self, timeout: float = 0.0) -> None:
        """Stop the learner, after waiting up to ``timeout`` seconds for what was submitted (a
        re-index cut short is redone from the corpus when the store next opens)."""
        if self.learner is not None:
            self.learner.wait_idle(timeout)
            self.learner.close()

    def unload(self, timeout: float = 0.0) -> None:
        """Close, then free the models now, for a runtime a reload replaced: the engine's thread
        ended and its memory given back, the draft model's too (a llama.cpp context of its own).
        The runtime answers no more."""
        self.close(timeout)
        self.engine.close()
        if isinstance(self.draft_model, Backend):
            self.draft_model.close()

    # ------------------------------------------------------------------ settings changes

    def change_for(self, new: Settings) -> Change:
        """What taking ``new`` asks of this runtime: what the changed settings' sections say
        (storage/settings.py), and the model loaded again where the sections alone cannot tell: a
        draft model switched on that is not loaded, or more answers at once than the model holds."""
        change = change_between(self.settings, new)
        switched = new.drafters != self.settings.drafters
        wants_draft = bool(switched_on(new.drafters, "model") and new.draft_model) and self.draft_model is None
        if wants_draft and switched or self._holds_too_few(new):
            change |= Change.MODEL
        return change

    def _holds_too_few(self, new: Settings) -> bool:
        backend = self.engine.backend
        return self.engine.stepper.size < answers_held(backend.kind, backend.device, answer_slots(new))

    def needs_reload(self, new: Settings) -> bool:
        """Whether ``new`` needs the model loaded again (a new runtime, load_runtime)."""
        return bool(self.change_for(new) & Change.MODEL)

    def apply(self, new: Settings) -> list[str]:
        """Take settings that need no reload (see :meth:`change_for`): the drafters are rebuilt
        when the drafting section changed; sampling, limits and the system prompt are read from the
        settings at each request. Returns notes on drafters that cannot be used. A datastore that
        cannot be opened raises, and the runtime keeps its old drafters."""
        change = self.change_for(new)
        if change & Change.MODEL:
            raise ValueError("these settings need the model loaded again (load_runtime)")
        setup = self._build_drafters(new) if change & Change.DRAFTERS else self._setup
        self.settings, self._setup = new, setup
        return list(self.drafter_setup.notes)

    def use_head(self, path: str | Path | None = None) -> str | None:
        """Use the recurrent head at ``path`` (default: the app's head for this model), e.g. one
        just trained; the drafters are rebuilt with it. Returns why it cannot be used, or None."""
        try:
            recurrent = find_recurrent(self.settings.model, self.engine, path)
        except HeadError as exc:
            return f"Recurrent drafter not used: {exc}"
        if recurrent is None:
            return "Recurrent drafter not used: the head was not found"
        previous, self.recurrent = self.recurrent, recurrent
        try:
            self._setup = self._build_drafters(self.settings)
        except Exception as exc:  # a datastore that cannot be opened: keep what worked
            self.recurrent = previous
            return f"The drafters could not be rebuilt: {exc}"
        return None


def load_runtime(
    settings: Settings,
    *,
    head: str | Path | None = None,
    strict: bool = False,
    log: Callable[[object], None] | None = None,
    slots: int | None = None,
    baseline: bool = True,
) -> Runtime:
    """Load the model the settings name, with what its answers draft with. ``head``: a recurrent
    head file (default: the app's head for the model, when one was trained). ``strict`` (the
    command line): a draft model or head asked for that cannot be used is an error; otherwise it is
    left out and ``notices`` says why. ``log(stage)`` hears of progress: each stage by name, with
    how far it is (engine/stages.py; a line of text for the first). ``baseline``: measure the plain
    speed now (the window measures it after it opens, so it does not wait for it). ``slots``: answers the model
    holds at once (default: as the settings' server asks, see ``answer_slots``)."""
    if log is not None:
        log(f"loading {settings.model} ...")
    spec = load_spec(settings, slots=slots or answer_slots(settings))
    engine = Engine.load(spec, progress=log, baseline=baseline)
    _keep_caches_on_disk(engine, settings)
    runtime = Runtime(settings, engine, notices=_load_notices(engine, settings, spec))
    runtime.recommended = recommended_sampling(spec.source)
    runtime.learned = _open_learned(settings.model, engine, runtime.notices)
    runtime.recurrent = _open_recurrent(settings.model, engine, head, runtime.notices, strict)
    if settings.draft_model and switched_on(settings.drafters, "model"):
        if log is not None:
            log(Stage(LOADING_DRAFT_MODEL))
        try:
            runtime.draft_model = load_draft_model(
                settings.draft_model, engine, device=spec.device, dtype=spec.dtype
            ).model
        except Exception as exc:  # a draft model must never keep the model from loading
            if strict:
                raise
            runtime.notices.append(f"Draft model not used: {exc}")
    return runtime


def _keep_caches_on_disk(engine: Engine, settings: Settings) -> None:
    """Conversations' caches saved on disk from now on; what the load's measurements left in the
    slots is no conversation: forgotten first, never saved."""
    store = kv_store_for(settings)
    if store is not None and engine.backend.saves_slots:

        def forget() -> None:
            for slot in range(engine.backend.slots):
                engine.backend.clear_slot(slot)

        engine.stepper.call(forget)
    engine.backend.keep_on_disk(store)


def kv_store_for(settings: Settings) -> KvDiskStore | None:
    """Where conversations' caches are saved on disk, within the settings' budget (None: off)."""

    budget_mb = settings.kv_cache_budget_mb
    return KvDiskStore(kv_cache_dir(), budget_mb << 20) if budget_mb > 0 else None


def _load_notices(engine: Engine, settings: Settings, spec: LoadSpec) -> list[str]:
    """What the user should know of how the model opened: the backend's notice, a context or a
    number of answers at once it cannot give."""
    notices = [engine.backend.notice] if engine.backend.notice else []
    if engine.max_context < settings.context_length:
        notices.append(
            f"Context length: {engine.name} reads at most {engine.max_context:,} tokens here, "
            f"not the {settings.context_length:,} set"
        )
    if spec.slots > 1 and engine.stepper.size == 1:
        if engine.backend.kind == "torch":  # CUDA: see engine.backends.torch_backend_for
            notices.append(
                "Answers at once: on the GPU the window's answers and one served answer take "
                "turns, each on the decode steps captured at load (faster than a shared "
                "forward); serve 2 or more at once and answers share forwards"
            )
        else:
            notices.append(
                f"Answers at once: {engine.backend.kind} holds one answer at a time, so answers "
                "wait for each other (llama.cpp decodes several in shared forwards)"
            )
    return notices


def load_spec(settings: Settings, *, slots: int) -> LoadSpec:
    """How the settings' model opens (engine/load_spec.py): the model resolved here, once."""
    return LoadSpec.of(
        settings.model,
        device=None if settings.device == "auto" else settings.device,
        dtype=None if settings.dtype == "auto" else settings.dtype,
        backend=settings.backend,
        slots=slots,
        workers=parse_workers(settings.workers),
        threads=settings.threads or None,
        context=settings.context_length or None,
        gpu_layers=settings.gpu_layers,
    )


def _open_learned(model: str, engine: Engine, notices: list[str]) -> LearnedStore | None:
    """The model's learned answers; None, with a notice, if they cannot be kept."""

    try:
        return LearnedStore(model_key(model), engine.vocab)
    except Exception as exc:  # learning is a nicety: the model still loads
        notices.append(f"Learning from answers is off: {exc}")
        return None


def _open_recurrent(
    model: str, engine: Engine, path: str | Path | None, notices: list[str], strict: bool
) -> RecurrentSetup | None:
    """The head trained for this model (``path``, else the app's head for it); None when there is
    none, or, with a notice saying why, when it cannot be used (another model's, damaged, or no
    torch here)."""
    try:
        return find_recurrent(model, engine, path)
    except HeadError as exc:
        if strict and path:
            raise
        notices.append(f"Recurrent drafter not used: {exc}")
        return None
