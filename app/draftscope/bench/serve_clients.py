"""``draftscope bench serve``: concurrent clients against one server, through the official
``openai`` client, streaming. For each number of clients (``--clients 1,2,4,8``) every client
asks ``--requests`` Spec-Bench questions one after another; printed per server and client count:
aggregate tokens/s (all answers' tokens over the round's wall time; and while every client's answer
decodes, what the batch curve's bound compares with), first-token latency (median
and worst) and per-token latency (p50 / p95 of the gaps between streamed tokens; a chunk of several
drafted tokens counts its gap once per token).

Servers, each a process of its own: ``ours`` (``draftscope serve --parallel N``, N the largest
client count unless given: answers share forwards on llama.cpp) with drafting on (the app's
default drafters) and off, and ``llama-server`` (llama.cpp's own server, ``-np`` the same, prompt cache off) where one is
found (bench/llama_server.py). ``--rpc host:port`` splits the model over llama.cpp RPC workers.
"""

from __future__ import annotations

import argparse
import json
import statistics
import threading
import time
from pathlib import Path

from draftscope.core import argtypes
from draftscope.rules import BACKENDS


def add_arguments(p: argparse.ArgumentParser) -> None:
    from draftscope.bench.spec import DEFAULT_QUESTIONS

    p.add_argument("--model", default="qwen2.5-coder-1.5b")
    p.add_argument("--questions", default=str(DEFAULT_QUESTIONS))
    p.add_argument("--clients", default="1,2,4,8", help="comma-separated client counts")
    p.add_argument("--requests", type=argtypes.positive_int, default=2, help="questions each client asks in turn")
    p.add_argument("--max-new-tokens", type=argtypes.positive_int, default=64)
    p.add_argument(
        "--servers",
        default="ours-drafting,ours-plain,llama-server",
        help="which of ours-drafting, ours-plain, llama-server",
    )
    p.add_argument(
        "--parallel", type=argtypes.parallel, default=None, help="answers at once (default: the largest client count)"
    )
    p.add_argument("--rpc", default=None, help="llama.cpp RPC workers for our server (host:port,...)")
    p.add_argument(
        "--backend",
        choices=BACKENDS,
        default="auto",
        help="what runs the model in our server (auto: llama.cpp for a GGUF on the CPU)",
    )
    p.add_argument(
        "--poisson",
        type=float,
        default=None,
        metavar="SECONDS",
        help="clients arrive at random times instead of all at once: a Poisson schedule (seeded) with "
        "this mean gap between arrivals",
    )
    p.add_argument("--json", dest="json_out", default=None)


def questions(path: str, count: int) -> list[str]:
    out = []
    for line in Path(path).read_text().splitlines():
        if line.strip():
            out.append(json.loads(line)["turns"][0])
    if not out:
        raise ValueError(f"no questions in {path}")
    return [out[i % len(out)] for i in range(count)]


def one_answer(client, model: str, question: str, max_tokens: int, extra: dict | None = None) -> dict:
    t0 = time.perf_counter()
    stream = client.chat.completions.create(
        model=model,
        messages=[{"role": "user", "content": question}],
        max_tokens=max_tokens,
        temperature=0,
        stream=True,
        extra_body=extra,
    )
    steps, texts = [], []  # (time, tokens in the chunk)
    shared = None  # ours: (steps, answers per forward) from the last chunk's stats
    for chunk in stream:
        extension = (chunk.model_extra or {}).get("draftscope") or {}
        stats = extension.get("stats") or {}
        if stats.get("answers_per_forward") is not None:
            shared = (stats["steps"], stats["answers_per_forward"])
        step = extension.get("tokens")
        if isinstance(step, list) and step:  # ours: a step's tokens (several when drafts were accepted)
            steps.append((time.perf_counter(), len(step)))
        elif chunk.choices and chunk.choices[0].delta.content:
            texts.append((time.perf_counter(), 1))  # llama-server: a token a chunk
    end = time.perf_counter()
    arrivals = steps or texts  # ours also sends text held back for stop sequences, in chunks of no step
    gaps = []
    for (a, _), (b, n) in zip(arrivals, arrivals[1:]):
        gaps += [(b - a) / n] * n
    tokens = sum(n for _, n in arrivals)
    return {
        "first_token_s": arrivals[0][0] - t0 if arrivals else end - t0,
        "gaps": gaps,
        "tokens": tokens,
        "seconds": end - t0,
        "shared": shared,
        "arrivals": arrivals,
    }


