"""Fuzzing the index reader in child processes: damaged files and bad arguments, each ending in an
answer or a clear error, never in a crash (a signal, an abort) or a hang.

Seed indexes of every storage layout are built, then damaged (bytes flipped, truncated, extended,
body overwritten, header fields set to odd values under a valid header checksum). Child processes
open each file (alternately read into memory and memory-mapped), verify it, search it (one, a
batch, REST's face) and read documents; bad search arguments (huge, negative, wrong types,
contexts outside the vocabulary) are tried on a good index. The parent watches each child: a
child killed by a signal is a crash, one silent for longer than ``--timeout`` a hang.

    python scripts/fuzz_index.py --files 10000
"""

from __future__ import annotations

import argparse
import collections
import json
import selectors
import struct
import subprocess
import sys
import tempfile
import time
import zlib
from pathlib import Path
from typing import NamedTuple

import numpy as np

HEADER_FIELDS = [
    (8, "<I"),
    (16, "<B"),
    (17, "<B"),
    (20, "<I"),
    (24, "<Q"),
    (32, "<Q"),
    (40, "<Q"),
    (48, "<Q"),
    (56, "<Q"),
    (64, "<Q"),
    (76, "<I"),
]
OPERATIONS = ("open", "verify", "search", "search_batch", "rest_search", "document")


def mutate(data: bytes, rng: np.random.Generator) -> bytes:
    """One random damage to an index file's bytes."""
    b = bytearray(data)
    kind = rng.integers(0, 6)
    if kind == 0:  # flip random bytes anywhere
        for _ in range(rng.integers(1, 8)):
            b[rng.integers(0, len(b))] ^= int(rng.integers(1, 256))
    elif kind == 1:  # truncate
        del b[rng.integers(0, len(b)) :]
    elif kind == 2:  # extend with junk
        b += bytes(rng.integers(0, 256, size=rng.integers(1, 64), dtype=np.uint8))
    elif kind == 3:  # overwrite the body with random data, keeping the header intact
        start = rng.integers(256, len(b))
        end = min(len(b), start + rng.integers(1, 200))
        b[start:end] = bytes(rng.integers(0, 256, size=end - start, dtype=np.uint8))
    else:  # a header field set to a random value with a *valid* header checksum
        off, fmt = HEADER_FIELDS[rng.integers(0, len(HEADER_FIELDS))]
        size = struct.calcsize(fmt)
        value = int(rng.integers(0, 2 ** min(8 * size, 63)))
        if kind == 5:
            value = int(rng.choice([0, 1, 2, 4, 8, 255, 2**32 - 1, value]))
            value &= (1 << (8 * size)) - 1
        struct.pack_into(fmt, b, off, value)
        struct.pack_into("<I", b, 252, zlib.crc32(bytes(b[:252])))
    return bytes(b)


def seed_indexes(work: Path, rng: np.random.Generator) -> list[Path]:
    """Small valid indexes of each layout: 16- and 32-bit tokens, 32- and 64-bit suffix entries."""
    from draftscope import _retriever

    out = []
    for vocab, wide in ((12, False), (70_000, False), (12, True)):
        path = work / f"seed-{vocab}-{'wide' if wide else 'narrow'}.idx"
        w = _retriever.IndexWriter(str(path), vocab, "fuzz", 1, wide)
        for entry in range(30):
            w.add_entry(rng.integers(0, vocab, size=rng.integers(0, 80)), entry)
        w.finalize()
        out.append(path)
    return out


def _outcome(call) -> str:
    try:
        call()
        return "ok"
    except Exception as exc:  # the type is the outcome being tallied
        return f"error:{type(exc).__name__}"


def probe_file(path: str, in_memory: bool, rng: np.random.Generator) -> dict:
    """Every operation on one (possibly damaged) file: {operation: outcome}."""
    from draftscope.retrieval import Reader

    result = {}
    reader = []
    result["open"] = _outcome(lambda: reader.append(Reader(path, in_memory=in_memory)))
    if not reader:
        return result
    r = reader[0]
    vocab = max(1, min(r.vocab_size, 2**31))
    contexts = [rng.integers(0, vocab, size=6) for _ in range(4)]
    result["verify"] = _outcome(r.verify)
    result["search"] = _outcome(lambda: [r.search(c, max_nodes=32) for c in contexts])
    result["search_batch"] = _outcome(lambda: r.search_batch(contexts, max_nodes=16))
    rest = r._inner.rest_search
    result["rest_search"] = _outcome(lambda: [rest(c[-2:].tolist(), choices=16) for c in contexts])
    result["document"] = _outcome(lambda: [r.document(i) for i in range(min(r.document_count, 5))])
    return result


