"""``python -m draftscope.engine.backends.llama.selftest``: does the installed llama.cpp run on this CPU,
on the kernels real models take?

llama.cpp is compiled for the CPU it is built on, and at load it copies quantised weights into the
layouts of this CPU's fastest kernels (AMX tiles, interleaved AVX2/AVX512 rows). Two ways that
ends a process: a wheel cached on another CPU dies of an illegal instruction, and a CPU that lists
a feature it cannot run (virtual machines that show AMX) faults in the first batched product. So
the check writes a small quantised random model (every weight in one of the catalogue's types, in
shapes those kernels take), feeds it a prompt of several tokens, a branching draft tree and a
one-token step with the app's threads, in a child process, and reads how the child ended: the
last stage it reached, where its weights went, and the signal that killed it.

scripts/setup.sh runs this (through llama_build) and rebuilds llama.cpp without the kernels that
faulted; the app runs it once per llama.cpp and CPU before the first GGUF opens (llama_verdict).
Exit 0 and one line when everything ran."""

from __future__ import annotations

import signal
import subprocess
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from draftscope.draft_tree import DraftTree
from draftscope.engine.backends.llama.gguf_writer import random_quantised_llama
from draftscope.engine.backends.llama.llama_lib import weight_buffers
from draftscope.engine.backends.llama.llamacpp import LlamaCppBackend

CHILD_TIMEOUT_S = 300.0
CHILD_COMMAND = [sys.executable, "-m", "draftscope.engine.backends.llama.selftest", "--child"]
PROMPT = [72, 101, 108, 108, 111, 44, 32, 119, 111, 114, 108, 100]  # "Hello, world": a batch of 11 + the root
STAGES = {  # what the child was doing when it last said so, in words
    "start": "starting",
    "load": "loading the quantised model",
    "prompt": f"a batched product ({len(PROMPT) - 1} prompt tokens)",
    "tree": "a batched product (a branching draft tree of 6 nodes)",
    "step": "a one-token step",
}


@dataclass
class SelfTest:
    ok: bool
    repacked: bool  # were the weights allowed onto repacked layouts (llama.cpp's extra buffer types)
    message: str  # one line for people
    kernels: list[str] = field(default_factory=list)  # the CPU features this llama.cpp was built with
    buffers: list[str] = field(default_factory=list)  # where the weights went: CPU, CPU_REPACK, AMX
    stage: str = "start"  # the last stage the child reached
    signal: str | None = None  # SIGSEGV, SIGILL, ... when the child died of one
    timed_out: bool = False  # the child did not finish in time (a busy machine, or a hang)
    threads: int | None = None  # the threads llama.cpp ran with, as the child said

    @property
    def suspect(self) -> str | None:
        """The kernels to turn off first: AMX where the weights went to AMX tiles (or the build has
        them), "AVX512" where an illegal instruction killed a build with AVX512, else None."""
        if self.ok:
            return None
        if "AMX" in self.buffers or ("AMX_INT8" in self.kernels and self.signal != "SIGILL"):
            return "AMX"
        if any(k.startswith("AVX512") for k in self.kernels):
            return "AVX512"
        return None