def all_decoding_rate(answers: list[list[tuple[float, int]]], clients: int) -> float | None:
    """Tokens/s while ``clients`` answers were all decoding (each between its first and its last
    token's arrival; ``answers``: each answer's (time, tokens) arrivals): the figure a batch curve
    bounds, without the prompts read and the ramps where fewer answers run. None if they never did."""
    edges = sorted([(a[0][0], 1) for a in answers if a] + [(a[-1][0], -1) for a in answers if a])
    spans, active, since = [], 0, None
    for at, change in edges:
        if active == clients and since is not None and at > since:
            spans.append((since, at))
        active += change
        since = at
    seconds = sum(b - a for a, b in spans)
    if seconds <= 0:
        return None
    # a step's arrival carries the tokens made since the step before: counted where it lands, the
    # first arrivals of each span (work done before the span) excluded
    tokens = sum(n for a in answers for at, n in a[1:] if any(lo < at <= hi for lo, hi in spans))
    return tokens / seconds


def arrival_times(clients: int, mean_gap_s: float | None, seed: int = 0) -> list[float]:
    """When each client starts, in seconds from the round's start: all at once, or a Poisson
    schedule (exponential gaps of mean ``mean_gap_s``, seeded, the first client at 0)."""
    if not mean_gap_s:
        return [0.0] * clients
    import random

    rng, at, out = random.Random(seed), 0.0, []
    for _ in range(clients):
        out.append(at)
        at += rng.expovariate(1.0 / mean_gap_s)
    return out


def run_round(
    url: str,
    model: str,
    clients: int,
    asks: list[list[str]],
    max_tokens: int,
    extra: dict | None = None,
    start_at: list[float] | None = None,
) -> dict:
    import openai

    results: list[dict] = []
    errors: list[str] = []
    lock = threading.Lock()

    def client_loop(mine: list[str], delay: float) -> None:
        time.sleep(delay)
        client = openai.OpenAI(base_url=url, api_key="bench", max_retries=0, timeout=3600)
        for q in mine:
            try:
                r = one_answer(client, model, q, max_tokens, extra)
            except openai.OpenAIError as exc:  # counted and said, the round goes on
                with lock:
                    errors.append(str(exc))
                continue
            with lock:
                results.append(r)

    start_at = start_at or [0.0] * clients
    threads = [threading.Thread(target=client_loop, args=(asks[c], start_at[c])) for c in range(clients)]
    t0 = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    wall = time.perf_counter() - t0
    gaps = sorted(g for r in results for g in r["gaps"])
    firsts = sorted(r["first_token_s"] for r in results)

    def pct(xs, q):
        return xs[min(len(xs) - 1, int(q * len(xs)))] if xs else float("nan")

    if not results:
        raise RuntimeError(f"every request failed: {errors[0] if errors else 'no answers'}")
    shared = [r["shared"] for r in results if r["shared"]]
    steps = sum(s for s, _ in shared)
    return {
        "clients": clients,
        "errors": errors,
        "tokens": sum(r["tokens"] for r in results),
        "wall_s": wall,
        # over every step of every answer: how many answers its forward held (ours only)
        "answers_per_forward": sum(s * a for s, a in shared) / steps if steps else None,
        "tokens_per_s": sum(r["tokens"] for r in results) / wall,
        "all_decoding_tokens_per_s": all_decoding_rate([r["arrivals"] for r in results], clients),
        "first_token_median_s": statistics.median(firsts),
        "first_token_max_s": firsts[-1],
        "token_p50_ms": pct(gaps, 0.5) * 1000,
        "token_p95_ms": pct(gaps, 0.95) * 1000,
    }


def _free_port() -> int:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _serve_command(
    model: str, port: int, parallel: int, *, drafting: bool, workers: str | None, backend: str, extra=()
) -> list[str]:
    """``draftscope serve`` as the bench runs it: no history, a queue that holds every client."""
    import sys

    command = [sys.executable, "-m", "draftscope", "serve", "--model", model, "--port", str(port)]
    command += ["--parallel", str(parallel), "--queue-limit", "64", "--no-history"]
    command += ["--drafters", "auto" if drafting else "none"]
    if workers:
        command += ["--rpc", workers]
    if backend != "auto":
        command += ["--backend", backend]
    return [*command, *extra]


