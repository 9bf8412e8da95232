"""What the settings dialog offers and refuses, without Qt: the devices torch can use here, the
catalogue model a setting names, which catalogue models can draft for a model (and why the others
cannot), a catalogue entry's line in a list, and the checks OK runs on models and datastores."""

from __future__ import annotations

from pathlib import Path

from draftscope.core.words import memory_text, sentence, setting_name, size_text
from draftscope.engine.backends.llama.gguf_check import read_header
from draftscope.models import catalog
from draftscope.models.resolve import resolve_model
from draftscope.optional_torch import torch_available
from draftscope.retrieval import Reader

OTHER = "\x00other"  # the choice that reveals a line edit for a folder, a .gguf file or a hub id
# why Auto names no precision without torch: the precisions are the torch backend's
NO_TORCH_PRECISION = (
    "PyTorch is not installed here: a GGUF model runs on llama.cpp in its own file's precision; float32, "
    "bfloat16 and float16 are for the torch backend (Settings ▸ Model ▸ Install PyTorch)"
)
EMPTY_MODEL = "Model: choose a model, or enter a model folder, a .gguf file or a hub id"


def available_devices() -> list[str]:
    """Devices torch can use here, besides "auto" (only the CPU where torch is not installed:
    llama.cpp puts layers on a card of its own accord, under "auto")."""
    if not torch_available():
        return ["cpu"]
    import torch  # seconds to import: only for the settings dialog's device list

    devices = ["cpu"]
    if torch.cuda.is_available():
        count = torch.cuda.device_count()
        devices += ["cuda"] + ([f"cuda:{i}" for i in range(count)] if count > 1 else [])
    mps = getattr(torch.backends, "mps", None)
    if mps is not None and mps.is_available():
        devices.append("mps")
    return devices


def catalog_entry(spec: str) -> catalog.CatalogModel | None:
    """The catalogue model a settings value names (as ``resolve_model`` reads it: a path that
    exists is a path), else None."""
    spec = spec.strip()
    if not spec or Path(spec).expanduser().exists():
        return None
    return catalog.find(spec)


def catalog_setting(model: catalog.CatalogModel, before: str, *, draft: bool = False) -> str:
    """What the settings store for the catalogue ``model``: ``before`` (the value in use) when it
    already names it, so an untouched form gives back exactly what it was given."""
    if catalog_entry(before) is model:
        return before
    return model.name if draft else setting_name(model)


def catalog_item_text(model: catalog.CatalogModel, dtype: str, backend: str) -> str:
    """A catalogue model's line in a list: "Title · 98 MB · 0.6 GB memory · downloaded"."""
    state = "downloaded" if model.fetched else "not downloaded"
    memory = memory_text(model.memory_needed(dtype, backend))
    return f"{model.title} · {size_text(model.size)} · {memory} memory · {state}"


def auto_precision_text(auto) -> tuple[str, str]:
    """The Auto precision choice's (text, tooltip) for a ``words.run_precision`` (None: the device
    is not here)."""
    if auto is None and not torch_available():
        return "Auto (the GGUF's own)", sentence(NO_TORCH_PRECISION)
    if auto is None:
        return "Auto (chosen when the model loads)", "This device is not available here."
    # the reason's first clause in the list, all of it in the tooltip
    return f"Auto ({auto.name} here: {auto.reason.split(':')[0]})", sentence(auto.reason)


# --- draft models ---------------------------------------------------------------------------------


def draft_candidates(target: catalog.CatalogModel | None) -> list[catalog.CatalogModel]:
    """The catalogue models that can draft for ``target`` (none for a model outside the catalogue)."""
    if target is None:
        return []
    return [m for m in catalog.CATALOG if m is not target and catalog.why_not_draft(target, m) is None]


def dropped_draft_note(entry: catalog.CatalogModel, target: catalog.CatalogModel) -> str:
    """Why the draft model ``entry`` was reset to None when ``target`` became the model."""
    why = "it is the model itself" if entry is target else catalog.why_not_draft(target, entry)
    return (
        f"{entry.title} was the draft model; it cannot draft for {target.title} ({why}), so the draft model "
        "is now None."
    )


def draft_hint(target: catalog.CatalogModel | None, note: str = "") -> str:
    """Under the draft model: ``note`` (a reset draft model), then which catalogue models are not
    offered for ``target`` and why."""
    lines = [note] if note else []
    if target is None:
        lines.append(
            "For a model outside the catalogue no catalogue draft model is offered; the draft model's "
            "tokenizer is checked against the model's when the model loads."
        )
        return "\n".join(lines)
    refused = [(m, catalog.why_not_draft(target, m)) for m in catalog.CATALOG if m is not target]
    refused = [(m, why) for m, why in refused if why]
    if len(refused) == len(catalog.CATALOG) - 1:
        lines.append(f"No catalogue model can draft for {target.title}.")
    lines += [f"Not offered: {m.title} — {why}" for m, why in refused]
    return "\n".join(lines)


# --- what OK refuses ------------------------------------------------------------------------------


def download_problem(label: str, model: catalog.CatalogModel | None, before: str, *, downloading: bool) -> str | None:
    """A chosen catalogue model that is not on disk cannot be switched to; the one already in use
    (``before``) loads as ever."""
    if model is None or model.fetched or catalog_entry(before) is model:
        return None
    if downloading:
        return f"{label}: {model.title} is still downloading"
    return f"{label}: {model.title} is not downloaded yet ({size_text(model.size)}): press Download, or choose another"


def model_problem(label: str, spec: str) -> str | None:
    """A typed model (folder, .gguf file or hub id) that cannot be a model: hub ids pass as typed;
    anything path-like must exist and hold a model."""
    spec = spec.strip()
    if not spec:
        return None
    try:
        read_model(spec)
    except (OSError, ValueError) as exc:
        return f"{label}: {exc}"
    return None


def read_model(spec: str):
    """``spec`` resolved as the model will be (never fetched), its GGUF read as llama.cpp will read
    it: a text file or a cut-short download is refused here, in words, however it was chosen."""
    source = resolve_model(spec, fetch_default=False)
    if source.kind == "gguf" and source.gguf_path.is_file():  # a catalogue model not fetched yet has none
        read_header(source.gguf_path)
    return source


def datastore_problem(text: str) -> str | None:
    """A datastore that does not exist or is not a Draftscope index ("": the default, always fine)."""
    if not text.strip():
        return None
    path = Path(text.strip()).expanduser()
    if not path.exists():
        return f"Datastore: {path} does not exist"
    try:
        Reader(path, in_memory=False)  # a check of the header, not a load
    except Exception as exc:  # the index reader raises ValueError and OSError kinds
        return f"Datastore: {exc}"
    return None


def build_default_command(spec: str) -> str:
    """The command that builds the default datastore of the model ``spec`` names."""
    entry = catalog_entry(spec)
    return f"draftscope datastore build-default --model {entry.name if entry is not None else '…'}"


def browse_start(text: str) -> str:
    """Where a file picker opens for a field holding ``text``: its folder, else the home folder."""
    path = Path(text).expanduser()
    if text and catalog_entry(text) is None:
        return str(path if path.is_dir() else path.parent)
    return str(Path.home())
