"""llama.cpp's own speculation as a peer in ``bench spec``: ``llama-server`` (of the llama.cpp that
llama-cpp-python ships: scripts/build_llama_tools.sh builds it) on the same GGUF, threads and
prompts, once plain and once per speculation type. A prompt goes as token ids to ``/completion``,
greedy, no prompt cache; its time is the request's wall time, prompt processing included, as ours
is counted."""

from __future__ import annotations

import atexit
import json
import os
import shutil
import socket
import subprocess
import time
import urllib.request
from pathlib import Path
from typing import NamedTuple

VERSION = "0.3.36"  # the llama-cpp-python whose sources build_llama_tools.sh builds from
# method -> llama-server's speculation flags ("draft" also gets --model-draft)
SPEC_TYPES = {
    "llama-server": [],
    "llama-server-ngram-mod": ["--spec-default"],  # llama.cpp's recommended default (ngram-mod)
    "llama-server-ngram-simple": ["--spec-type", "ngram-simple"],
    "llama-server-ngram-map-k": ["--spec-type", "ngram-map-k"],
    "llama-server-draft": [],
}
METHODS = tuple(SPEC_TYPES)


def find_llama_server() -> tuple[str | None, str]:
    """(path, "") or (None, why not): $DRAFTSCOPE_LLAMA_SERVER, then PATH, then where
    scripts/build_llama_tools.sh puts it."""
    named = os.environ.get("DRAFTSCOPE_LLAMA_SERVER")
    if named:
        return (named, "") if Path(named).is_file() else (None, f"DRAFTSCOPE_LLAMA_SERVER={named} is not a file")
    on_path = shutil.which("llama-server")
    if on_path:
        return on_path, ""
    for cache in (os.environ.get("XDG_CACHE_HOME"), Path.home() / ".cache"):
        built = Path(cache or "") / "draftscope" / f"llama.cpp-{VERSION}" / "bin" / "llama-server"
        if cache and built.is_file():
            return str(built), ""
    return None, "llama-server not found (build it with `bash scripts/build_llama_tools.sh`, or put it on PATH)"


def find_llama_bench() -> tuple[Path | None, str]:
    """(path, "") or (None, why not): llama-bench beside the llama-server find_llama_server finds."""
    server, why = find_llama_server()
    bench = Path(server).with_name("llama-bench") if server else None
    if bench is None or not bench.is_file():
        return None, f"llama-bench not found ({why or 'not beside llama-server'})"
    return bench, ""


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class ServerAnswer(NamedTuple):
    """One answer from llama-server: its tokens, the seconds the request took and the server's own
    timings (``predicted_ms``, ``prompt_ms``, ...)."""

    tokens: list[int]
    seconds: float
    timings: dict


class LlamaServer:
    """One ``llama-server`` process for one method, started on first use."""

    def __init__(
        self,
        binary: str,
        method: str,
        model: Path,
        *,
        threads: int,
        context: int,
        max_new_tokens: int,
        draft_model: Path | None = None,
        timeout: float = 120.0,
        parallel: int = 1,
        gpu_layers: int | None = None,
        extra: tuple[str, ...] = (),
    ) -> None:
        """``gpu_layers``: llama-server's -ngl (its layers on the card; None: its own default); ``extra``:
        more of its flags (``--slot-save-path DIR``, say)."""
        if method == "llama-server-draft" and draft_model is None:
            raise ValueError("llama-server-draft needs --draft-model (a GGUF)")
        self.method, self.max_new_tokens, self.timeout = method, max_new_tokens, timeout
        self.port = _free_port()
        flags = list(SPEC_TYPES[method])
        if method == "llama-server-draft":
            flags += ["--model-draft", str(draft_model), "--threads-draft", str(threads)]
        if gpu_layers is not None:
            flags += ["-ngl", str(gpu_layers)]
        self.command = [
            binary,
            "-m",
            str(model),
            "--host",
            "127.0.0.1",
            "--port",
            str(self.port),
            "-t",
            str(threads),
            "-tb",
            str(threads),
            "-c",
            str(context * parallel),
            "-np",
            str(parallel),
            "--no-webui",
            *flags,
            *extra,
        ]
        self.proc: subprocess.Popen | None = None
        self.log = b""

    def start(self) -> None:
        self.proc = subprocess.Popen(self.command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        deadline = time.monotonic() + self.timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                said = self.proc.stderr.read().decode(errors="replace").strip().splitlines()[-3:]
                raise RuntimeError(
                    f"llama-server ({self.method}) exited with code {self.proc.returncode}: " + " / ".join(said)
                )
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/health", timeout=2) as r:
                    if r.status == 200:
                        return
            except OSError:
                pass
            time.sleep(0.2)
        self.stop()
        raise RuntimeError(f"llama-server ({self.method}) did not come up within {self.timeout:.0f} s")

    def answer(self, ids: list[int]) -> ServerAnswer:
        """(tokens, seconds, llama-server's timings) for a greedy answer to the token ids ``ids``."""
        if self.proc is None:
            self.start()
        body = json.dumps(
            {
                "prompt": ids,
                "n_predict": self.max_new_tokens,
                "temperature": 0.0,
                "top_k": 1,
                "cache_prompt": False,
                "return_tokens": True,
                "stream": False,
            }
        ).encode()
        request = urllib.request.Request(
            f"http://127.0.0.1:{self.port}/completion", data=body, headers={"Content-Type": "application/json"}
        )
        t0 = time.perf_counter()
        with urllib.request.urlopen(request, timeout=self.timeout * 10) as r:
            reply = json.loads(r.read())
        seconds = time.perf_counter() - t0
        # the tokens end with the end token where the answer ended there, as ours do
        return ServerAnswer([int(t) for t in reply.get("tokens") or []], seconds, reply.get("timings") or {})

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
        self.proc = None


class LlamaServerPeers:
    """The llama-server methods a run asks for, each its own server, stopped together."""

    def __init__(self, methods: list[str], engine, max_new_tokens: int, draft_model: Path | None) -> None:
        binary, why = find_llama_server()
        if binary is None:
            raise FileNotFoundError(why)
        backend = engine.backend
        offload = getattr(backend, "offload", None)  # the same layers on the card as ours (gpu_offload.Offload)
        layers = offload.layers if offload is not None else None
        atexit.register(self.close)  # a run that fails midway leaves no server behind
        self.servers = {
            m: LlamaServer(
                binary,
                m,
                Path(backend.path),
                threads=backend.threads,
                context=backend.max_context,
                max_new_tokens=max_new_tokens,
                draft_model=draft_model,
                gpu_layers=layers,
            )
            for m in methods
        }

    def answer(self, method: str, ids: list[int]) -> ServerAnswer:
        """(tokens, seconds, llama-server's timings) of ``method``'s server."""
        return self.servers[method].answer(ids)

    def close(self) -> None:
        for server in self.servers.values():
            server.stop()