class OurServer:
    """``draftscope serve`` in a process of its own, as a user runs it (the clients here must not
    share its interpreter: they would take turns with its answers for the GIL)."""

    def __init__(
        self,
        model: str,
        parallel: int,
        *,
        drafting: bool,
        workers: str | None = None,
        backend: str = "auto",
        timeout: float = 600.0,
        env: dict[str, str] | None = None,
        extra: tuple[str, ...] = (),
    ) -> None:
        """``env``: variables added to the server's (its own data and settings folders, say); ``extra``:
        more of its options."""
        import os
        import subprocess
        import tempfile

        port = _free_port()
        command = _serve_command(
            model, port, parallel, drafting=drafting, workers=workers, backend=backend, extra=extra
        )
        self.log = tempfile.TemporaryFile(mode="w+")  # a pipe nobody reads could fill and stall the server
        environ = {**os.environ, **(env or {})}
        self.proc = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=self.log, text=True, env=environ)
        self.url = f"http://127.0.0.1:{port}/v1"
        self._wait_until_up(timeout)
        self.banner = (
            f"draftscope serve --parallel {parallel} --drafters {'auto' if drafting else 'none'}"
            f"{f' --backend {backend}' if backend != 'auto' else ''}"
        )

    def _wait_until_up(self, timeout: float) -> None:
        """Until the server lists its models; an error with its log if it exits, or if it never answers."""
        import urllib.request

        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                self.log.seek(0)
                raise RuntimeError(f"draftscope serve exited: {self.log.read()[-2000:]}")
            try:
                with urllib.request.urlopen(self.url + "/models", timeout=2) as r:
                    if r.status == 200:
                        return
            except OSError:
                time.sleep(0.3)
        self.stop()
        raise RuntimeError("draftscope serve did not come up")

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            self.proc.wait(30)


def run(args: argparse.Namespace) -> int:
    counts = [int(c) for c in args.clients.split(",") if c.strip()]
    parallel = args.parallel or max(counts)
    servers = [s for s in args.servers.split(",") if s]
    rounds = Rounds(args, counts, questions(args.questions, max(counts) * args.requests))
    for name in [s for s in servers if s.startswith("ours")]:
        server = OurServer(
            args.model, parallel, drafting=name == "ours-drafting", workers=args.rpc, backend=args.backend
        )
        try:
            print(f"{name}: {server.banner}", flush=True)
            rounds.measure(name, server.url, "default")
        finally:
            server.stop()
    if "llama-server" in servers:
        _measure_llama_server(args, parallel, rounds)
    print(format_table(rounds.rows))
    if any(r["server"].startswith("ours") for r in rounds.rows):
        # measured after the servers stopped: the cores are free
        _print_bound(args, max(counts), rounds.rows)
    if args.json_out:
        Path(args.json_out).write_text(json.dumps(rounds.rows, indent=2))
    return 0


class Rounds:
    """A round per client count against one server after another, every client asking its share of
    the questions; each round's figures kept (``rows``) and said as it ends."""

    def __init__(self, args: argparse.Namespace, counts: list[int], asked: list[str]) -> None:
        self.args, self.counts, self.asked = args, counts, asked
        self.rows: list[dict] = []

    def measure(self, name: str, url: str, model: str, extra: dict | None = None) -> None:
        requests = self.args.requests
        for c in self.counts:
            asks = [self.asked[k * requests : (k + 1) * requests] for k in range(c)]
            r = run_round(url, model, c, asks, self.args.max_new_tokens, extra, arrival_times(c, self.args.poisson))
            r["server"] = name
            self.rows.append(r)
            print(_round_line(name, c, r), flush=True)


