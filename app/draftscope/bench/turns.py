"""``draftscope bench turns``: a conversation about a document, turn after turn, through our server
and through llama-server on the same GGUF, as a chat client drives them: each turn resends the whole
conversation (the document, the questions, the server's own answers), streamed through the official
``openai`` client. Printed per turn and server: the prompt's tokens and how many came from the cache,
the time to first token and the decode rate after it.

Servers, each a process of its own started once for all repeats: ``ours`` (``draftscope serve
--drafters none``, or ``ours-drafting`` with the default drafters) and ``llama-server`` (llama.cpp's
own, its prompt cache on as it is by default; scripts/build_llama_tools.sh builds it). Servers
alternate conversation by conversation; each repeat starts a new conversation (a new first line), so
no turn finds the last repeat's cache. The figure that matters is a later turn's first token against
llama-server's: both should read only what is new.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time
from pathlib import Path

QUESTIONS = (
    "Summarise this text in three sentences.",
    "What does it say about warranties or liability?",
    "Can I use it in a commercial product? Quote the part that says so.",
    "Who holds the rights it talks about, and since when?",
)


def default_document() -> str:
    """CPython's licence (installed beside its standard library): a real text of ~2,000 words."""
    return str(Path(os.__file__).parent / "LICENSE.txt")


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--model", default="qwen2.5-coder-1.5b", help="catalogue name or .gguf (llama-server needs a GGUF)")
    p.add_argument(
        "--document",
        default=default_document(),
        help="the text the conversation is about (default: CPython's LICENSE.txt)",
    )
    p.add_argument("--words", type=int, default=1000, help="the document's first N words go in (default: %(default)s)")
    p.add_argument(
        "--turns",
        type=int,
        default=len(QUESTIONS),
        choices=range(1, len(QUESTIONS) + 1),
        metavar=f"1..{len(QUESTIONS)}",
    )
    p.add_argument("--max-new-tokens", type=int, default=48)
    p.add_argument("--repeats", type=int, default=2, help="conversations per server, alternated between servers")
    p.add_argument("--servers", default="ours,llama-server", help="which of ours, ours-drafting, llama-server")
    p.add_argument("--json", dest="json_out", default=None)


def stream_turn(client, model: str, messages: list[dict], max_tokens: int) -> dict:
    """One streamed answer: its text, first token time, decode rate after it, and the usage."""
    t0 = time.perf_counter()
    stream = client.chat.completions.create(
        model=model,
        messages=messages,
        max_tokens=max_tokens,
        temperature=0,
        stream=True,
        stream_options={"include_usage": True},
    )
    arrivals, text, usage = [], [], None
    for chunk in stream:
        if chunk.usage is not None:
            usage = chunk.usage
        if chunk.choices and chunk.choices[0].delta.content:
            text.append(chunk.choices[0].delta.content)
            arrivals.append(time.perf_counter())
    first = arrivals[0] - t0 if arrivals else float("nan")
    tokens = usage.completion_tokens if usage else len(arrivals)
    decode = (tokens - 1) / (arrivals[-1] - arrivals[0]) if len(arrivals) > 1 and arrivals[-1] > arrivals[0] else None
    details = getattr(usage, "prompt_tokens_details", None) if usage else None
    return {
        "text": "".join(text),
        "first_token_s": first,
        "tokens": tokens,
        "decode_tokens_per_s": decode,
        "prompt_tokens": usage.prompt_tokens if usage else None,
        "cached_tokens": getattr(details, "cached_tokens", None) if details else None,
    }


def conversation(client, model: str, document: str, opener: str, turns: int, max_tokens: int) -> list[dict]:
    """Every turn of one conversation; the server's own answers go back into it."""
    messages, rows = [], []
    for turn, question in enumerate(QUESTIONS[:turns], start=1):
        content = f"{opener}\n\n{document}\n\n{question}" if turn == 1 else question
        messages.append({"role": "user", "content": content})
        row = stream_turn(client, model, messages, max_tokens)
        messages.append({"role": "assistant", "content": row.pop("text")})
        rows.append({"turn": turn, **row})
    return rows


