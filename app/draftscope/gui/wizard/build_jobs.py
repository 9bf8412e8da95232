"""The datastore wizard's background jobs, without Qt: a build from the user's sources, or the
model's own answers to prompts, indexed (distilled).

Each job has the signature the GUI's job runner calls, ``job(report, status, cancel)``, and runs
on a thread of its own: ``report`` takes the builder's or distiller's progress, ``status`` a line
in words, ``cancel`` is the :class:`CancelToken` both honour. The model's tokenizer is loaded by
the first job that needs it (loading takes seconds; the wizard stays responsive) and kept for the
next builds of the same wizard; so is a torch copy of the model that answers, when the window's
model runs on llama.cpp. Also here: which of the sources a build's error is about.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from draftscope import optional_torch
from draftscope.datastore.distill import distill, read_prompts
from draftscope.datastore.pipeline import BuildOptions, build_datastore
from draftscope.datastore.preview import model_display_name, without_spec
from draftscope.datastore.progress import CancelToken
from draftscope.datastore.sources import DatastoreError, Source
from draftscope.models.resolve import resolve_model
from draftscope.retrieval import BuildCancelled

NOTHING_WRITTEN = "datastore build cancelled; nothing was written"
DISTILLING = "Learning the model's style"  # what needs PyTorch, when the window's model is on llama.cpp

Status = Callable[[str], None]
Job = Callable[[Callable[[Any], None], Status, CancelToken], Any]


class LoadedOnce:
    """What the builds need of the model, loaded by ``loader(model_spec)`` on the thread of the first
    job that asks (saying ``loading``) and kept for every later build (a failed load tries again);
    ``value``: already at hand, nothing to load."""

    def __init__(self, loader: Callable[[str], Any], model_spec: str, loading: str, value=None) -> None:
        self._loader, self._model_spec, self._loading, self._value = loader, model_spec, loading, value

    @property
    def loaded(self) -> bool:
        return self._value is not None

    def get(self, status: Status, cancel: CancelToken):
        """The thing loaded; raises BuildCancelled when the build was cancelled meanwhile."""
        if self._value is None:
            status(self._loading)
            # the runner starts one job at a time, so only one thread ever loads or reads it
            self._value = self._loader(self._model_spec)
        if cancel.cancelled:
            raise BuildCancelled(NOTHING_WRITTEN)
        return self._value


class TokenizerOnce(LoadedOnce):
    """The model's tokenizer, loaded by the first build and kept."""

    def __init__(self, loader: Callable[[str], Any], model_spec: str) -> None:
        super().__init__(loader, model_spec, f"Loading {model_display_name(model_spec)}'s tokenizer …")


def load_torch_model(model_spec: str):
    """The model as transformers loads it (``distill`` batches its answers with ``generate``), on
    the device and in the precision torch picks here; without PyTorch, TorchMissing says so in words."""
    optional_torch.require_torch(DISTILLING)
    from draftscope.engine.backends.pytorch.loader import load_model  # noqa: PLC0415  # torch, transformers

    return load_model(resolve_model(model_spec)).model


class ModelOnce(LoadedOnce):
    """The model that answers the prompts: the window's own when it runs on torch (``model``), else
    loaded with torch on the first distill job's thread (a model on llama.cpp cannot batch its
    answers) and kept for the next builds."""

    def __init__(self, model=None, *, loader: Callable[[str], Any] = load_torch_model, model_spec: str = "") -> None:
        super().__init__(
            loader,
            model_spec,
            f"Loading {model_display_name(model_spec)} with torch to write its answers …",
            value=model,
        )
        self.loaded_here = model is None  # loaded a second time for the answers: it says so, and what it costs


def build_job(
    sources: Iterable[Source],
    options: BuildOptions,
    out: Path,
    tokenizers: TokenizerOnce,
    *,
    model_spec: str,
    builder: Callable = build_datastore,
) -> Job:
    """A build of ``sources`` into ``out`` with ``builder`` (:func:`build_datastore`'s signature),
    which writes nothing when cancelled."""
    sources = [Source(s.kind, s.path, s.options) for s in sources]  # fresh read counters for each build

    def job(report, status, cancel):
        tokenizer = tokenizers.get(status, cancel)
        status("Reading the sources …")
        return builder(sources, tokenizer, out, model=model_spec, options=options, progress=report, cancel=cancel)

    return job


def distill_job(
    models: ModelOnce,
    out: Path,
    tokenizers: TokenizerOnce,
    *,
    model_spec: str,
    count: int,
    prompts_spec: str | None = None,
    distiller: Callable = distill,
) -> Job:
    """The model ``models`` gives answers the first ``count`` prompts of ``prompts_spec`` (a ``chat:FILE`` spec;
    None: ShareGPT, fetched the first time), then the answers are indexed into ``out`` by
    ``distiller`` (:func:`distill`'s signature), which keeps the answers when cancelled."""
    name = model_display_name(model_spec)

    def job(report, status, cancel):
        tokenizer = tokenizers.get(status, cancel)
        status("Reading the prompts …" if prompts_spec else "Reading the ShareGPT prompts (fetched first if needed) …")
        prompts = read_prompts(prompts_spec, limit=count)
        if cancel.cancelled:  # reading may have taken a while (a first fetch): stop before any answer
            raise BuildCancelled(NOTHING_WRITTEN)
        model = models.get(status, cancel)  # after the prompts: a mistake there does not wait for a model load
        status(f"{name} is answering {len(prompts):,} prompts …")
        return distiller(model, tokenizer, prompts, out, progress=report, cancel=cancel, model_name=name)

    return job


def source_at_fault(exc: BaseException, sources: Iterable[Source]) -> tuple[Source, str] | None:
    """The source a build error is about, and the error in words naming the file rather than the
    spec ("The build stopped: chats.json: …"); None when the error is not about one source."""
    if not isinstance(exc, DatastoreError):
        return None
    message = str(exc)
    for source in sources:
        if message.startswith(source.spec + ":"):
            return source, f"The build stopped: {without_spec(source, message)}"
    return None
