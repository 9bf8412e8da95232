"""``draftscope bench ttft``: the first token after Send, ours against llama-server on the same GGUF,
in the three cases of issue 61 where the wait is the reading, each through the OpenAI API as a chat
client drives it, alternated between servers and repeated:

  typed    a document attached, then a question typed at a human pace, then Send. Our server reads
           ahead as the window does (a ``max_tokens: 0`` request each time typing pauses, the text
           typed so far); llama-server as its web UI and the peers' apps do (nothing before Send),
           and, as ``llama-server+ahead``, given the same ``max_tokens: 0`` requests.
  restart  a four-turn conversation about the document, the server restarted, then a follow-up: ours
           restores the conversation's cache from disk; llama-server reads it again, and as
           ``llama-server+slots`` saves its slot before the restart and restores it after
           (``--slot-save-path``, by hand: its best case).
  turns    three conversations taking turns on a one-slot server: each later turn finds its
           conversation's cache replaced by another's.

``ours-no-disk`` (caches on disk off: ``--kv-cache-mb 0``) is the cost of reading again. Figures:
the median first token after Send per case and server, and ours against the others."""

from __future__ import annotations

import argparse
import json
import os
import statistics
import tempfile
import threading
import time
from pathlib import Path

from draftscope.bench.turns import QUESTIONS, default_document, stream_turn

CASES = ("typed", "restart", "turns")
SERVERS = ("ours", "ours-no-disk", "llama-server", "llama-server+ahead", "llama-server+slots")
TYPED_QUESTION = "Which parts of this text say what a user may do with the program, and under which conditions?"
FOLLOW_UP = "Of everything we discussed, what is the one point a new user should remember?"


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--model", default="qwen2.5-coder-1.5b", help="catalogue name or .gguf (llama-server needs a GGUF)")
    p.add_argument("--document", default=default_document(), help="default: CPython's LICENSE.txt")
    p.add_argument("--words", type=int, default=2200, help="the document's first N words (~3,000 tokens)")
    p.add_argument("--cases", default=",".join(CASES), help=f"which of {', '.join(CASES)}")
    p.add_argument("--servers", default="ours,ours-no-disk,llama-server,llama-server+ahead,llama-server+slots")
    p.add_argument("--typing", type=float, default=1.5, help="seconds a typed word takes (default: %(default)s)")
    p.add_argument("--max-new-tokens", type=int, default=24)
    p.add_argument("--repeats", type=int, default=2)
    p.add_argument("--json", dest="json_out", default=None)


class Server:
    """One server of the bench, restartable; its own data and settings folders where it is ours."""

    def __init__(self, name: str, model: str, home: Path) -> None:
        self.name, self.model, self.home = name, model, home
        self.client, self.model_name, self._stop, self._port = None, "", None, None
        self.start()

    def start(self) -> None:
        import openai

        if self.name.startswith("ours"):
            from draftscope.bench.serve_clients import OurServer

            env = {"DRAFTSCOPE_DATA_DIR": str(self.home / "data"), "DRAFTSCOPE_CONFIG_DIR": str(self.home / "config")}
            disk = ("--kv-cache-mb", "0") if self.name == "ours-no-disk" else ()
            server = OurServer(self.model, 1, drafting=False, env=env, extra=disk)
            url, self.model_name, self._stop = server.url, "default", server.stop
        else:
            peer = _llama_server(self.model, slots_dir=self.home / "slots" if self.name.endswith("slots") else None)
            url, self.model_name, self._stop, self._port = (
                f"http://127.0.0.1:{peer.port}/v1",
                "model",
                peer.stop,
                peer.port,
            )
        self.client = openai.OpenAI(base_url=url, api_key="unused", timeout=900)

    def stop(self) -> None:
        if self._stop is not None:
            self._stop()
            self._stop = None

    def restart(self) -> float:
        """Stop and start again; for llama-server+slots, its slot saved before and restored after (the
        seconds the restore took)."""
        if self.name.endswith("slots"):
            _slot_action(self._port, "save")
        self.stop()
        self.start()
        if not self.name.endswith("slots"):
            return 0.0
        started = time.perf_counter()
        _slot_action(self._port, "restore")
        return time.perf_counter() - started

    def reads_ahead(self) -> bool:
        return self.name in ("ours", "ours-no-disk", "llama-server+ahead")


