"""GGUF models already on this computer, in the folders of the apps people download them with:
LM Studio (``~/.lmstudio/models/<publisher>/<repo>/<file>.gguf``; older versions
``~/.cache/lm-studio/models``) and Ollama (``~/.ollama/models``, or ``$OLLAMA_MODELS``; the
Linux service keeps them under ``/usr/share/ollama/.ollama/models``). Ollama stores each model's
GGUF as a blob named by its sha256 digest; a manifest per ``name:tag`` lists the blobs, the one
of media type ``application/vnd.ollama.image.model`` being the weights. Qt-free: the model pages
list these, ``--model`` accepts their paths."""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path

OLLAMA_MODEL_LAYER = "application/vnd.ollama.image.model"
MAX_MANIFESTS = 2000  # a sanity bound on what one folder scan reads


@dataclass(frozen=True)
class LocalModel:
    name: str  # what the user knows it as: "qwen2.5-coder:1.5b" (Ollama), "Qwen2.5-Coder-1.5B-Q4_K_M" (LM Studio)
    path: Path  # the GGUF file (an Ollama blob has no .gguf suffix)
    app: str  # "LM Studio" or "Ollama"
    size: int


def is_chat_model_file(path: Path) -> bool:
    """A .gguf beside a model that is not itself one: LM Studio keeps vision projectors (mmproj-*) there."""
    return "mmproj" not in path.name.lower()


def _home() -> Path:
    """The home folder the apps keep models in (DRAFTSCOPE_MODELS_HOME: another, for tests)."""
    return Path(os.environ.get("DRAFTSCOPE_MODELS_HOME") or Path.home())


def lmstudio_folders() -> list[Path]:
    return [_home() / ".lmstudio" / "models", _home() / ".cache" / "lm-studio" / "models"]


def ollama_folders() -> list[Path]:
    env = os.environ.get("OLLAMA_MODELS")
    folders = [Path(env)] if env else []
    service = [] if os.environ.get("DRAFTSCOPE_MODELS_HOME") else [Path("/usr/share/ollama/.ollama/models")]
    return folders + [_home() / ".ollama" / "models"] + service


def find_local_models(lmstudio: list[Path] | None = None, ollama: list[Path] | None = None) -> list[LocalModel]:
    """Every chat model GGUF found in LM Studio's and Ollama's folders (vision projectors left
    out), LM Studio's first; unreadable folders and damaged manifests are skipped."""
    found: list[LocalModel] = []
    seen: set[Path] = set()
    for folder in lmstudio if lmstudio is not None else lmstudio_folders():
        for path in sorted(_safe_glob(folder, "*/*/*.gguf")):
            if not is_chat_model_file(path) or path.resolve() in seen:
                continue
            seen.add(path.resolve())
            found.append(LocalModel(path.stem, path, "LM Studio", _size(path)))
    for folder in ollama if ollama is not None else ollama_folders():
        for model in _ollama_models(folder):
            if model.path.resolve() not in seen:
                seen.add(model.path.resolve())
                found.append(model)
    return found


def name_for(path: Path) -> str | None:
    """The name an app knows this GGUF by (an Ollama blob's ``name:tag``), else None."""
    resolved = path.resolve()
    for model in find_local_models():
        if model.path.resolve() == resolved:
            return model.name
    return None


def _ollama_models(folder: Path) -> list[LocalModel]:
    manifests = folder / "manifests"
    out = []
    for manifest in sorted(_safe_glob(manifests, "*/*/*/*"))[:MAX_MANIFESTS]:
        try:
            layers = json.loads(manifest.read_text(encoding="utf-8")).get("layers", [])
        except (OSError, ValueError, AttributeError):
            continue
        weights = [
            layer for layer in layers if isinstance(layer, dict) and layer.get("mediaType") == OLLAMA_MODEL_LAYER
        ]
        if not weights or not isinstance(weights[0].get("digest"), str):
            continue
        blob = folder / "blobs" / weights[0]["digest"].replace(":", "-")
        if not blob.is_file():
            continue
        registry, namespace, model, tag = manifest.relative_to(manifests).parts
        name = f"{model}:{tag}" if namespace == "library" else f"{namespace}/{model}:{tag}"
        out.append(LocalModel(name, blob, "Ollama", _size(blob)))
    return out


def _safe_glob(folder: Path, pattern: str) -> list[Path]:
    try:
        return [p for p in folder.glob(pattern) if p.is_file()] if folder.is_dir() else []
    except OSError:
        return []


def _size(path: Path) -> int:
    try:
        return path.stat().st_size
    except OSError:
        return 0
