"""A llama.cpp model in a child process, so that nothing it does can end the app.

A model split over RPC workers needs it: llama.cpp's RPC client aborts its process when a worker
cannot be reached, speaks another protocol version or dies mid-answer. Here that process is a
child; the app hears of it as an error naming the worker (llama.cpp's last words, kept from the
child's stderr), the answer so far stays, and the next answer opens the model again. A call that
takes longer than ``call_timeout_s`` (a worker that stopped answering) ends the child the same way:
nothing hangs.

The child holds a LlamaCppBackend; every call of the loop (and of the slots) goes over a pipe, and
logits come back through shared memory the parent owns.
"""

from __future__ import annotations

import multiprocessing
import os
import signal
import tempfile
import threading
from multiprocessing import shared_memory
from multiprocessing.connection import Connection
from multiprocessing.process import BaseProcess
from pathlib import Path

import numpy as np

from draftscope.engine.backends.base import Backend, Verified
from draftscope.engine.backends.llama.llama_lib import LlamaCppError
from draftscope.engine.backends.work import MAX_TREE, PREFILL_BATCH
from draftscope.rules import LLAMA_CONTEXT

LOAD_TIMEOUT_S = 600.0  # opening the model: workers receive their layers over the network
CALL_TIMEOUT_S = 120.0  # one call (a prefill chunk of 512 tokens included)


