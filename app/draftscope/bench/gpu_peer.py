"""The peer section of ``draftscope bench gpu --backend llama.cpp``: llama.cpp's own programs on the
same GGUF, with the same layers on the card and the same threads as ours. llama-bench's token
generation (tg: its decode loop alone, ``tg N`` at a depth of the prompt's length) against our plain
loop's writing rate (tokens after the first step over the time after it), and llama-server's greedy
answers to the same prompt (bench spec's LlamaServer, llama_server.py) against ours, alternated:
whole answers (the prompt's reading included) and writing rates. llama-bench is ``--llama-bench``, or
the one beside LLAMA_CPP_LIB_PATH's libraries (scripts/build_llama_cuda.sh puts both there), or the
one beside llama-server (scripts/build_llama_tools.sh's CPU build); llama-server is the one beside it.
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
from pathlib import Path
from typing import NamedTuple

from draftscope.bench.gpu_report import Report, answer

BENCH_TIMEOUT = 600.0  # seconds for llama-bench's whole run
SERVER_ROOM = 64  # cells of llama-server's context beyond the prompt and the answer


def find_llama_bench(named: str | None) -> tuple[str | None, str]:
    """(path, "") or (None, why not). A path given (``--llama-bench``) that is no file is an error."""
    from draftscope.bench.llama_server import find_llama_server

    if named:
        if Path(named).is_file():
            return named, ""
        raise FileNotFoundError(
            f"--llama-bench {named}: no such file (llama-bench comes with llama.cpp: "
            "scripts/build_llama_cuda.sh or scripts/build_llama_tools.sh builds it)"
        )
    libraries = os.environ.get("LLAMA_CPP_LIB_PATH")
    if libraries and (Path(libraries) / "llama-bench").is_file():
        return str(Path(libraries) / "llama-bench"), ""
    server, why = find_llama_server()
    beside = Path(server).with_name("llama-bench") if server else None
    if beside is not None and beside.is_file():
        return str(beside), ""
    return None, f"llama-bench not found ({why or f'none beside {server}'}; give --llama-bench PATH)"


def find_peer_server(bench: str | None) -> tuple[str | None, str]:
    """llama-server of the same build as ``bench`` where it is beside it, else wherever bench spec finds one."""
    from draftscope.bench.llama_server import find_llama_server

    beside = Path(bench).with_name("llama-server") if bench else None
    if beside is not None and beside.is_file():
        return str(beside), ""
    return find_llama_server()


class Tg(NamedTuple):
    """llama-bench's token generation on the GGUF."""

    tokens_per_s: float
    stddev: float
    backends: str  # llama-bench's own word for where it ran: "CPU", "CUDA", ...
    layers: int
    threads: int


def llama_bench_tg(binary: str, model: Path, *, layers: int, threads: int, depth: int, tokens: int, reps: int) -> Tg:
    """llama-bench's tg ``tokens`` after ``depth`` tokens in the context; RuntimeError saying why it failed."""
    command = [binary, "-m", str(model), "-ngl", str(layers), "-t", str(threads), "-p", "0", "-n", str(tokens)]
    command += ["-d", str(depth), "-r", str(reps), "-o", "jsonl"]
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=BENCH_TIMEOUT)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise RuntimeError(f"llama-bench did not run: {exc}") from exc
    for line in done.stdout.splitlines():
        try:
            row = json.loads(line)
        except ValueError:
            continue
        if row.get("n_gen") == tokens:
            return Tg(row["avg_ts"], row.get("stddev_ts", 0.0), row.get("backends", "?"), layers, threads)
    said = " / ".join(done.stderr.strip().splitlines()[-3:])
    raise RuntimeError(f"llama-bench (exit {done.returncode}) gave no tg figure: {said or 'nothing said'}")


class Side(NamedTuple):
    """One program's answers in the alternation: median tokens/s of whole answers and of writing."""

    whole: float
    writing: float | None
    tokens: list[int]


def _median(values) -> float | None:
    kept = [v for v in values if v]
    return statistics.median(kept) if kept else None


def alternate(engine, server, prompt: list[int], args) -> tuple[Side, Side | None]:
    """1 + --reps rounds of llama-server's answer (where there is one) then ours; round 0 warms up."""
    ours, theirs = [], []
    for rep in range(1 + args.reps):
        if server is not None:
            got = server.answer(prompt)
            if rep:
                theirs.append((len(got.tokens) / got.seconds, got.timings.get("predicted_per_second"), got.tokens))
        mine = answer(engine, prompt, args.tokens)
        if rep:
            ours.append((len(mine.tokens) / mine.seconds, mine.writing_tps, mine.tokens))

    def side(runs) -> Side:
        return Side(statistics.median(r[0] for r in runs), _median(r[1] for r in runs), runs[-1][2])

    return side(ours), (side(theirs) if theirs else None)


def _rate(tps: float | None) -> str:
    return f"{tps:9.1f}" if tps else "        -"


def _ratio(ours: float | None, theirs: float | None) -> float | None:
    return round(ours / theirs, 3) if ours and theirs else None