def run(
    *,
    repacked: bool = True,
    timeout: float = CHILD_TIMEOUT_S,
    command: list[str] | None = None,
    threads: int | None = None,
) -> SelfTest:
    """Run the check in a child process and say how it went. ``threads``: llama.cpp's (None: its
    default for this machine). ``command``: the child to run instead of this module's (tests stand
    in a child that dies)."""
    argv = list(command or CHILD_COMMAND)
    if not repacked:
        argv = [*argv, "--plain-layout"]
    if threads:
        argv = [*argv, "--threads", str(threads)]
    try:
        child = subprocess.run(argv, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired as exc:  # what it said before it hung, "ok" included, is no verdict
        said, _ok, _error = _read(
            exc.stdout.decode(errors="replace") if isinstance(exc.stdout, bytes) else exc.stdout or ""
        )
        return SelfTest(
            False,
            repacked,
            f"llama.cpp did not finish its self-test within {timeout:.0f} s "
            f"({STAGES.get(said['stage'], said['stage'])})",
            timed_out=True,
            **said,
        )
    said, ok, error = _read(child.stdout)
    if child.returncode == 0 and ok:
        return SelfTest(True, repacked, f"llama.cpp runs on this CPU ({_kernel_words(said)})", **said)
    if child.returncode < 0:  # a death by a signal, whatever it printed before
        name = _signal_name(-child.returncode)
        return SelfTest(False, repacked, _death_words(name, -child.returncode, said), signal=name, **said)
    error = error or _last_line(child.stderr) or f"exit status {child.returncode}"
    return SelfTest(
        False,
        repacked,
        f"llama.cpp failed its self-test while {STAGES.get(said['stage'], said['stage'])}: {error}",
        **said,
    )


def _read(stdout: str) -> tuple[dict, bool, str | None]:
    """(the SelfTest fields the child reported: stage, kernels, buffers; whether it said "ok"; its
    "error: ..." line): the flag and the error kept apart, never passed on as fields."""
    said: dict = {"stage": "start", "kernels": [], "buffers": []}
    ok, error = False, None
    for line in (stdout or "").splitlines():
        key, _, value = line.partition(": ")
        if key == "stage":
            said["stage"] = value
        elif key in ("kernels", "buffers"):
            said[key] = [v for v in value.split(",") if v]
        elif key == "threads" and value.isdigit():
            said["threads"] = int(value)
        elif key == "error":
            error = value
        elif line == "ok":
            ok = True
    return said, ok, error


def _signal_name(number: int) -> str:
    try:
        return signal.Signals(number).name
    except ValueError:
        return f"signal {number}"


def _death_words(name: str, number: int, said: dict) -> str:
    try:
        what = signal.strsignal(number) or name
    except ValueError:
        what = name
    where = STAGES.get(said["stage"], said["stage"])
    on = f", its weights on {' + '.join(said['buffers'])}" if said["buffers"] else ""
    text = f"llama.cpp died of {name} ({what.lower()}) in {where}{on}"
    if "AMX" in said["buffers"]:
        text += ": this CPU lists AMX but faults in its kernels (virtual machines may)"
    elif name == "SIGILL":
        text += ": it was built for another CPU (an instruction this one lacks)"
    return text


def _kernel_words(said: dict) -> str:
    on = " + ".join(said["buffers"]) or "CPU"
    return f"weights on {on}; kernels {' '.join(said['kernels']) or 'baseline'}"


def _last_line(text: str) -> str:
    lines = [line for line in (text or "").splitlines() if line.strip()]
    return lines[-1].strip() if lines else ""


def kernels() -> list[str]:
    """The CPU features the installed llama.cpp was built with (llama_print_system_info's "X = 1")."""
    import llama_cpp

    info = llama_cpp.llama_print_system_info().decode(errors="replace")
    return [
        part.split("=")[0].strip() for part in info.replace("CPU :", "|").split("|") if part.strip().endswith("= 1")
    ]


def _child(repacked: bool, threads: int | None) -> int:
    """In the child: each stage said (and flushed) before it runs, so a death names where it came."""

    def say(line: str) -> None:
        print(line, flush=True)

    say("kernels: " + ",".join(kernels()))
    with tempfile.TemporaryDirectory(prefix="draftscope-selftest-") as tmp:
        path = random_quantised_llama(Path(tmp) / "selftest.gguf")
        say("stage: load")
        backend = LlamaCppBackend(path, None, context=256, repacked=repacked, threads=threads)  # the app's
        try:
            say(f"threads: {backend.threads}")
            say("buffers: " + ",".join(weight_buffers()))
            say("stage: prompt")
            backend.start(PROMPT)
            say("stage: tree")  # two branches under the root, one of depth 3: every node its own mask row
            tree = DraftTree(
                np.array([32, 119, 111, 97, 114, 108], np.int64),
                np.array([-1, 0, 1, -1, 3, 4], np.int32),
                np.array([1, 2, 3, 1, 2, 3], np.int32),
                np.ones(6, np.float32),
                np.ones(6, np.int8),
            )
            rows = backend.verify(PROMPT[-1], tree).logits
            if rows.shape[0] != 7 or not bool(np.isfinite(rows).all()):
                say("error: llama.cpp ran but gave unusable logits")
                return 1
            backend.commit([0, 1])
            say("stage: step")
            backend.verify(111, DraftTree.empty())
        finally:
            backend.close()
    say("ok")
    return 0


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if "--child" in argv:
        threads = int(argv[argv.index("--threads") + 1]) if "--threads" in argv else None
        return _child(repacked="--plain-layout" not in argv, threads=threads)
    result = run()
    import llama_cpp

    print(f"{result.message} (llama-cpp-python {llama_cpp.__version__})")
    return 0 if result.ok else 1


if __name__ == "__main__":
    sys.exit(main())
