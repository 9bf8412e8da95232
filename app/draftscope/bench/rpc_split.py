"""A model split over llama.cpp RPC workers on this machine: our decoding (plain and drafting)
against the same model whole, and against llama.cpp's own server on the same split.

    draftscope bench rpc --model qwen2.5-coder-1.5b --workers 2 --prompts 4

Starts ``--workers`` ``draftscope worker`` processes on localhost (one thread each), then per
Spec-Bench prompt (first turn, ``--prompts`` categories) and per method, one greedy answer of
``--max-new-tokens``, prompt processing included: ``local plain`` (the whole model here),
``split plain``, ``split auto`` (the app's default drafters) and ``llama-server split`` (llama.cpp's
server with ``--rpc`` and the same layers offloaded, where scripts/build_llama_tools.sh built one
with RPC). Also the added latency per step: the plain-step cost measured at load, split vs whole.
"""

from __future__ import annotations

import argparse
import json
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import NamedTuple

from draftscope.core import argtypes


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_worker(port: int, threads: int) -> subprocess.Popen:
    proc = subprocess.Popen(
        [sys.executable, "-m", "draftscope", "worker", "--port", str(port), "--threads", str(threads)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    for _ in range(300):
        with socket.socket() as s:
            if s.connect_ex(("127.0.0.1", port)) == 0:
                return proc
        time.sleep(0.1)
    raise RuntimeError("worker did not start")


def add_arguments(p: argparse.ArgumentParser) -> None:
    from draftscope.bench.spec import DEFAULT_QUESTIONS

    p.add_argument("--model", default="qwen2.5-coder-1.5b")
    p.add_argument("--workers", type=argtypes.positive_int, default=2, help="rpc workers started on this machine")
    p.add_argument("--worker-threads", type=argtypes.positive_int, default=1)
    p.add_argument("--prompts", type=argtypes.positive_int, default=4, help="Spec-Bench categories (first turn each)")
    p.add_argument("--max-new-tokens", type=argtypes.positive_int, default=64)
    p.add_argument("--questions", default=str(DEFAULT_QUESTIONS))


class Timed(NamedTuple):
    """One answer: its tokens and the seconds it took, prompt processing included."""

    tokens: int
    seconds: float


def run(args: argparse.Namespace) -> int:
    from draftscope.core.runtime import load_runtime
    from draftscope.storage import Settings

    prompts = first_of_each_category(args.questions, args.prompts)
    ports = [free_port() for _ in range(args.workers)]
    workers = [start_worker(port, args.worker_threads) for port in ports]
    endpoints = [f"127.0.0.1:{port}" for port in ports]
    results: dict[str, list[Timed]] = {}
    try:
        local = load_runtime(Settings(model=args.model))
        split = load_runtime(Settings(model=args.model, workers=",".join(endpoints)))
        print(f"whole: {local.engine.backend.describe()}; plain step {local.engine.verify_costs[0] * 1000:.1f} ms")
        print(f"split: {split.engine.backend.describe()}; plain step {split.engine.verify_costs[0] * 1000:.1f} ms")
        runs = [("local plain", local, False), ("split plain", split, False), ("split auto", split, True)]
        _time_ours(prompts, runs, args.max_new_tokens, results)
        prompt_ids = [local.engine.encode_chat([{"role": "user", "content": t}]) for t in prompts]
        gguf, offloaded = _offloaded(args.model, split)
        local.engine.backend.close()
        split.engine.backend.close()
        _time_llama_server(gguf, offloaded, endpoints, prompt_ids, args.max_new_tokens, results)
    finally:
        for w in workers:
            w.terminate()
    _print_rates(results)
    return 0


def first_of_each_category(path: str, count: int) -> list[str]:
    """The first turn of the first question of each category, for ``count`` categories."""
    seen, prompts = set(), []
    for line in Path(path).read_text().splitlines():
        q = json.loads(line)
        if q["category"] not in seen and len(prompts) < count:
            seen.add(q["category"])
            prompts.append(q["turns"][0])
    return prompts


def _time_ours(prompts: list[str], runs: list, max_new_tokens: int, results: dict[str, list[Timed]]) -> None:
    """Each prompt answered by each (name, runtime, drafted) run, greedy, timed."""
    from draftscope.engine.engine import GenerationRequest

    for text in prompts:
        for name, runtime, drafted in runs:
            engine = runtime.engine
            ids = engine.encode_chat([{"role": "user", "content": text}])
            t0 = time.perf_counter()
            request = GenerationRequest(
                keep_cache=False,
                prompt_ids=ids,
                max_new_tokens=max_new_tokens,
                drafters=runtime.make_drafters() if drafted else [],
            )
            final = list(engine.generate(request))[-1]
            results.setdefault(name, []).append(Timed(len(final.token_ids), time.perf_counter() - t0))
            if final.error:
                print(f"{name}: {final.error}")


class _Offloaded(NamedTuple):
    gguf: Path
    layers: int  # the model's layers the workers hold


def _offloaded(model: str, split) -> _Offloaded:
    from draftscope.engine.backends.llama.rpc import gguf_layers
    from draftscope.models.resolve import resolve_model

    gguf = Path(resolve_model(model).gguf_path)
    remote = split.engine.backend.split
    return _Offloaded(gguf, gguf_layers(gguf) - remote["this computer"])


def _time_llama_server(
    gguf: Path,
    offloaded: int,
    endpoints: list[str],
    prompt_ids: list[list[int]],
    max_new_tokens: int,
    results: dict[str, list[Timed]],
) -> None:
    """llama.cpp's server on the same split (the same layers on the same workers), where one is found."""
    from draftscope.bench.llama_server import LlamaServer, find_llama_server
    from draftscope.engine.backends.llama.llamacpp import DEFAULT_CONTEXT, default_threads

    binary, why = find_llama_server()
    if binary is None:
        print(f"llama-server skipped: {why}")
        return
    peer = LlamaServer(
        binary, "llama-server", gguf, threads=default_threads(), context=DEFAULT_CONTEXT, max_new_tokens=max_new_tokens
    )
    peer.command += ["--rpc", ",".join(endpoints), "-ngl", str(offloaded), "-ts", ",".join(["1"] * len(endpoints))]
    peer.start()
    try:
        for ids in prompt_ids:
            reply = peer.answer(list(ids))
            results.setdefault("llama-server split", []).append(Timed(len(reply.tokens), reply.seconds))
    finally:
        peer.stop()


def _print_rates(results: dict[str, list[Timed]]) -> None:
    base = None
    print("| method | tokens/s (prompt processing included) | vs local plain |")
    print("|---|---:|---:|")
    for name, rows in results.items():
        rate = sum(r.tokens for r in rows) / sum(r.seconds for r in rows)
        base = base or rate
        print(f"| {name} | {rate:.2f} | {rate / base:.2f}x |")