class IsolatedLlamaBackend(Backend):
    reads_in_chunks = True
    kind = "llama.cpp"
    saves_slots = False  # its caches are not saved on disk: they live in the child, with the workers
    gives_hidden = False
    no_hidden_reason = (
        "runs a model shared with RPC workers in a child process, which does not pass its hidden "
        "state back; on this computer alone (no workers) it does"
    )
    _log: str  # the child's stderr, a temporary file (each _open makes one)

    def __init__(
        self,
        path: str | Path,
        tokenizer,
        *,
        name: str | None = None,
        context: int = LLAMA_CONTEXT,
        threads: int | None = None,
        slots: int = 1,
        workers: list[str] | None = None,
        repacked: bool = True,
        call_timeout_s: float = CALL_TIMEOUT_S,
        load_timeout_s: float = LOAD_TIMEOUT_S,
    ) -> None:
        self.path = Path(path)
        self.tokenizer = tokenizer
        self.name = name or self.path.stem
        self.workers = list(workers or [])
        self.call_timeout_s, self.load_timeout_s = call_timeout_s, load_timeout_s
        self._args = dict(
            path=str(self.path),
            name=self.name,
            context=context,
            threads=threads,
            slots=slots,
            workers=self.workers,
            repacked=repacked,
        )
        self._lock = threading.RLock()
        self._proc: BaseProcess | None = None
        self._conn: Connection | None = None
        self._shm: shared_memory.SharedMemory | None = None
        self.dead: str | None = None  # why the child ended, until the model is opened again
        self._open()

    # ------------------------------------------------------------------ the child

    def _open(self) -> None:
        if getattr(self, "_log", None):
            Path(self._log).unlink(missing_ok=True)  # the last child's words were said with its error
        ctx = multiprocessing.get_context("spawn")
        self._conn, child_end = ctx.Pipe()
        fd, self._log = tempfile.mkstemp(prefix="draftscope-llama-", suffix=".log")
        os.close(fd)
        self._proc = ctx.Process(
            target=_child_main, args=(child_end, self._args, self._log), daemon=True, name=f"llama.cpp {self.name}"
        )
        self._proc.start()
        child_end.close()
        info = self._call("open", timeout=self.load_timeout_s)
        self.vocab, self.max_context = info["vocab"], info["max_context"]
        self.eos_ids = set(info["eos_ids"])
        eos = getattr(self.tokenizer, "eos_token_id", None)
        if isinstance(eos, int):
            self.eos_ids.add(eos)
        self.precision, self.precision_reason = info["precision"], info["precision_reason"]
        self.description, self.split, self.threads = info["description"], info["split"], info["threads"]
        self.slots, self.leaves, self.batch_capacity = info["slots"], info["leaves"], info["batch_capacity"]
        self.prefill_batch = min(PREFILL_BATCH, self.batch_capacity)
        self.max_tree = MAX_TREE  # the shared logits buffer holds a root and MAX_TREE nodes a slot
        self.device, self._describe = info["device"], info["describe"]
        rows = self.slots * (MAX_TREE + 1)  # every slot's root and largest tree
        self._shm = shared_memory.SharedMemory(create=True, size=rows * self.vocab * 4)
        self._call("attach", self._shm.name, rows)
        self.dead = None

    def _ended(self, why: str) -> LlamaCppError:
        """The child is gone (or made to go): its last words make the message."""
        if self._proc is not None and self._proc.is_alive():
            self._proc.kill()
        if self._proc is not None:
            self._proc.join(5)
        said = _last_words(self._log)
        self.dead = f"{why}{': ' + said if said else ''}"
        self._release()
        where = f" (workers: {', '.join(self.workers)})" if self.workers else ""
        return LlamaCppError(f"llama.cpp stopped{where}: {self.dead}. The model opens again for the next answer")

    def _release(self) -> None:
        if self._conn is not None:
            self._conn.close()
            self._conn = None
        if self._shm is not None:
            self._shm.close()
            self._shm.unlink()
            self._shm = None

    def _call(self, name: str, *args, timeout: float | None = None):
        with self._lock:
            if self._conn is None:
                raise LlamaCppError(f"llama.cpp is not running: {self.dead or 'closed'}")
            try:
                self._conn.send((name, args))
                if not self._conn.poll(timeout or self.call_timeout_s):
                    raise self._ended(f"no answer within {timeout or self.call_timeout_s:.0f} s")
                status, value = self._conn.recv()
            except (EOFError, BrokenPipeError, ConnectionResetError, OSError):
                code = self._proc.exitcode if self._proc is not None else None
                raise self._ended(f"its process ended{_signal_words(code)}") from None
            if status == "error":
                kind, text = value
                raise (ValueError if kind == "ValueError" else LlamaCppError)(text)
            return self._unpack(value)

    def _unpack(self, value):
        if isinstance(value, tuple) and value and value[0] == "logits":
            _, first, rows = value
            view = np.ndarray((rows, self.vocab), dtype=np.float32, buffer=self._shm.buf, offset=first * self.vocab * 4)
            return Verified(view.copy())
        if isinstance(value, dict):
            return {k: self._unpack(v) for k, v in value.items()}
        return value

    # ------------------------------------------------------------------ the loop's calls

    def ensure_open(self) -> None:
        """The child ended (a lost worker): open the model again, once however many answers ask."""
        with self._lock:
            if self._conn is None:
                self._open()

    # the face (the stepper's verbs, engine/stepper.py); one answer's verbs (start, verify, commit,
    # truncate) are slot 0's view over them (base.SlotView)
    def decode_many(self, work: dict) -> dict:
        return self._call("decode_many", work)

    def clear_slot(self, slot: int) -> None:
        if self._conn is None:  # nothing to clear in a child that ended; a start opens it again
            return
        self._call("clear_slot", slot)

    def commit_slot(self, slot: int, path: list[int]) -> None:
        self._call("commit_slot", slot, list(path))

    def truncate_slot(self, slot: int, length: int) -> None:
        self._call("truncate_slot", slot, length)

    copies_slots = True

    def copy_slot(self, source: int, target: int, length: int) -> None:
        self._call("copy_slot", source, target, length)

    def slot_cached(self, slot: int) -> int:
        return self._call("slot_cached", slot)

    def held_tokens(self, slot: int) -> list[int]:
        return self._call("held_tokens", slot) if self._conn is not None else []

    def keep_prefix(self, slot: int, prompt: list[int], *, want_hidden: bool = False) -> int:
        self.ensure_open()  # a child that ended (a lost worker) opens again for the next prompt
        self.last_kept = self._call("keep_prefix", slot, list(prompt))
        return self.last_kept

    def tokenize(self, text: str, *, special: bool = True) -> list[int]:
        return self._call("tokenize", text, special)

    def describe(self) -> str:
        return self._describe + (f" · stopped: {self.dead}" if self.dead else "")

    def close(self) -> None:
        with self._lock:
            if self._conn is not None:
                try:
                    self._conn.send(("close", ()))
                except OSError:
                    pass
            if self._proc is not None:
                self._proc.join(5)
                if self._proc.is_alive():
                    self._proc.kill()
                self._proc = None
            self._release()
            if getattr(self, "_log", None):
                Path(self._log).unlink(missing_ok=True)

    def __del__(self) -> None:
        try:
            self.close()
        except Exception:
            pass