BAD_ARGUMENTS = [
    {"max_nodes": 2**32},
    {"max_nodes": 2**63},
    {"max_nodes": 2**64},
    {"max_nodes": -1},
    {"max_nodes": 1.5},
    {"max_matches": 2**40},
    {"max_matches": -5},
    {"max_depth": 2**20},
    {"max_depth": None},
    {"min_suffix": 0},
    {"min_suffix": 5, "max_suffix": 2},
    {"max_suffix": 2**62},
    {"max_suffix": "16"},
]


def probe_arguments(path: str, rng: np.random.Generator) -> list[dict]:
    """Bad arguments and contexts on a good index: {operation: outcome} per try."""
    from draftscope.retrieval import Reader

    r = Reader(path)
    out = []
    for kwargs in BAD_ARGUMENTS:
        out.append(
            {
                "search(args)": _outcome(lambda: r.search([1, 2, 3], **kwargs)),  # noqa: B023 - called at once, in this iteration
                "search_batch(args)": _outcome(lambda: r.search_batch([[1, 2, 3]], **kwargs)),  # noqa: B023 - called at once, in this iteration
            }
        )
    contexts = [
        [r.vocab_size],
        [-1, 2],
        [2**63],
        [2**70],
        ["a"],
        [1.5],
        [[1, 2]],
        np.array([1.0, 2.0]),
        np.array([3, 2**63 + 5], dtype=np.uint64),
        list(rng.integers(0, 2**40, size=20)),
    ]
    for c in contexts:
        out.append(
            {
                "search(context)": _outcome(lambda: r.search(c)),  # noqa: B023 - called at once, in this iteration
                "rest_search(context)": _outcome(lambda: r._inner.rest_search(c)),  # noqa: B023 - called at once, in this iteration
            }
        )
    return out


# ---------------------------------------------------------------- child and parent


def child(files: list[str], seed: int) -> None:
    """Probe each file, announcing it first, so the parent knows which one a crash or hang hit."""
    rng = np.random.default_rng(seed)
    for i, path in enumerate(files):
        print(json.dumps({"start": path}), flush=True)
        print(json.dumps({"end": path, "result": probe_file(path, in_memory=i % 2 == 0, rng=rng)}), flush=True)