class Peers:
    """The servers asked for, started once: name -> (client, model name, stop)."""

    def __init__(self, names: list[str], model: str) -> None:
        import openai

        self.servers: dict[str, tuple] = {}
        try:
            for name in names:
                url, model_name, stop = self._start(name, model)
                self.servers[name] = (openai.OpenAI(base_url=url, api_key="unused", timeout=600), model_name, stop)
        except BaseException:
            self.close()
            raise

    @staticmethod
    def _start(name: str, model: str):
        if name in ("ours", "ours-drafting"):
            from draftscope.bench.serve_clients import OurServer

            server = OurServer(model, 1, drafting=name == "ours-drafting")
            return server.url, "default", server.stop
        if name == "llama-server":
            from draftscope.bench.llama_server import LlamaServer, find_llama_server
            from draftscope.engine.backends.llama.llamacpp import DEFAULT_CONTEXT, default_threads
            from draftscope.models.resolve import resolve_model

            binary, why = find_llama_server()
            if binary is None:
                raise FileNotFoundError(why)
            peer = LlamaServer(
                binary,
                name,
                Path(resolve_model(model).gguf_path),
                threads=default_threads(),
                context=DEFAULT_CONTEXT,
                max_new_tokens=0,
            )
            peer.start()
            return f"http://127.0.0.1:{peer.port}/v1", "model", peer.stop
        raise ValueError(f"unknown server {name!r} (ours, ours-drafting, llama-server)")

    def close(self) -> None:
        for _client, _model, stop in self.servers.values():
            stop()
        self.servers = {}


def summary(rows: list[dict], servers: list[str], turns: int) -> list[str]:
    """Per turn: each server's median first token and decode rate, and the first token against the last server's."""
    lines = [
        "| turn | server | prompt tokens | from cache | first token (s) | decode (tokens/s) |",
        "|---|---|---:|---:|---:|---:|",
    ]
    medians: dict[tuple[str, int], float] = {}
    for turn in range(1, turns + 1):
        for name in servers:
            mine = [r for r in rows if r["server"] == name and r["turn"] == turn]
            if not mine:
                continue
            first = statistics.median(r["first_token_s"] for r in mine)
            rates = [r["decode_tokens_per_s"] for r in mine if r["decode_tokens_per_s"]]
            medians[name, turn] = first
            cached = mine[-1]["cached_tokens"]
            lines.append(
                f"| {turn} | {name} | {mine[-1]['prompt_tokens']} | {'—' if cached is None else cached} | "
                f"{first:.2f} | {statistics.median(rates) if rates else float('nan'):.1f} |"
            )
    if "llama-server" in servers:
        for name in [s for s in servers if s != "llama-server"]:
            ratios = [
                f"turn {t}: {medians[name, t] / medians['llama-server', t]:.2f}x"
                for t in range(1, turns + 1)
                if (name, t) in medians and ("llama-server", t) in medians
            ]
            lines.append(f"{name}'s first token against llama-server's (medians): {', '.join(ratios)}")
    return lines


def run(args: argparse.Namespace) -> int:
    from draftscope.bench.spec import _cpu_name

    words = Path(args.document).read_text(encoding="utf-8", errors="replace").split()
    document = " ".join(words[: args.words])
    servers = [s for s in args.servers.split(",") if s]
    print(
        f"draftscope bench turns: {args.model}, {args.turns} turns about {Path(args.document).name} "
        f"({min(len(words), args.words)} words), {args.max_new_tokens} new tokens a turn, greedy; servers "
        f"{', '.join(servers)}; {_cpu_name()} ({os.cpu_count()} cores), {time.strftime('%Y-%m-%d')}",
        flush=True,
    )
    rows: list[dict] = []
    peers = Peers(servers, args.model)
    try:
        for repeat in range(args.repeats):
            for name in servers:  # alternated: drift on a busy machine hits every server alike
                client, model, _stop = peers.servers[name]
                opener = f"Conversation {repeat + 1}. Read this text, then answer my questions about it."
                for row in conversation(client, model, document, opener, args.turns, args.max_new_tokens):
                    row.update(server=name, repeat=repeat)
                    rows.append(row)
                    print(
                        f"  {name}, conversation {repeat + 1}, turn {row['turn']}: prompt {row['prompt_tokens']} "
                        f"tokens ({row['cached_tokens']} from cache), first token {row['first_token_s']:.2f} s, "
                        f"decode {row['decode_tokens_per_s'] or float('nan'):.1f} tokens/s",
                        flush=True,
                    )
    finally:
        peers.close()
    print("\n".join(summary(rows, servers, args.turns)))
    if args.json_out:
        Path(args.json_out).write_text(json.dumps(rows, indent=2))
    return 0
