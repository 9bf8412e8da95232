"""A llama.cpp slot's cache as bytes and back (``llama_state_seq_get_data``/``set_data``), for the
caches kept on disk (engine/kv_disk.py). The sequence state holds the cells' positions and their
K/V, not the tokens: the disk cache keeps those beside it."""

from __future__ import annotations

import ctypes
import logging

log = logging.getLogger(__name__)


def llama_identity(backend) -> dict:
    """What a saved state must have been made under: the GGUF file (path, size, mtime), llama.cpp's
    version and state format, and the cache's shape (layers, width, KV types, where layers run)."""
    import llama_cpp

    L = backend._L
    stat = backend.path.stat()
    defaults = L.llama_context_default_params()  # the KV types and flash attention are left at these
    return {
        "backend": "llama.cpp",
        "path": str(backend.path.resolve()),
        "size": stat.st_size,
        "mtime_ns": stat.st_mtime_ns,
        "precision": backend.precision,
        "context": backend.max_context,
        "kv_types": [int(defaults.type_k), int(defaults.type_v)],
        "flash_attention": int(getattr(defaults, "flash_attn_type", -2)),
        "device": str(backend.device),
        "offload": backend.offload.words() if backend.offload else "",
        "split": dict(backend.split),
        "n_embd": backend.hidden_size,
        "n_layer": int(L.llama_model_n_layer(backend._model)),
        "llama_cpp": llama_cpp.__version__,
        "state_version": int(getattr(L, "LLAMA_STATE_SEQ_VERSION", 0)),
    }


def export_state(backend, slot: int) -> bytes | None:
    """The slot's base sequence (between steps the only one holding cells) as bytes."""
    L, seq = backend._L, backend._seq(slot)
    size = int(L.llama_state_seq_get_size(backend._ctx, seq))
    if size <= 0:
        return None
    buf = (ctypes.c_uint8 * size)()
    got = int(L.llama_state_seq_get_data(backend._ctx, buf, size, seq))
    return ctypes.string_at(buf, got) if got else None


def import_state(backend, slot: int, tokens: list[int], positions: int, state: bytes) -> bool:
    """The slot emptied, then ``state`` put in its base sequence; True when llama.cpp took it and it
    covers exactly ``positions`` positions from 0. llama.cpp returns 0 where the cache has no run of
    free cells long enough (other slots' cells in the way): the slot is then left empty."""
    L, seq = backend._L, backend._seq(slot)
    backend.clear_slot(slot)
    buf = (ctypes.c_uint8 * len(state)).from_buffer_copy(state)
    got = int(L.llama_state_seq_set_data(backend._ctx, buf, len(state), seq))
    first = int(L.llama_memory_seq_pos_min(backend._memory, seq))
    last = int(L.llama_memory_seq_pos_max(backend._memory, seq))
    if got == 0 or (first, last) != (0, positions - 1):
        log.warning("llama.cpp did not take a saved cache (read %d bytes, positions %d..%d)", got, first, last)
        backend.clear_slot(slot)
        return False
    backend._past[slot] = positions
    backend.held.read(slot, 0, tokens)
    return True
