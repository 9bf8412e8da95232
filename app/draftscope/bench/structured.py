"""``draftscope bench structured``: answers held to a JSON schema, and required tool calls, ours against
llama-server on the same GGUF and threads, greedy, streamed through the official ``openai`` client.

The prompts ship (bench/structured_prompts.jsonl, written from texts that ship with Python by
bench/structured_prompts.py): JSON extraction tasks, each with its schema sent as ``response_format``
in OpenAI's nested shape (the one llama-server honours), and tool calls (``tools``, ``tool_choice``
"required"; llama-server runs with ``--jinja``). A server that refuses ``tools`` has its tool rows said
"skipped: tools refused", never answered some other way.

Per prompt and server: the first token's wait, the writing rate (the tokens after the first arrival over
the time after it), the completion tokens, whether the answer is valid (JSON its schema accepts; calls
to offered tools with valid arguments: bench/structured_check.py names its judge) and, on ours, the
tokens each drafter's drafts gave, the grammar's forced tokens among them (the stats' ``accepted_by_source``).
The summary: our writing rate over theirs (median and geometric mean of the per-prompt ratios of medians),
first token likewise, validity on each server, the forced share. Servers alternate prompt by prompt
(each repeat starting with the other), every prompt ``--repeat`` times; neither server keeps a prompt's
cache for the next (``cache_prompt`` false)."""

from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import time
from collections import Counter
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, NamedTuple

from draftscope.bench import structured_check, structured_prompts
from draftscope.core import argtypes
from draftscope.rules import BACKENDS

SERVERS = ("ours", "llama-server")


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--model", default="qwen2.5-coder-1.5b", help="catalogue name or .gguf (llama-server needs a GGUF)")
    p.add_argument("--prompts", default=str(structured_prompts.PROMPTS), help="a JSON-lines file of prompts")
    p.add_argument("--only", default=None, help="comma-separated prompt ids, or a kind (extract, tool)")
    p.add_argument("--max-tokens", type=argtypes.positive_int, default=1024, help="an answer's limit")
    p.add_argument("--repeat", type=argtypes.positive_int, default=2, help="times each prompt is asked of each server")
    p.add_argument("--servers", default=",".join(SERVERS), help=f"which of {', '.join(SERVERS)}")
    p.add_argument("--threads", type=argtypes.positive_int, default=None, help="both servers' (default: llama.cpp's)")
    p.add_argument("--backend", choices=BACKENDS, default="auto", help="what runs the model in our server")
    p.add_argument("--json", dest="json_out", default=None, help="write the report here")


class Target(NamedTuple):
    """A server as the bench asks it: its name in the report, an ``openai`` client, the model name it answers to."""

    name: str
    client: Any
    model: str


def request_of(prompt: dict, max_tokens: int) -> dict:
    """The chat request a prompt makes: greedy, streamed, usage at the end, no prompt cache kept."""
    request: dict[str, Any] = {
        "messages": prompt["messages"],
        "max_tokens": max_tokens,
        "temperature": 0,
        "stream": True,
        "stream_options": {"include_usage": True},
        "extra_body": {"cache_prompt": False},
    }
    if prompt["kind"] == "tool":
        # each prompt needs one call: small models greedy call on and on where several are allowed
        request.update(
            tools=prompt["tools"], tool_choice=prompt.get("tool_choice", "required"), parallel_tool_calls=False
        )
    else:
        shape = {"name": prompt["id"].replace(".", "_")[:64], "schema": prompt["schema"], "strict": True}
        request["response_format"] = {"type": "json_schema", "json_schema": shape}
    return request


class Heard:
    """What one streamed answer said, and when: (time, tokens) arrivals (ours: a step's tokens, from its
    ``draftscope`` extension; otherwise a chunk with text or a call's piece, a token), the text, the
    tool calls, the usage, our closing statistics."""

    def __init__(self, t0: float) -> None:
        self.t0 = t0
        self.arrivals: list[tuple[float, int]] = []
        self.text: list[str] = []
        self.calls: dict[int, dict] = {}
        self.usage: Any = None
        self.stats: dict = {}
        self.finish: str | None = None

    def hear(self, chunk: Any) -> None:
        now = time.perf_counter()
        extension = (chunk.model_extra or {}).get("draftscope") or {}
        self.stats = extension.get("stats") or self.stats
        if chunk.usage is not None:
            self.usage = chunk.usage
        said = False
        for choice in chunk.choices or []:
            self.finish = choice.finish_reason or self.finish
            delta = choice.delta
            if delta.content:
                self.text.append(delta.content)
                said = True
            for piece in delta.tool_calls or []:
                call = self.calls.setdefault(piece.index, {"name": "", "arguments": ""})
                if piece.function is not None:
                    call["name"] += piece.function.name or ""
                    call["arguments"] += piece.function.arguments or ""
                said = True
        step = extension.get("tokens")
        if isinstance(step, list) and step:
            self.arrivals.append((now, len(step)))
        elif said and not extension:  # llama-server: a token a chunk
            self.arrivals.append((now, 1))

    def figures(self) -> dict:
        tokens = self.usage.completion_tokens if self.usage is not None else sum(n for _, n in self.arrivals)
        first = self.arrivals[0] if self.arrivals else None
        span = self.arrivals[-1][0] - first[0] if first else 0.0
        after = tokens - first[1] if first else 0
        return {
            "first_token_s": None if first is None else first[0] - self.t0,
            "answer_s": self.arrivals[-1][0] - self.t0 if first else None,  # the whole answer's wait
            "writing_tokens_per_s": after / span if span > 0 and after > 0 else None,
            "completion_tokens": tokens,
            "finish_reason": self.finish,
        }