def _llama_server(model: str, *, slots_dir: Path | None):
    from draftscope.bench.llama_server import LlamaServer, find_llama_server
    from draftscope.engine.backends.llama.llamacpp import DEFAULT_CONTEXT, default_threads
    from draftscope.models.resolve import resolve_model

    binary, why = find_llama_server()
    if binary is None:
        raise FileNotFoundError(why)
    extra = ()
    if slots_dir is not None:
        slots_dir.mkdir(parents=True, exist_ok=True)
        extra = ("--slot-save-path", str(slots_dir))
    gguf = Path(resolve_model(model).gguf_path)
    peer = LlamaServer(binary, "llama-server", gguf, threads=default_threads(), context=DEFAULT_CONTEXT,
                       max_new_tokens=0, extra=extra)  # fmt: skip
    peer.start()
    return peer


def _slot_action(port: int, action: str) -> None:
    import urllib.request

    body = json.dumps({"filename": "bench-ttft.bin"}).encode()
    request = urllib.request.Request(
        f"http://127.0.0.1:{port}/slots/0?action={action}", data=body, headers={"Content-Type": "application/json"}
    )
    with urllib.request.urlopen(request, timeout=900) as reply:
        reply.read()


def read_ahead(server: Server, messages: list[dict]) -> None:
    server.client.chat.completions.create(model=server.model_name, messages=messages, max_tokens=0)


class Typist:
    """Types a question word by word; where the server reads ahead, a thread sends what is typed so far
    (a ``max_tokens: 0`` request) whenever the last one is done and the text has changed."""

    def __init__(self, server: Server, before: list[dict], head: str) -> None:
        self.server, self.before, self.head = server, before, head
        self.typed, self.sent, self.done = "", None, threading.Event()
        self.thread = threading.Thread(target=self._read_ahead, daemon=True) if server.reads_ahead() else None

    def messages(self, text: str) -> list[dict]:
        return [*self.before, {"role": "user", "content": f"{self.head}{text}"}]

    def type(self, question: str, seconds_a_word: float) -> str:
        if self.thread:
            self.thread.start()
        for word in question.split():
            time.sleep(seconds_a_word)
            self.typed = f"{self.typed} {word}".strip()
        self.done.set()  # Send: the request goes at once, whatever a read ahead is doing
        return self.typed

    def _read_ahead(self) -> None:
        while not self.done.is_set():
            text = self.typed
            if text != self.sent:
                self.sent = text
                try:
                    read_ahead(self.server, self.messages(text))
                except Exception:  # a failed read ahead only means Send reads it all
                    return
            else:
                self.done.wait(0.1)


def ask(server: Server, messages: list[dict], max_tokens: int) -> dict:
    return stream_turn(server.client, server.model_name, messages, max_tokens)


def case_typed(server: Server, document: str, n: int, args) -> dict:
    typist = Typist(server, [], f"Document {n}. Read it, then answer my question.\n\n{document}\n\n")
    question = typist.type(TYPED_QUESTION, args.typing)
    return ask(server, typist.messages(question), args.max_new_tokens)


def conversation(server: Server, document: str, n: int, turns: int, max_tokens: int) -> list[dict]:
    """A conversation's first ``turns`` turns (the server's answers kept in it); its messages."""
    messages = []
    for turn, question in enumerate(QUESTIONS[:turns], start=1):
        content = (
            f"Conversation {n}. Read this text, then answer.\n\n{document}\n\n{question}" if turn == 1 else question
        )
        messages.append({"role": "user", "content": content})
        messages.append({"role": "assistant", "content": ask(server, messages, max_tokens)["text"]})
    return messages


def case_restart(server: Server, document: str, n: int, args) -> dict:
    messages = conversation(server, document, n, len(QUESTIONS), args.max_new_tokens)
    restore = server.restart()
    row = ask(server, [*messages, {"role": "user", "content": FOLLOW_UP}], args.max_new_tokens)
    return {**row, "restore_s": restore}


