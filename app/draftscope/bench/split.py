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

from draftscope.core import argtypes


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_worker(port: int, threads: int) -> subprocess.Popen:
    proc = subprocess.Popen([sys.executable, "-m", "draftscope", "worker", "--port", str(port), "--threads",
                             str(threads)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
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


def run(args: argparse.Namespace) -> int:
    from draftscope.bench.llama_server import LlamaServer, find_llama_server
    from draftscope.engine.backends.llama.llamacpp import DEFAULT_CONTEXT, default_threads
    from draftscope.engine.backends.llama.rpc import gguf_layers
    from draftscope.engine.engine import GenerationRequest
    from draftscope.models.resolve import resolve_model
    from draftscope.core.runtime import load_runtime
    from draftscope.storage import Settings

    seen, prompts = set(), []
    for line in Path(args.questions).read_text().splitlines():
        q = json.loads(line)
        if q["category"] not in seen and len(prompts) < args.prompts:
            seen.add(q["category"])
            prompts.append(q["turns"][0])
    ports = [free_port() for _ in range(args.workers)]
    workers = [start_worker(port, args.worker_threads) for port in ports]
    endpoints = [f"127.0.0.1:{port}" for port in ports]
    results: dict[str, list[tuple[int, float]]] = {}
    try:
        local = load_runtime(Settings(model=args.model))
        split = load_runtime(Settings(model=args.model, workers=",".join(endpoints)))
        print(f"whole: {local.engine.backend.describe()}; plain step {local.engine.verify_costs[0] * 1000:.1f} ms")
        print(f"split: {split.engine.backend.describe()}; plain step {split.engine.verify_costs[0] * 1000:.1f} ms")
        runs = [("local plain", local, False), ("split plain", split, False), ("split auto", split, True)]
        for text in prompts:
            for name, runtime, drafted in runs:
                engine = runtime.engine
                ids = engine.encode_chat([{"role": "user", "content": text}])
                t0 = time.perf_counter()
                final = list(engine.generate(GenerationRequest(keep_cache=False, prompt_ids=ids, max_new_tokens=args.max_new_tokens,
                                                               drafters=runtime.make_drafters() if drafted else [])))[-1]
                results.setdefault(name, []).append((len(final.token_ids), time.perf_counter() - t0))
                if final.error:
                    print(f"{name}: {final.error}")
        prompt_ids = [local.engine.encode_chat([{"role": "user", "content": t}]) for t in prompts]
        gguf = Path(resolve_model(args.model).gguf_path)
        layers = gguf_layers(gguf)
        remote = split.engine.backend.split
        offloaded = layers - remote["this computer"]
        local.engine.backend.close()
        split.engine.backend.close()
        binary, why = find_llama_server()
        if binary is None:
            print(f"llama-server skipped: {why}")
        else:
            peer = LlamaServer(binary, "llama-server", gguf, threads=default_threads(), context=DEFAULT_CONTEXT,
                               max_new_tokens=args.max_new_tokens)
            peer.command += ["--rpc", ",".join(endpoints), "-ngl", str(offloaded), "-ts",
                             ",".join(["1"] * len(endpoints))]
            peer.start()
            try:
                for ids in prompt_ids:
                    out, secs, _ = peer.answer(list(ids))
                    results.setdefault("llama-server split", []).append((len(out), secs))
            finally:
                peer.stop()
    finally:
        for w in workers:
            w.terminate()
    base = None
    print("| method | tokens/s (prompt processing included) | vs local plain |")
    print("|---|---:|---:|")
    for name, rows in results.items():
        rate = sum(t for t, _ in rows) / sum(s for _, s in rows)
        base = base or rate
        print(f"| {name} | {rate:.2f} | {rate / base:.2f}x |")
    return 0