def ask(target: Target, prompt: dict, max_tokens: int) -> dict:
    """One answer to one prompt: its figures, its verdict, and on ours the drafts' share."""
    import openai

    heard = Heard(time.perf_counter())
    try:
        for chunk in target.client.chat.completions.create(model=target.model, **request_of(prompt, max_tokens)):
            heard.hear(chunk)
    except openai.BadRequestError as exc:
        param = ((exc.body or {}) if isinstance(exc.body, dict) else {}).get("param")
        refused = prompt["kind"] == "tool" and param in ("tools", "tool_choice")
        return {"status": "skipped: tools refused" if refused else f"error: {exc.message}"}
    except openai.OpenAIError as exc:
        return {"status": f"error: {exc}"}
    text = "".join(heard.text)
    calls = [heard.calls[i] for i in sorted(heard.calls)]
    if prompt["kind"] == "tool":
        verdict = structured_check.check_tool_calls(calls, prompt["tools"])
    else:
        verdict = structured_check.check_json(text, prompt["schema"])
    row = {"status": "ok", **heard.figures(), "valid": verdict.valid, "why_invalid": verdict.why}
    row.update(answer=text, tool_calls=calls)
    if heard.stats:
        drafted = dict(heard.stats.get("accepted_by_source") or {})
        row["accepted_by_source"] = drafted
        row["grammar_tokens"] = drafted.get("grammar", 0)
    return row


def order(targets: Sequence[Target], prompt_index: int, repeat: int) -> list[Target]:
    """Who answers a prompt first: the servers alternate prompt by prompt, each repeat the other way."""
    return list(targets) if (prompt_index + repeat) % 2 == 0 else list(reversed(targets))


def measure(
    targets: Sequence[Target],
    prompts: Sequence[dict],
    *,
    repeat: int,
    max_tokens: int,
    say: Callable[[str], None] = print,
) -> list[dict]:
    """Every prompt asked of every server ``repeat`` times, servers alternated; a row each."""
    rows = []
    for r in range(repeat):
        for i, prompt in enumerate(prompts):
            for target in order(targets, i, r):
                row = {"prompt": prompt["id"], "kind": prompt["kind"], "server": target.name, "repeat": r}
                row.update(ask(target, prompt, max_tokens))
                rows.append(row)
                say(row_line(row))
    return rows


def row_line(row: dict) -> str:
    head = f"  {row['prompt']}, {row['server']}, repeat {row['repeat'] + 1}: "
    if row["status"] != "ok":
        return head + row["status"]
    rate = row["writing_tokens_per_s"]
    forced = f", {row['grammar_tokens']} forced by the grammar" if "grammar_tokens" in row else ""
    verdict = "valid" if row["valid"] else f"INVALID ({row['why_invalid'][:120]})"
    return (
        head + f"first token {_num(row['first_token_s'], 's')}, {_num(rate, 'tokens/s')}, "
        f"{row['completion_tokens']} tokens{forced}, {verdict}"
        + (", cut at max tokens" if row["finish_reason"] == "length" else "")
    )


def _num(value: float | None, unit: str) -> str:
    return "—" if value is None else f"{value:.2f} {unit}"


def _median(values: Sequence[float | None]) -> float | None:
    known = [v for v in values if v is not None]
    return statistics.median(known) if known else None


def per_prompt(rows: Sequence[dict]) -> list[dict]:
    """Each prompt and server: medians over the repeats, valid answers out of those measured."""
    table = []
    for prompt in dict.fromkeys(r["prompt"] for r in rows):
        for server in dict.fromkeys(r["server"] for r in rows):
            mine = [r for r in rows if (r["prompt"], r["server"]) == (prompt, server)]
            ok = [r for r in mine if r["status"] == "ok"]
            if not mine:
                continue
            entry = {"prompt": prompt, "kind": mine[0]["kind"], "server": server, "measured": len(ok)}
            if not ok:
                table.append({**entry, "status": mine[0]["status"]})
                continue
            tokens = sum(r["completion_tokens"] for r in ok)
            forced = sum(r["grammar_tokens"] for r in ok) if "grammar_tokens" in ok[0] else None
            entry.update(
                status="ok",
                first_token_s=_median([r["first_token_s"] for r in ok]),
                writing_tokens_per_s=_median([r["writing_tokens_per_s"] for r in ok]),
                completion_tokens=_median([r["completion_tokens"] for r in ok]),
                valid=sum(r["valid"] for r in ok),
                forced_share=forced / tokens if forced is not None and tokens else None,
            )
            table.append(entry)
    return table