def case_turns(server: Server, document: str, n: int, args) -> dict:
    """Three conversations about three parts of the document, one turn each in rotation; the figure is
    the median first token of every turn after a conversation's first."""
    words = document.split()
    third = max(1, len(words) // 3)
    parts = [" ".join(words[i * third : (i + 1) * third]) for i in range(3)]
    chats = [[] for _ in parts]
    later = []
    for turn, question in enumerate(QUESTIONS[:3], start=1):
        for i, part in enumerate(parts):
            opener = f"Conversation {n}.{i}. Read this text, then answer.\n\n{part}\n\n"
            chats[i].append({"role": "user", "content": (opener if turn == 1 else "") + question})
            row = ask(server, chats[i], args.max_new_tokens)
            chats[i].append({"role": "assistant", "content": row.pop("text")})
            if turn > 1:
                later.append(row)
    first = statistics.median(r["first_token_s"] for r in later)
    cached = statistics.median(r["cached_tokens"] or 0 for r in later)
    return {"first_token_s": first, "prompt_tokens": later[-1]["prompt_tokens"], "cached_tokens": cached}


CASE_RUNS = {"typed": case_typed, "restart": case_restart, "turns": case_turns}
CASE_SERVERS = {  # the servers each case means something for
    "typed": ("ours", "llama-server", "llama-server+ahead"),
    "restart": ("ours", "ours-no-disk", "llama-server", "llama-server+slots"),
    "turns": ("ours", "ours-no-disk", "llama-server"),
}


def run_case(case: str, servers: list[str], document: str, args, home: Path) -> list[dict]:
    """Every repeat of one case, servers alternated (drift on a busy machine hits each alike)."""
    names = [s for s in CASE_SERVERS[case] if s in servers]
    started = {name: Server(name, args.model, home / f"{case}-{name}") for name in names}
    rows = []
    try:
        for repeat in range(args.repeats):
            for name in names:
                row = CASE_RUNS[case](started[name], document, 1000 * repeat + len(rows), args)
                row.pop("text", None)
                rows.append({"case": case, "server": name, "repeat": repeat, **row})
                say_row(rows[-1])
    finally:
        for server in started.values():
            server.stop()
    return rows


def say_row(row: dict) -> None:
    cached = row.get("cached_tokens")
    extra = f", restored by hand in {row['restore_s']:.2f} s" if row.get("restore_s") else ""
    print(
        f"  {row['case']}, {row['server']}, repeat {row['repeat'] + 1}: first token {row['first_token_s']:.2f} s "
        f"after Send (prompt {row.get('prompt_tokens')} tokens, {'—' if cached is None else cached} from cache{extra})",
        flush=True,
    )


def summary(rows: list[dict]) -> list[str]:
    lines = ["| case | server | first token after Send (s), median | ours against it |", "|---|---|---:|---:|"]
    for case in dict.fromkeys(r["case"] for r in rows):
        medians = {}
        for name in dict.fromkeys(r["server"] for r in rows if r["case"] == case):
            medians[name] = statistics.median(
                r["first_token_s"] for r in rows if (r["case"], r["server"]) == (case, name)
            )
        for name, value in medians.items():
            ratio = f"{medians['ours'] / value:.2f}x" if "ours" in medians and name != "ours" and value > 0 else ""
            lines.append(f"| {case} | {name} | {value:.2f} | {ratio} |")
    return lines


def run(args: argparse.Namespace) -> int:
    from draftscope.bench.spec import _cpu_name

    cases = [c for c in args.cases.split(",") if c]
    servers = [s for s in args.servers.split(",") if s]
    unknown = [c for c in cases if c not in CASES] + [s for s in servers if s not in SERVERS]
    if unknown:
        raise SystemExit(f"draftscope bench ttft: unknown {', '.join(unknown)} (cases {CASES}, servers {SERVERS})")
    words = Path(args.document).read_text(encoding="utf-8", errors="replace").split()
    document = " ".join(words[: args.words])
    print(
        f"draftscope bench ttft: {args.model}, {Path(args.document).name} ({min(len(words), args.words)} words), "
        f"a word typed every {args.typing} s, {args.max_new_tokens} new tokens, greedy, {args.repeats} repeats; "
        f"{_cpu_name()} ({os.cpu_count()} cores), {time.strftime('%Y-%m-%d')}",
        flush=True,
    )
    rows = []
    with tempfile.TemporaryDirectory(prefix="draftscope-ttft-") as home:
        for case in cases:
            print(f"== {case} ==", flush=True)
            rows += run_case(case, servers, document, args, Path(home))
    print("\n".join(summary(rows)))
    if args.json_out:
        Path(args.json_out).write_text(json.dumps(rows, indent=2))
    return 0