def _started(server, why: str):
    """(the server, running, "") or (None, why it is not): one that fails to start is a peer missing."""
    if server is None:
        return None, why
    try:
        server.start()
    except (RuntimeError, OSError) as exc:
        return None, f"it did not start: {exc}"
    return server, ""


def _server(binary: str | None, engine, prompt: list[int], args, layers: int):
    from draftscope.bench.llama_server import LlamaServer

    if binary is None:
        return None
    backend = engine.backend
    return LlamaServer(
        binary,
        "llama-server",
        Path(backend.path),
        threads=backend.threads,
        context=len(prompt) + args.tokens + SERVER_ROOM,
        max_new_tokens=args.tokens,
        gpu_layers=layers,
    )


def peer_section(engine, prompt: list[int], args, report: Report) -> None:
    from draftscope.bench.gpu_llama import layers_on_card

    key = "peer"
    report.heading(key)
    if engine.backend.kind != "llama.cpp":
        why = "needs --backend llama.cpp (llama.cpp's own programs run GGUF files)"
        report.figures(key, f"skipped: {why}", skipped=why)
        return
    layers, threads = layers_on_card(engine.backend), engine.backend.threads
    bench, bench_why = find_llama_bench(args.llama_bench)
    server_binary, server_why = find_peer_server(bench)
    server, server_why = _started(_server(server_binary, engine, prompt, args, layers), server_why)
    report.line(
        f"the same GGUF, {layers} layers on the card (-ngl {layers}), {threads} threads; prompt {len(prompt)} "
        f"tokens, up to {args.tokens} new, greedy; ours and llama-server alternated, median of {args.reps} "
        "after 1 warm-up; writing: tokens after the first over the time after it"
    )
    try:
        ours, theirs = alternate(engine, server, prompt, args)
    finally:
        if server is not None:
            server.stop()
    report.figures(
        key,
        f"  ours, plain loop   writing {_rate(ours.writing)} tokens/s   whole answer {_rate(ours.whole)} tokens/s "
        f"({len(ours.tokens)} tokens)",
        program="ours",
        writing_tokens_per_s=ours.writing and round(ours.writing, 2),
        whole_tokens_per_s=round(ours.whole, 2),
        tokens=len(ours.tokens),
    )
    _bench_line(bench, bench_why, engine, prompt, args, ours, report)
    _server_line(server_binary, server_why, ours, theirs, report)


def _bench_line(bench, why: str, engine, prompt: list[int], args, ours: Side, report: Report) -> None:
    from draftscope.bench.gpu_llama import layers_on_card

    if bench is None:
        report.figures("peer", f"  llama-bench        skipped: {why}", program="llama-bench", skipped=why)
        return
    backend = engine.backend
    try:
        tg = llama_bench_tg(
            bench,
            Path(backend.path),
            layers=layers_on_card(backend),
            threads=backend.threads,
            depth=len(prompt),
            tokens=args.tokens,
            reps=args.reps,
        )
    except RuntimeError as exc:
        report.figures(
            "peer", f"  llama-bench        failed: {exc}", program="llama-bench", failed=str(exc), path=bench
        )
        return
    ratio = _ratio(ours.writing, tg.tokens_per_s)
    report.figures(
        "peer",
        f"  llama-bench tg     writing {_rate(tg.tokens_per_s)} tokens/s ± {tg.stddev:.1f} (tg {args.tokens} after "
        f"{len(prompt)} in the context; ran on {tg.backends})" + (f"   ours {ratio:.2f}x" if ratio else ""),
        program="llama-bench",
        path=bench,
        writing_tokens_per_s=round(tg.tokens_per_s, 2),
        stddev=round(tg.stddev, 2),
        backends=tg.backends,
        ours_over=ratio,
    )
    if layers_on_card(backend) and tg.backends.strip() == "CPU":
        report.line(f"  (note: {bench} is a CPU build: it ran with no layer on the card, ours with them there)")


def _server_line(binary, why: str, ours: Side, theirs: Side | None, report: Report) -> None:
    if theirs is None:
        report.figures("peer", f"  llama-server       skipped: {why}", program="llama-server", skipped=why)
        return
    writing, whole = _ratio(ours.writing, theirs.writing), _ratio(ours.whole, theirs.whole)
    same = theirs.tokens == ours.tokens
    report.figures(
        "peer",
        f"  llama-server       writing {_rate(theirs.writing)} tokens/s   whole answer {_rate(theirs.whole)} "
        f"tokens/s ({len(theirs.tokens)} tokens)   ours "
        + ", ".join(f"{r:.2f}x {what}" for r, what in ((writing, "writing"), (whole, "whole")) if r)
        + f"; token-identical: {same}",
        program="llama-server",
        path=binary,
        writing_tokens_per_s=theirs.writing and round(theirs.writing, 2),
        whole_tokens_per_s=round(theirs.whole, 2),
        tokens=len(theirs.tokens),
        ours_over_writing=writing,
        ours_over_whole=whole,
        identical=same,
    )