def _ratios(table: Sequence[dict], field: str, kind: str) -> list[float]:
    """Ours over llama-server's, prompt by prompt, where both have the figure."""
    by = {(e["prompt"], e["server"]): e.get(field) for e in table if e["kind"] == kind}
    return [
        by[p, "ours"] / by[p, "llama-server"]
        for p, s in by
        if s == "ours" and by[p, "ours"] and by.get((p, "llama-server"))
    ]


def _spread(ratios: Sequence[float]) -> dict:
    if not ratios:
        return {"prompts": 0, "median": None, "geometric_mean": None}
    geometric = math.exp(sum(math.log(x) for x in ratios) / len(ratios))
    return {"prompts": len(ratios), "median": statistics.median(ratios), "geometric_mean": geometric}


def summarise(rows: Sequence[dict]) -> dict:
    """Per kind: the ratios of ours over llama-server, each server's validity, our forced share and drafts."""
    table = per_prompt(rows)
    out: dict[str, Any] = {}
    for kind in dict.fromkeys(r["kind"] for r in rows):
        mine = [r for r in rows if r["kind"] == kind]
        servers: dict[str, Any] = {}
        for server in dict.fromkeys(r["server"] for r in mine):
            ok = [r for r in mine if r["server"] == server and r["status"] == "ok"]
            skipped = [r for r in mine if r["server"] == server and r["status"] != "ok"]
            tokens = sum(r["completion_tokens"] for r in ok)
            drafted = Counter[str]()
            for r in ok:
                drafted.update(r.get("accepted_by_source") or {})
            ours = any("grammar_tokens" in r for r in ok)  # a server that says what its drafts gave
            servers[server] = {
                "answers": len(ok),
                "not_answered": len(skipped),
                "why_not": sorted({r["status"] for r in skipped}),
                "valid_percent": 100.0 * sum(r["valid"] for r in ok) / len(ok) if ok else None,
                "tokens": tokens,
                "accepted_by_source": dict(drafted) if ours else None,
                "forced_share": drafted["grammar"] / tokens if ours and tokens else None,
            }
        out[kind] = {
            "servers": servers,
            "writing_rate_ours_over_theirs": _spread(_ratios(table, "writing_tokens_per_s", kind)),
            "first_token_ours_over_theirs": _spread(_ratios(table, "first_token_s", kind)),
        }
    return out


def table_lines(table: Sequence[dict]) -> list[str]:
    lines = [
        "| prompt | server | first token (s) | writing rate (tokens/s) | tokens | valid | forced by the grammar |",
        "|---|---|---:|---:|---:|---:|---:|",
    ]
    for e in table:
        if e["status"] != "ok":
            lines.append(f"| {e['prompt']} | {e['server']} | {e['status']} | | | | |")
            continue
        forced = "" if e["forced_share"] is None else f"{100 * e['forced_share']:.0f}%"
        lines.append(
            f"| {e['prompt']} | {e['server']} | {_num(e['first_token_s'], '')} | "
            f"{_num(e['writing_tokens_per_s'], '')} | {e['completion_tokens']:.0f} | {e['valid']}/{e['measured']} | "
            f"{forced} |"
        )
    return lines


def summary_lines(summary: dict) -> list[str]:
    lines = []
    for kind, part in summary.items():
        what = "JSON answers" if kind == "extract" else "tool calls"
        for server, s in part["servers"].items():
            valid = "—" if s["valid_percent"] is None else f"{s['valid_percent']:.0f}%"
            skipped = f"; {s['not_answered']} not answered ({', '.join(s['why_not'])})" if s["not_answered"] else ""
            lines.append(f"{what}, {server}: {s['answers']} answers, {valid} valid{skipped}")
            if s["forced_share"] is not None:
                drafts = ", ".join(f"{k} {v}" for k, v in sorted(s["accepted_by_source"].items())) or "none"
                lines.append(
                    f"  of its {s['tokens']} tokens {100 * s['forced_share']:.1f}% were forced by the grammar; "
                    f"drafted tokens accepted, by source: {drafts}"
                )
        for field, label in (("writing_rate_ours_over_theirs", "writing rate"), ("first_token_ours_over_theirs",
                                                                                 "first token's wait")):  # fmt: skip
            r = part[field]
            if r["prompts"]:
                lines.append(
                    f"{what}: our {label} over llama-server's, {r['prompts']} prompts: median {r['median']:.2f}x, "
                    f"geometric mean {r['geometric_mean']:.2f}x"
                )
    return lines


