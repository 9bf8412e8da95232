"""Peak resident memory of one answer: llama-cpp-python's own ``Llama`` against our engine on the
llama.cpp backend (and, with --torch, on torch), each in a fresh process so one's memory never
counts for the other. Same GGUF, context, threads and prompt; greedy, 64 new tokens.

    draftscope bench memory --model qwen2.5-coder-1.5b [--torch]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time

from draftscope.core import argtypes
from draftscope.optional_torch import require_torch

PROMPT = "Write a Python function that checks whether a string is a palindrome, with a short docstring."


def child(kind: str, model: str, tokens: int) -> None:
    from draftscope.models.resolve import load_tokenizer, resolve_model
    from draftscope.sysinfo import peak_rss_mb

    source = resolve_model(model)
    t0 = time.perf_counter()
    if kind == "llama-cpp-python":
        from llama_cpp import Llama

        from draftscope.engine.backends.llama.llamacpp import DEFAULT_CONTEXT, default_threads

        tok = load_tokenizer(source)
        text = tok.apply_chat_template(
            [{"role": "user", "content": PROMPT}], tokenize=False, add_generation_prompt=True
        )
        ids = list(tok(text, add_special_tokens=False)["input_ids"])
        threads = default_threads()
        llm = Llama(
            model_path=source.location, n_ctx=DEFAULT_CONTEXT, n_threads=threads, n_threads_batch=threads, verbose=False
        )
        out = []
        for t in llm.generate(ids, temp=0.0, top_k=1):
            out.append(t)
            if len(out) >= tokens:
                break
    else:
        from draftscope.engine.engine import Engine, GenerationRequest

        engine = Engine.load(model, backend=kind, measure=False)
        final = list(
            engine.generate(
                GenerationRequest(
                    keep_cache=False, messages=[{"role": "user", "content": PROMPT}], max_new_tokens=tokens
                )
            )
        )[-1]
        out = final.token_ids
    print(json.dumps({"kind": kind, "peak_mb": peak_rss_mb(), "tokens": len(out), "seconds": time.perf_counter() - t0}))


def add_arguments(ap: argparse.ArgumentParser) -> None:
    ap.add_argument("--model", default="qwen2.5-coder-1.5b")
    ap.add_argument("--tokens", type=argtypes.positive_int, default=64)
    ap.add_argument("--torch", action="store_true", help="also our engine on the torch backend")
    ap.add_argument("--child", choices=("llama-cpp-python", "llama.cpp", "torch"), default=None, help=argparse.SUPPRESS)


def run(args: argparse.Namespace) -> int:
    if args.child:
        child(args.child, args.model, args.tokens)
        return 0
    if args.torch:
        require_torch("draftscope bench memory --torch (the torch backend)")
    kinds = ["llama-cpp-python", "llama.cpp"] + (["torch"] if args.torch else [])
    results = {}
    for kind in kinds:
        done = subprocess.run(
            [
                sys.executable,
                "-m",
                "draftscope",
                "bench",
                "memory",
                "--child",
                kind,
                "--model",
                args.model,
                "--tokens",
                str(args.tokens),
            ],
            capture_output=True,
            text=True,
        )
        if done.returncode != 0:
            raise RuntimeError(f"{kind} failed:\n{done.stderr[-2000:]}")
        results[kind] = json.loads(done.stdout.strip().splitlines()[-1])
    base = results["llama-cpp-python"]["peak_mb"]
    print(f"{args.model}, {args.tokens} new tokens, one process each, {time.strftime('%Y-%m-%d')}")
    print("| process | peak resident memory | vs llama-cpp-python |")
    print("|---|---|---|")
    names = {
        "llama-cpp-python": "llama-cpp-python's Llama",
        "llama.cpp": "draftscope, llama.cpp backend",
        "torch": "draftscope, torch backend",
    }
    for kind in kinds:
        mb = results[kind]["peak_mb"]
        print(f"| {names[kind]} | {mb:,.0f} MiB | {mb / base:.2f}x |")
    return 0
