"""A PDF or DOCX parsed in a child process (:mod:`draftscope.documents.child`) under a time limit,
a memory limit and the caller's cancel, so that no file can hold the window, the server or a
documents folder for longer, or take more memory, than :mod:`draftscope.documents.limits` allows.

Pure-Python parsing in a thread cannot be interrupted; a process can be killed. The child starts
a fresh interpreter and imports only its parser (pypdf or python-docx): ~0.1-0.3 s, small beside
parsing any real document. Every way the child can end — an answer, a refusal, the memory limit,
the time limit, a cancel, a native crash — becomes text or an :class:`AttachmentError` naming the
file and what happened."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import threading
import time
from typing import Protocol

from draftscope.documents.limits import AttachmentError, ReadCancelled, ReadLimits, megabytes

CHILD_COMMAND = [sys.executable, "-m", "draftscope.documents.child"]
CANCEL_POLL_S = 0.05
"""How often the wait for the child looks at the cancel: a Cancel is obeyed within ~50 ms."""


class Cancel(Protocol):
    """What a caller cancels a read with: a ``threading.Event`` (set from any thread)."""

    def is_set(self) -> bool: ...


def parse_in_child(name: str, kind: str, data: bytes, limits: ReadLimits, cancel: Cancel | None = None) -> str:
    """The text of ``data`` (a ``kind`` "pdf" or "docx" file called ``name``), read by a child
    process; :class:`AttachmentError` (or :class:`ReadCancelled`) for anything else."""
    header = {
        "name": name,
        "kind": kind,
        "pdf_pages": limits.pdf_pages,
        "text_chars": limits.text_chars,
        "memory_bytes": limits.memory_bytes,
    }
    try:
        child = subprocess.Popen(
            CHILD_COMMAND, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL
        )
    except OSError as exc:
        raise AttachmentError(f"{name} could not be read: its reader did not start ({exc})") from exc
    pipes = _Pipes(child, json.dumps(header).encode() + b"\n" + data)
    try:
        _wait(name, child, limits, cancel)
    except BaseException:  # given up, cancelled, Ctrl-C: the child never outlives the read
        child.kill()
        raise
    finally:
        child.wait()  # reaped: no zombie
        out = pipes.join()
    return _answer(name, child.returncode, out, limits)


class _Pipes:
    """The child's input written and its answer read on two threads of their own: a pipe holds
    64 KB, so a larger file written from the waiting thread would block it past any cancel (and
    ``communicate`` with a timeout stops sending its input after the first timeout)."""

    def __init__(self, child: subprocess.Popen, payload: bytes) -> None:
        self.out: list[bytes] = []
        self._threads = [
            threading.Thread(target=self._send, args=(child.stdin, payload), daemon=True),
            threading.Thread(target=self._receive, args=(child.stdout,), daemon=True),
        ]
        for thread in self._threads:
            thread.start()

    @staticmethod
    def _send(stdin, payload: bytes) -> None:
        try:
            with stdin:
                stdin.write(payload)
        except OSError:  # the child ended (done, refused or killed) before reading it all
            pass

    def _receive(self, stdout) -> None:
        with stdout:
            self.out.append(stdout.read())

    def join(self) -> bytes:
        """The answer, once the child has ended (its pipes are closed, so both threads end)."""
        for thread in self._threads:
            thread.join()
        return self.out[0] if self.out else b""


def _wait(name: str, child: subprocess.Popen, limits: ReadLimits, cancel: Cancel | None) -> None:
    """Until the child ends; looks at the cancel and the clock every poll."""
    deadline = time.monotonic() + limits.seconds
    while True:
        try:
            child.wait(timeout=CANCEL_POLL_S)
            return
        except subprocess.TimeoutExpired:
            pass
        if cancel is not None and cancel.is_set():
            raise ReadCancelled(f"reading {name} was cancelled")
        if time.monotonic() > deadline:
            raise AttachmentError(
                f"{name} took more than {limits.seconds:g} s to read and was given up: "
                "a PDF, Word document or HTML page must be read within that time"
            )


def _answer(name: str, returncode: int, out: bytes, limits: ReadLimits) -> str:
    """The child's answer as text, or the error it stands for."""
    status, body = out[:1], out[1:]
    if returncode == 0 and status == b"T":
        return body.decode("utf-8", "replace")
    if returncode == 0 and status == b"E":
        raise AttachmentError(body.decode("utf-8", "replace"))
    if status == b"M" or returncode == -getattr(signal, "SIGKILL", 9):  # the kernel kills for memory with SIGKILL
        raise AttachmentError(
            f"{name} needs more than {megabytes(limits.memory_bytes)} of memory to read: reading it was given up"
        )
    if returncode < 0:
        try:
            what = signal.Signals(-returncode).name
        except ValueError:
            what = f"signal {-returncode}"
        raise AttachmentError(f"{name} could not be read: its reader crashed ({what}); the file may be damaged")
    raise AttachmentError(f"{name} could not be read: its reader ended without an answer (exit status {returncode})")
