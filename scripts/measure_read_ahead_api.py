"""Time to first token after "Send" through `draftscope serve`, with and without reading ahead
through the API (issue 61, item 2: a request with max_tokens 0 while the user types).

A document (the project's README, cut to --chars characters, with a number in front so that no two
trials share a cached prefix) and a question, streamed. Cold: the request alone. Warm: a max_tokens 0
request with the document and the first half of the question (what a client sends while its user
types), then the request. The two alternate, --reps times each; the figures are medians.

    python scripts/measure_read_ahead_api.py --model PATH.gguf [--chars 6000] [--reps 5]
"""

from __future__ import annotations

import argparse
import json
import socket
import statistics
import subprocess
import sys
import time
from pathlib import Path

import httpx2 as httpx

QUESTION = "In two sentences: what does the set-up script install, and how are the tests run?"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def first_token_seconds(url: str, messages: list[dict]) -> tuple[float, dict]:
    body = {"model": "m", "messages": messages, "max_tokens": 16, "temperature": 0, "stream": True}
    body["stream_options"] = {"include_usage": True}
    started, first, usage = time.perf_counter(), None, {}
    with httpx.stream("POST", url + "/v1/chat/completions", json=body, timeout=600) as reply:
        for line in reply.iter_lines():
            if not line.startswith("data: {"):
                continue
            chunk = json.loads(line[6:])
            if first is None and chunk["choices"] and chunk["choices"][0]["delta"].get("content"):
                first = time.perf_counter() - started
            usage = chunk.get("usage") or usage
    return first, usage


def read_ahead(url: str, messages: list[dict]) -> float:
    started = time.perf_counter()
    reply = httpx.post(
        url + "/v1/chat/completions", json={"model": "m", "messages": messages, "max_tokens": 0}, timeout=600
    )
    reply.raise_for_status()
    return time.perf_counter() - started


def conversation(doc: str, n: int, question: str) -> list[dict]:
    return [{"role": "user", "content": f"Document {n}:\n{doc}\n\n{question}"}]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", required=True)
    ap.add_argument("--chars", type=int, default=6000)
    ap.add_argument("--reps", type=int, default=5)
    args = ap.parse_args()
    doc = (Path(__file__).resolve().parents[1] / "README.md").read_text()[: args.chars]
    port = free_port()
    server = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "draftscope",
            "serve",
            "--model",
            args.model,
            "--port",
            str(port),
            "--drafters",
            "context",
        ]
    )
    url = f"http://127.0.0.1:{port}"
    try:
        for _ in range(600):
            try:
                if httpx.get(url + "/v1/models", timeout=2).status_code == 200:
                    break
            except httpx.HTTPError:
                time.sleep(1)
        cold, warm, ahead, prompt = [], [], [], 0
        for n in range(args.reps):
            seconds, usage = first_token_seconds(url, conversation(doc, 2 * n, QUESTION))
            cold.append(seconds)
            prompt = usage.get("prompt_tokens", prompt)
            ahead.append(read_ahead(url, conversation(doc, 2 * n + 1, QUESTION[: len(QUESTION) // 2])))
            seconds, usage = first_token_seconds(url, conversation(doc, 2 * n + 1, QUESTION))
            warm.append(seconds)
        print(f"prompt {prompt} tokens, {args.reps} trials each, alternated")
        print(f"cold: first token after Send {statistics.median(cold):.3f} s (median; {min(cold):.3f}-{max(cold):.3f})")
        print(f"warm: first token after Send {statistics.median(warm):.3f} s (median; {min(warm):.3f}-{max(warm):.3f})")
        print(f"read ahead while typing (max_tokens 0): {statistics.median(ahead):.3f} s (median)")
        print(f"ratio warm/cold: {statistics.median(warm) / statistics.median(cold):.2f}")
    finally:
        server.terminate()
        server.wait(30)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