def run_children(files: list[str], *, timeout: float, batch: int, seed: int) -> tuple[list[dict], list[dict]]:
    """(results per file, problems: crashes and hangs with the file that caused them)."""
    results, problems = [], []
    pending = list(files)
    while pending:
        chunk, pending = pending[:batch], pending[batch:]
        proc = subprocess.Popen(
            [sys.executable, "-m", "draftscope.bench.fuzz", "--child", str(seed)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        proc.stdin.write("\n".join(chunk))
        proc.stdin.close()
        sel = selectors.DefaultSelector()
        sel.register(proc.stdout, selectors.EVENT_READ)
        current, done = None, set()
        while True:
            if not sel.select(timeout):
                proc.kill()
                problems.append({"file": current, "kind": "hang", "detail": f"no answer in {timeout:.0f}s"})
                break
            line = proc.stdout.readline()
            if not line:
                break
            msg = json.loads(line)
            if "start" in msg:
                current = msg["start"]
            else:
                results.append(msg)
                done.add(msg["end"])
                current = None
        code = proc.wait()
        stderr = proc.stderr.read()
        if current is not None and not (problems and problems[-1]["file"] == current):
            kind = "crash" if code < 0 or code not in (0, 1) else "error exit"
            problems.append({"file": current, "kind": kind, "detail": f"exit {code}: {stderr.strip()[-300:]}"})
        # Files after the one that failed go again in a fresh child.
        skipped = [f for f in chunk if f not in done and f != current]
        pending = skipped + pending
    return results, problems


def tally(results: list[dict]) -> dict[str, collections.Counter]:
    table: dict[str, collections.Counter] = {op: collections.Counter() for op in OPERATIONS}
    for r in results:
        for op, outcome in r["result"].items():
            table.setdefault(op, collections.Counter())[outcome] += 1
    return table


class FuzzRun(NamedTuple):
    """What one fuzzing run tried and found."""

    layouts: int  # seed indexes, one per storage layout
    results: list[dict]
    problems: list[dict]
    arguments: list[dict]  # the outcomes of each bad argument set
    seconds: float


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--files", type=int, default=2000, help="damaged files to try")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--timeout", type=float, default=30.0, help="seconds without an answer that count as a hang")
    p.add_argument("--batch", type=int, default=250, help="files per child process")
    p.add_argument("--json", dest="json_out", default=None, help="also write the figures to this JSON file")
    p.add_argument("--child", default=None, help=argparse.SUPPRESS)
    return p


def _fuzz(args: argparse.Namespace) -> FuzzRun:
    """Damaged files through the children, then bad arguments on a good index (the rng in that order)."""
    rng = np.random.default_rng(args.seed)
    t0 = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="draftscope-fuzz-") as tmp:
        work = Path(tmp)
        seeds = seed_indexes(work, rng)
        originals = [s.read_bytes() for s in seeds]
        files = []
        for i in range(args.files):
            path = work / f"fuzz-{i:06d}.idx"
            path.write_bytes(mutate(originals[i % len(originals)], rng))
            files.append(str(path))
        results, problems = run_children(files, timeout=args.timeout, batch=args.batch, seed=args.seed)
        arguments = [o for o in probe_arguments(str(seeds[0]), rng)]
    return FuzzRun(len(seeds), results, problems, arguments, time.perf_counter() - t0)


def _table(run: FuzzRun) -> dict[str, collections.Counter]:
    table = tally(run.results)
    for tries in run.arguments:
        for op, outcome in tries.items():
            table.setdefault(op, collections.Counter())[outcome] += 1
    return table


def _print_report(args: argparse.Namespace, run: FuzzRun, table: dict[str, collections.Counter]) -> None:
    print(
        f"{args.files:,} damaged index files ({run.layouts} layouts) and {len(run.arguments)} bad argument sets, "
        f"in child processes, {run.seconds:.0f}s"
    )
    print("| interface | tried | answered | clear errors (by type) |")
    print("|---|---:|---:|---|")
    for op, counts in table.items():
        tried = sum(counts.values())
        errors = ", ".join(f"{n:,} {k.split(':', 1)[1]}" for k, n in sorted(counts.items()) if k.startswith("error:"))
        print(f"| {op} | {tried:,} | {counts['ok']:,} | {errors or '—'} |")
    crashes = sum(1 for pr in run.problems if pr["kind"] != "hang")
    hangs = sum(1 for pr in run.problems if pr["kind"] == "hang")
    print(
        f"crashes {crashes}, hangs {hangs} (of {args.files:,} files; a crash is a child killed by a signal or "
        f"exiting abnormally, a hang {args.timeout:.0f}s without an answer)"
    )
    for pr in run.problems:
        print(f"PROBLEM {pr['kind']}: {pr['file']}: {pr['detail']}")


def _write_json(path: str, files: int, run: FuzzRun, table: dict[str, collections.Counter]) -> None:
    figures = {
        "files": files,
        "seconds": run.seconds,
        "problems": run.problems,
        "table": {k: dict(v) for k, v in table.items()},
    }
    Path(path).write_text(json.dumps(figures, indent=2))


def main(argv=None) -> int:
    p = _parser()
    args = p.parse_args(argv)
    if args.child is not None:
        child([line for line in sys.stdin.read().splitlines() if line], int(args.child))
        return 0
    if args.files < 1:
        p.error("--files must be at least 1")
    run = _fuzz(args)
    table = _table(run)
    _print_report(args, run, table)
    if args.json_out:
        _write_json(args.json_out, args.files, run, table)
    return 1 if run.problems else 0


if __name__ == "__main__":
    raise SystemExit(main())