def _signal_words(code: int | None) -> str:
    if code is None or code >= 0:
        return f" (exit code {code})" if code else ""
    try:
        return f" ({signal.Signals(-code).name})"
    except ValueError:
        return f" (signal {-code})"


def _last_words(log: str) -> str:
    """llama.cpp's last error line in the child's stderr (its abort message names the worker)."""
    try:
        lines = [ln.strip() for ln in Path(log).read_text(errors="replace").splitlines() if ln.strip()]
    except OSError:
        return ""
    telling = [ln for ln in lines if any(w in ln.lower() for w in ("error", "fail", "abort", "crash", "connect"))]
    line = (telling or lines or [""])[-1]
    return line.split("GGML_ABORT", 1)[0].rstrip(": ")[-300:]


# ---------------------------------------------------------------------- in the child process


def _child_main(conn, args: dict, log: str) -> None:
    fd = os.open(log, os.O_WRONLY | os.O_APPEND)
    os.dup2(fd, 2)  # llama.cpp's abort message (naming the lost worker) lands where the parent reads it
    from draftscope.engine.backends.llama.llamacpp import LlamaCppBackend  # noqa: PLC0415  # once stderr goes to the log

    backend, shm, rows = None, None, 0
    while True:
        try:
            name, call_args = conn.recv()
        except (EOFError, OSError):
            break
        if name == "close":
            break
        try:
            if name == "open":
                backend = LlamaCppBackend(
                    args["path"],
                    None,
                    name=args["name"],
                    context=args["context"],
                    threads=args["threads"],
                    slots=args["slots"],
                    workers=args["workers"],
                    repacked=args["repacked"],
                )
                value = dict(
                    vocab=backend.vocab,
                    max_context=backend.max_context,
                    eos_ids=sorted(backend.eos_ids),
                    precision=backend.precision,
                    precision_reason=backend.precision_reason,
                    description=backend.description,
                    split=backend.split,
                    threads=backend.threads,
                    slots=backend.slots,
                    leaves=backend.leaves,
                    batch_capacity=backend.batch_capacity,
                    device=backend.device,
                    describe=backend.describe(),
                )
            elif name == "attach":
                # the parent's (spawn shares its resource tracker: the parent's unlink is the one)
                shm = shared_memory.SharedMemory(name=call_args[0])
                rows = call_args[1]
                value = None
            else:
                # while no model is open, getattr(None, name) raises first: told to the parent
                value = _pack(getattr(backend, name)(*call_args), shm, rows, backend.vocab)  # type: ignore[union-attr]
            conn.send(("ok", value))
        except Exception as exc:  # told to the parent, which raises it there
            conn.send(("error", (type(exc).__name__, str(exc))))
    if backend is not None:
        backend.close()
    if shm is not None:
        shm.close()


def _pack(value, shm, rows: int, vocab: int):
    """Verified logits into the shared memory, one after another; what was packed says where."""
    if isinstance(value, Verified):
        value = {None: value}
        return _pack(value, shm, rows, vocab)[None]
    if isinstance(value, dict) and any(isinstance(v, Verified) for v in value.values()):
        out, first = {}, 0
        for key, v in value.items():
            if not isinstance(v, Verified):  # an item's error (pickled as it is)
                out[key] = v
                continue
            logits = v.logits
            n = logits.shape[0]
            if first + n > rows:
                raise LlamaCppError(f"{first + n} rows of logits; the shared buffer holds {rows}")
            np.ndarray((n, vocab), dtype=np.float32, buffer=shm.buf, offset=first * vocab * 4)[:] = logits
            out[key] = ("logits", first, n)
            first += n
        return out
    return value