def _round_line(name: str, clients: int, r: dict) -> str:
    return (
        f"{name}, {clients} client(s): {r['tokens_per_s']:.1f} tokens/s aggregate, first token "
        f"{r['first_token_median_s']:.2f} s median / {r['first_token_max_s']:.2f} s worst, per token "
        f"p50 {r['token_p50_ms']:.0f} ms / p95 {r['token_p95_ms']:.0f} ms"
        + (f"; {r['answers_per_forward']:.2f} answers a forward" if r["answers_per_forward"] else "")
        + (
            f"; {r['all_decoding_tokens_per_s']:.1f} tokens/s while all {clients} decode"
            if clients > 1 and r["all_decoding_tokens_per_s"]
            else ""
        )
        + (f"; {len(r['errors'])} request(s) failed: {r['errors'][0]}" if r["errors"] else "")
    )


def _measure_llama_server(args: argparse.Namespace, parallel: int, rounds: Rounds) -> None:
    """llama.cpp's own server with as many slots, where one is found."""
    from draftscope.bench.llama_server import LlamaServer, find_llama_server
    from draftscope.engine.backends.llama.llamacpp import DEFAULT_CONTEXT, default_threads
    from draftscope.models.resolve import resolve_model

    binary, why = find_llama_server()
    if binary is None:
        print(f"llama-server skipped: {why}")
        return
    source = resolve_model(args.model)
    peer = LlamaServer(
        binary,
        "llama-server",
        Path(source.gguf_path),
        threads=default_threads(),
        context=DEFAULT_CONTEXT,
        max_new_tokens=args.max_new_tokens,
        parallel=parallel,
    )
    peer.start()
    try:
        # no prompt cache: every round asks the same questions again
        rounds.measure(
            f"llama-server -np {parallel}", f"http://127.0.0.1:{peer.port}/v1", "model", {"cache_prompt": False}
        )
    finally:
        peer.stop()


def _print_bound(args: argparse.Namespace, most: int, rows: list[dict]) -> None:
    """The batch curve's bound for ``most`` answers at once, added to every row and compared with
    our server's rounds at that many clients."""
    bound = batch_bound(args.model, args.backend, most)
    for r in rows:
        r["bound_tokens_per_s"] = bound
    print(
        f"the batch curve's bound for {most} tokens a forward (one each of {most} answers, "
        f"a {most}-token forward as measured at load): {bound:.1f} tokens/s; "
        + ", ".join(
            f"{r['server']} with {r['clients']} clients {r['tokens_per_s'] / bound:.2f}x of it "
            f"(aggregate), {_share(r.get('all_decoding_tokens_per_s'), bound)} (while all decode)"
            for r in rows
            if r["clients"] == most and r["server"].startswith("ours")
        )
    )


def batch_bound(model: str, backend: str, answers: int) -> float:
    """Tokens/s that ``answers`` answers stepping together can reach at most on this machine: one
    token each per forward, a forward costing what the load-time measurement gives for that many
    tokens (engine.budget.measure_verify_costs: a root and a chain of answers - 1)."""
    from draftscope.engine.engine import Engine

    engine = Engine.load(model, backend=backend, measure=False)
    try:
        from draftscope.engine.budget import measure_verify_costs

        costs = measure_verify_costs(engine.backend, sizes=(0, answers - 1))
    finally:
        engine.backend.close()
    return answers / costs[answers - 1]


def _share(rate: float | None, bound: float) -> str:
    return "—" if rate is None else f"{rate:.1f} tokens/s, {rate / bound:.2f}x of it"


def format_table(rows: list[dict]) -> str:
    lines = [
        "| server | clients | tokens/s (aggregate) | vs 1 client | first token median / worst | per token p50 / p95 "
        "| answers a forward |",
        "|---|---:|---:|---:|---|---|---:|",
    ]
    single = {r["server"]: r["tokens_per_s"] for r in rows if r["clients"] == 1}
    for r in rows:
        base = single.get(r["server"])
        lines.append(
            f"| {r['server']} | {r['clients']} | {r['tokens_per_s']:.1f} | "
            f"{r['tokens_per_s'] / base:.2f}x | {r['first_token_median_s']:.2f} s / {r['first_token_max_s']:.2f} s | "
            f"{r['token_p50_ms']:.0f} / {r['token_p95_ms']:.0f} ms | "
            f"{'—' if r.get('answers_per_forward') is None else format(r['answers_per_forward'], '.2f')} |"
            if base
            else ""
        )
    return "\n".join(line for line in lines if line)
