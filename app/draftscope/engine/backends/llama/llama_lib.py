"""llama-cpp-python loaded once, its logging caught: llama.cpp prints every tensor at load, and
says why it gave up only in its log, so the last error lines are kept for our messages. No torch
here: the GGUF check's child process imports only this."""

from __future__ import annotations

import collections
import ctypes
import os
import sys
import threading
from pathlib import Path


class LlamaCppError(RuntimeError):
    pass


_init_lock = threading.Lock()
_initialised = False
_log_callback = None  # kept alive: llama.cpp calls it from C
_errors: collections.deque[str] = collections.deque(maxlen=8)  # llama.cpp's last error lines, for our messages
_buffers: collections.deque[str] = collections.deque(maxlen=16)  # "AMX model buffer size = ..." lines of recent loads


def lib():
    """llama_cpp, initialised once, its log kept from the terminal unless asked for
    (DRAFTSCOPE_LLAMA_LOG=1)."""
    global _initialised, _log_callback
    import llama_cpp

    with _init_lock:
        if not _initialised:
            verbose = bool(os.environ.get("DRAFTSCOPE_LLAMA_LOG"))

            def log(level, text, data):
                line = (text or b"").decode(errors="replace").rstrip()
                if "error" in line.lower() or "fail" in line.lower():
                    _errors.append(line)
                if "model buffer size" in line:
                    _buffers.append(line)
                if verbose:
                    print(line, file=sys.stderr)

            _log_callback = llama_cpp.llama_log_callback(log)
            llama_cpp.llama_log_set(_log_callback, ctypes.c_void_p(0))
            llama_cpp.llama_backend_init()
            _initialised = True
    return llama_cpp


def last_error() -> str:
    """llama.cpp's most telling recent error line (what it says before giving up), without its prefix."""
    for line in reversed(_errors):
        if "error loading model" in line or "unknown" in line or "cannot" in line:
            return line.split(": ", 1)[-1].removeprefix("error loading model: ")
    return _errors[-1].split(": ", 1)[-1] if _errors else ""


def weight_buffers() -> list[str]:
    """The buffer types the weights of the models loaded so far went to, as llama.cpp's load log names
    them ("CPU", "CPU_REPACK", "AMX", "CUDA0", "RPC[...]"): which kernels their products run on."""
    names = []
    for line in _buffers:
        name = line.split(":", 1)[-1].split("model buffer size")[0].strip()
        if name and name not in names:
            names.append(name)
    return names


_ggml_lib = None


def ggml():
    """libggml beside the libllama llama-cpp-python loaded (where the backend registry and its devices
    live), its functions typed once."""
    global _ggml_lib
    if _ggml_lib is None:
        import llama_cpp

        # where llama_cpp loaded libllama from (LLAMA_CPP_LIB_PATH: a build of one's own, e.g. CUDA)
        folder = Path(os.environ.get("LLAMA_CPP_LIB_PATH") or Path(llama_cpp.__file__).parent / "lib")
        _ggml_lib = _typed(ctypes.CDLL(str(next(folder.glob("libggml.so*"), folder / "libggml.so"))))
    return _ggml_lib


_P, _SIZE, _TEXT, _INT = ctypes.c_void_p, ctypes.c_size_t, ctypes.c_char_p, ctypes.c_int
_SIGNATURES = {  # name: (result, arguments)
    "ggml_backend_reg_by_name": (_P, [_TEXT]),
    "ggml_backend_reg_get_proc_address": (_P, [_P, _TEXT]),
    "ggml_backend_reg_dev_count": (_SIZE, [_P]),
    "ggml_backend_reg_dev_get": (_P, [_P, _SIZE]),
    "ggml_backend_dev_by_type": (_P, [_INT]),
    "ggml_backend_dev_count": (_SIZE, []),
    "ggml_backend_dev_get": (_P, [_SIZE]),
    "ggml_backend_dev_type": (_INT, [_P]),
    "ggml_backend_dev_name": (_TEXT, [_P]),
    "ggml_backend_dev_description": (_TEXT, [_P]),
    "ggml_backend_dev_memory": (None, [_P, ctypes.POINTER(_SIZE), ctypes.POINTER(_SIZE)]),
}


def _typed(library):
    for name, (result, arguments) in _SIGNATURES.items():
        function = getattr(library, name)
        function.restype, function.argtypes = result, arguments
    return library