def pick(prompts: list[dict], only: str | None) -> list[dict]:
    """``--only``: a kind, or prompt ids (an unknown one is an error naming it)."""
    if not only:
        return prompts
    if only in structured_prompts.KINDS:
        return [p for p in prompts if p["kind"] == only]
    wanted = [w for w in only.split(",") if w]
    known = {p["id"]: p for p in prompts}
    missing = [w for w in wanted if w not in known]
    if missing:
        raise SystemExit(f"draftscope bench structured: no prompt {', '.join(missing)} (--only)")
    return [known[w] for w in wanted]


class Servers:
    """The servers asked for, each a process of its own, started once for every prompt and repeat."""

    def __init__(self, names: Sequence[str], args: argparse.Namespace, threads: int) -> None:
        import openai

        self.targets: list[Target] = []
        self.banners: list[str] = []
        self._stops: list[Callable[[], None]] = []
        try:
            for name in names:
                url, model = self._start(name, args, threads)
                self.targets.append(Target(name, openai.OpenAI(base_url=url, api_key="bench", timeout=1800), model))
        except BaseException:
            self.close()
            raise

    def _start(self, name: str, args: argparse.Namespace, threads: int) -> tuple[str, str]:
        if name == "ours":
            from draftscope.bench.serve_clients import OurServer

            server = OurServer(args.model, 1, drafting=True, backend=args.backend, extra=("--threads", str(threads)))
            self._stops.append(server.stop)
            self.banners.append(f"ours: {server.banner} --threads {threads}")
            return server.url, "default"
        from draftscope.bench.llama_server import LlamaServer, find_llama_server
        from draftscope.engine.backends.llama.llamacpp import DEFAULT_CONTEXT
        from draftscope.models.resolve import resolve_model

        binary, why = find_llama_server()
        if binary is None:
            raise FileNotFoundError(why)
        peer = LlamaServer(binary, name, Path(resolve_model(args.model).gguf_path), threads=threads,
                           context=DEFAULT_CONTEXT, max_new_tokens=0, extra=("--jinja",))  # fmt: skip
        peer.start()
        self._stops.append(peer.stop)
        self.banners.append(f"llama-server: {binary} -t {threads} -c {DEFAULT_CONTEXT} --jinja")
        return f"http://127.0.0.1:{peer.port}/v1", "model"

    def close(self) -> None:
        for stop in self._stops:
            stop()
        self._stops = []


def header(args: argparse.Namespace, prompts: Sequence[dict], threads: int, banners: Sequence[str]) -> dict:
    from draftscope.bench.spec import _cpu_name

    return {
        "model": args.model,
        "machine": f"{_cpu_name()} ({os.cpu_count()} cores)",
        "backend": args.backend if args.backend != "auto" else "auto (llama.cpp for a GGUF on the CPU)",
        "threads": threads,
        "prompts": len(prompts),
        "repeat": args.repeat,
        "max_tokens": args.max_tokens,
        "judge": structured_check.JUDGE,
        "servers": list(banners),
        "date": time.strftime("%Y-%m-%d"),
    }


def run(args: argparse.Namespace) -> int:
    from draftscope.engine.backends.llama.llama_thread import default_threads

    names = [s for s in args.servers.split(",") if s]
    unknown = [s for s in names if s not in SERVERS]
    if unknown or not names:
        raise SystemExit(f"draftscope bench structured: unknown server(s) {', '.join(unknown)} ({', '.join(SERVERS)})")
    prompts = pick(structured_prompts.load(args.prompts), args.only)
    threads = args.threads or default_threads()
    servers = Servers(names, args, threads)
    try:
        head = header(args, prompts, threads, servers.banners)
        print(
            f"draftscope bench structured: {head['model']}, backend {head['backend']}, {threads} threads, "
            f"{len(prompts)} prompts x {args.repeat}, greedy, at most {args.max_tokens} tokens; {head['machine']}, "
            f"{head['date']}; validity judged by {head['judge']}",
            flush=True,
        )
        for banner in servers.banners:
            print(f"  {banner}", flush=True)
        rows = measure(servers.targets, prompts, repeat=args.repeat, max_tokens=args.max_tokens)
    finally:
        servers.close()
    summary = summarise(rows)
    print("\n".join(table_lines(per_prompt(rows)) + summary_lines(summary)))
    if args.json_out:
        report = {"header": head, "rows": rows, "per_prompt": per_prompt(rows), "summary": summary}
        Path(args.json_out).write_text(json.dumps(report, indent=2))
    return 0
