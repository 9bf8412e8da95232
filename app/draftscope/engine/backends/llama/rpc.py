"""llama.cpp's RPC backend: a model's layers split over this computer and ``rpc-server`` workers
on the network (llama.cpp built with GGML_RPC, as scripts/setup.sh builds it).

RPC is unauthenticated: a worker runs whatever its clients send, so workers belong on a trusted
network only. llama.cpp's RPC client aborts the process when a worker cannot be reached, answers
with another protocol version or dies mid-answer, so a model with workers runs in a child
process (engine/backends/llama/isolated.py); only that child ever calls into this module's client side.
``serve_worker`` is the worker's side: ``draftscope worker`` (llama.cpp's own ``rpc-server`` of
the same version does the same).
"""

from __future__ import annotations

import ctypes
import re
from dataclasses import dataclass
from pathlib import Path

from draftscope.engine.backends.llama.gguf_memory import memory_per_machine as per_machine
from draftscope.engine.backends.llama.llama_lib import ggml
from draftscope.engine.backends.llama.llama_lib import lib as llama

CPU_DEVICE = 0  # GGML_BACKEND_DEVICE_TYPE_CPU
_ENDPOINT = re.compile(r"^(\[[0-9A-Fa-f:.]+\]|[A-Za-z0-9](?:[A-Za-z0-9.-]{0,251}[A-Za-z0-9])?):(\d{1,5})$")


class WorkerError(ValueError):
    pass


def parse_workers(text: str | None) -> list[str]:
    """``host:port,host:port`` (spaces allowed) as a list; an entry that is not one, in words."""
    workers = [w.strip() for w in (text or "").replace(";", ",").split(",") if w.strip()]
    for w in workers:
        found = _ENDPOINT.match(w)
        if not found or not 1 <= int(found.group(2)) <= 65535:
            raise WorkerError(f"{w!r} is not a worker address: write host:port, e.g. 192.168.1.20:50052")
    if len(set(workers)) != len(workers):
        raise WorkerError("a worker is listed twice")
    if len(workers) > 16:  # GGML_RPC_MAX_SERVERS
        raise WorkerError(f"{len(workers)} workers: llama.cpp takes at most 16")
    return workers


def _rpc_reg(lib):
    reg = lib.ggml_backend_reg_by_name(b"RPC")
    if not reg:
        raise WorkerError("this llama.cpp was built without RPC (bash scripts/setup.sh builds it with GGML_RPC=ON)")
    return reg


def rpc_supported() -> bool:
    try:
        import llama_cpp

        return bool(llama_cpp.llama_supports_rpc())
    except Exception:  # not installed, or its library does not load
        return False


@dataclass
class WorkerDevice:
    endpoint: str
    device: int  # ctypes pointer value (ggml_backend_dev_t)
    free: int  # bytes free on the worker
    total: int


def connect_workers(workers: list[str]) -> list[WorkerDevice]:
    """Each worker's devices (connecting to it). Runs in the child process only: llama.cpp aborts
    the process when a worker cannot be reached or speaks another protocol version."""
    lib = ggml()
    reg = _rpc_reg(lib)
    add = ctypes.CFUNCTYPE(ctypes.c_void_p, ctypes.c_char_p)(
        lib.ggml_backend_reg_get_proc_address(reg, b"ggml_backend_rpc_add_server")
    )
    out = []
    for endpoint in workers:
        worker_reg = add(endpoint.encode())
        if not worker_reg:
            raise WorkerError(f"the worker at {endpoint} offers no device")
        for i in range(lib.ggml_backend_reg_dev_count(worker_reg)):
            dev = lib.ggml_backend_reg_dev_get(worker_reg, i)
            free, total = ctypes.c_size_t(), ctypes.c_size_t()
            lib.ggml_backend_dev_memory(dev, ctypes.byref(free), ctypes.byref(total))
            out.append(WorkerDevice(endpoint, dev, free.value, total.value))
    return out


def serve_worker(host: str, port: int, threads: int) -> None:
    """Serve this machine's CPU to llama.cpp RPC clients (blocks until the process is stopped)."""
    llama()  # initialises llama.cpp's backends (the CPU device)
    lib = ggml()
    reg = _rpc_reg(lib)
    start = ctypes.CFUNCTYPE(
        None, ctypes.c_char_p, ctypes.c_char_p, ctypes.c_size_t, ctypes.c_size_t, ctypes.POINTER(ctypes.c_void_p)
    )(lib.ggml_backend_reg_get_proc_address(reg, b"ggml_backend_rpc_start_server"))
    cpu = lib.ggml_backend_dev_by_type(CPU_DEVICE)
    if not cpu:
        raise WorkerError("llama.cpp found no CPU device to serve")
    devices = (ctypes.c_void_p * 1)(cpu)
    start(f"{host}:{port}".encode(), None, threads, 1, devices)


def gguf_layers(path) -> int:
    """The model's transformer layers (its GGUF's ``<arch>.block_count``)."""
    from gguf import GGUFReader

    reader = GGUFReader(str(path))
    arch = bytes(reader.fields["general.architecture"].parts[-1]).decode()
    field = reader.fields.get(f"{arch}.block_count")
    if field is None:
        raise WorkerError(f"{Path(path).name} does not say how many layers it has ({arch}.block_count)")
    return int(field.parts[-1][0])


def layer_split(layers: int, devices: list[WorkerDevice]) -> tuple[int, list[float]]:
    """(layers on the workers, each worker device's share of them): the machines take equal
    shares of the layers, this one included."""
    machines = len({d.endpoint for d in devices}) + 1
    remote = round(layers * (machines - 1) / machines)
    return remote, [1.0 / len(devices)] * len(devices)


THIS_COMPUTER = "this computer"


def memory_per_machine(path, split: dict[str, int], positions: int) -> dict[str, int]:
    """Bytes each machine of ``split`` holds for the model (this computer's first: it holds the first
    layers and the tensors outside them): gguf_memory.memory_per_machine."""
    return per_machine(path, split, positions, THIS_COMPUTER)
