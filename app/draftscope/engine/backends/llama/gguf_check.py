"""A GGUF file is checked before llama.cpp opens it in this process: llama.cpp is a C library, and
a damaged file or an architecture it does not know can end a process rather than raise. The
header and tensor table are read in Python first (bad magic, truncation, tensors past the end of
the file); then llama.cpp itself loads the file once in a child process, whose death is an error
message here. A file that passed is remembered (path, size, modification time), so the child
runs once per file. Memory is checked against what the machine has free."""

from __future__ import annotations

import functools
import json
import os
import subprocess
import sys
from pathlib import Path

from draftscope import paths
from draftscope.engine.backends.llama.llama_lib import last_error, lib
from draftscope.models.gguf_header import GgufHeaderError, read_gguf_header
from draftscope.models.resolve import ModelNotFoundError

CHILD_COMMAND: list[str] | None = None  # the checking child (None: this module, run by this Python)


class GGUFError(ModelNotFoundError):
    """A GGUF file that cannot be opened: the faces report it as they report any model that would not load."""


def check(path: Path, *, timeout: float = 600.0, repacked: bool = True) -> None:
    """``repacked``: load it as the model will be (off where the kept verdict turned llama.cpp's
    repacked kernels off: loading with them would fault, and the file be called damaged)."""
    path = Path(path)
    if not path.is_file():
        raise GGUFError(f"model file not found: {path}")
    read_header(path)
    _check_memory(path)
    key = _key(path) + ("" if repacked else "|plain layout")
    passed = _passed()
    if key in passed:
        return
    try:
        command = CHILD_COMMAND or [sys.executable, "-m", "draftscope.engine.backends.llama.gguf_check"]
        child = subprocess.run(
            [*command, str(path), *([] if repacked else ["--plain-layout"])],
            capture_output=True,
            text=True,
            timeout=timeout,
        )
    except subprocess.TimeoutExpired:
        raise GGUFError(f"llama.cpp did not finish loading {path.name} within {timeout:.0f} s") from None
    if child.returncode != 0:
        said = (child.stdout.strip().splitlines() or [""])[-1]
        if child.returncode < 0:
            raise GGUFError(
                f"llama.cpp crashed reading {path.name} (signal {-child.returncode}): "
                "the file is damaged or of a kind this llama.cpp does not support"
            )
        raise GGUFError(said or f"llama.cpp could not load {path.name} (damaged file or unsupported architecture)")
    passed.add(key)
    _remember(passed)


def read_header(path: Path) -> dict:
    """The facts llama.cpp will need, read in Python (models/gguf_header.py): architecture, tensor
    count, and that every tensor lies inside the file. Raises GGUFError naming what is wrong."""
    path = Path(path)
    try:
        header = read_gguf_header(path)
    except GgufHeaderError as exc:
        raise GGUFError(str(exc)) from None
    if header.architecture is None:
        raise GGUFError(f"{path.name} names no architecture (general.architecture): not a model file")
    if header.data_end > header.size:
        raise GGUFError(
            f"{path.name} is cut short: its tensors need more than the file's {header.size:,} bytes (a "
            "truncated download or copy?); download or copy it again"
        )
    if not header.tensors:
        raise GGUFError(f"{path.name} holds no tensors: not a model file")
    return {"architecture": header.architecture, "tensors": len(header.tensors), "bytes": header.size}


def gguf_reader(path: Path):
    """The ``gguf`` package's reader of ``path`` (memory-mapped), kept while the file is unchanged:
    for reading tensors' data (the recurrent head's embedding rows); facts of the header come from
    models/gguf_header.py, which is much quicker on a large vocabulary."""
    stat = Path(path).stat()
    return _reader(str(Path(path).resolve()), stat.st_size, stat.st_mtime_ns)


@functools.lru_cache(maxsize=4)
def _reader(path: str, size: int, mtime_ns: int):
    import gguf

    return gguf.GGUFReader(path)


def _check_memory(path: Path) -> None:
    available = _available_memory()
    need = path.stat().st_size
    if available is not None and need > available:
        raise GGUFError(
            f"{path.name} needs about {need / 1e9:.1f} GB of memory and this machine has "
            f"{available / 1e9:.1f} GB free: close other programs or pick a smaller model"
        )


def _available_memory() -> int | None:
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    except OSError:
        pass
    return None


def _key(path: Path) -> str:
    st = path.stat()
    return f"{path.resolve()}|{st.st_size}|{st.st_mtime_ns}"


def _store() -> Path:
    return paths.gguf_checked_file()


def _passed() -> set[str]:
    try:
        return set(json.loads(_store().read_text()))
    except (OSError, ValueError):
        return set()


def _remember(passed: set[str]) -> None:
    """Kept for the next load; a cache folder that cannot be written only means checking again."""
    store = _store()
    try:
        store.parent.mkdir(parents=True, exist_ok=True)
        tmp = store.with_suffix(".tmp")
        tmp.write_text(json.dumps(sorted(passed)[-200:]))
        os.replace(tmp, store)
    except OSError:
        pass


def _probe(path: str, repacked: bool = True) -> int:
    """In the child: load the model with llama.cpp (no context) and say what happened."""
    L = lib()
    params = L.llama_model_default_params()
    params.use_extra_bufts = repacked
    model = L.llama_model_load_from_file(path.encode(), params)
    if not model:
        print(
            f"llama.cpp could not load {Path(path).name}: {last_error() or 'damaged file or unsupported architecture'}"
        )
        return 1
    L.llama_model_free(model)
    print("ok")
    return 0


if __name__ == "__main__":
    sys.exit(_probe(sys.argv[1], repacked="--plain-layout" not in sys.argv[2:]))
