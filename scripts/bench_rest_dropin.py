"""REST's retrieval call pattern, replayed on Draftscope's DraftRetriever face and on REST's own.

REST's ``generate_candidates_and_draft_buffer`` runs once per decoding step: it appends the
step's new token to the context and calls ``datastore.search(last_span_tokens, choices=64)`` for
spans 16, 15, ... 2 until one returns drafts. This script replays exactly those calls over
contexts taken from held-back documents and times each step on both readers, alternating which
goes first, in rounds, on the same machine in one run.

The corpus: the documents of a Draftscope datastore (default: the app's ShareGPT datastore for
SmolLM2), the last 2% held back for the contexts; both indexes are written from the same 98%.
REST's reader comes from a built DraftRetriever (``--rest-path``: a folder holding its
``draftretriever`` package, e.g. ``pip install --target DIR <its wheel>``); without it only
Draftscope's figures are printed.

    python scripts/bench_rest_dropin.py --rest-path /tmp/restdr/site --steps 3000 --rounds 3
"""

from __future__ import annotations

import argparse
import importlib
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

SPANS = list(range(16, 1, -1))  # REST's token_spans


def documents(path: Path, limit: int | None) -> list[list[int]]:
    from draftscope.retrieval import Reader

    reader = Reader(path)
    n = reader.document_count if limit is None else min(limit, reader.document_count)
    return [reader.document(i).tolist() for i in range(n)]


def step_contexts(held: list[list[int]], steps: int, rng: np.random.Generator) -> list[list[int]]:
    """Contexts as a decoder sees them: 16 tokens before a point of a held-back document, plus the
    step's new token (REST appends the target's token before searching)."""
    usable = [d for d in held if len(d) > 40]
    out = []
    for _ in range(steps):
        d = usable[int(rng.integers(len(usable)))]
        end = int(rng.integers(17, len(d)))
        out.append(d[end - 17 : end])
    return out


def replay(search, contexts: list[list[int]]) -> tuple[list[float], list[float], list[float], list[int]]:
    """Per step: seconds; per call: seconds of misses and of hits; the span that hit (0: none)."""
    steps, misses, hits, spans = [], [], [], []
    clock = time.perf_counter_ns
    for ctx in contexts:
        t_step = clock()
        hit = 0
        for span in SPANS:
            t0 = clock()
            result = search(ctx[-span:], choices=64)
            t1 = clock()
            if len(result[0]) == 0:
                misses.append((t1 - t0) / 1e9)
                continue
            hits.append((t1 - t0) / 1e9)
            hit = span
            break
        steps.append((clock() - t_step) / 1e9)
        spans.append(hit)
    return steps, misses, hits, spans


def us(xs: list[float], q: float | None = None) -> str:
    if not xs:
        return "—"
    v = statistics.median(xs) if q is None else float(np.quantile(xs, q))
    return f"{v * 1e6:.1f}"


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument(
        "--datastore",
        default=None,
        help="a Draftscope index whose documents make the corpus (default: the app's datastore for SmolLM2)",
    )
    p.add_argument("--documents", type=int, default=None, help="use the first N documents only")
    p.add_argument("--rest-path", default=None, help="folder holding REST's built draftretriever package")
    p.add_argument("--steps", type=int, default=3000)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--work-dir", default=None, help="where the two indexes are written (default: a temp folder)")
    args = p.parse_args(argv)

    import draftscope.retrieval.draftretriever as ours_module

    rest_module = None
    if args.rest_path:
        sys.path.insert(0, args.rest_path)
        rest_module = importlib.import_module("draftretriever")
        if Path(rest_module.__file__).resolve().is_relative_to(Path(ours_module.__file__).resolve().parents[2]):
            raise SystemExit("--rest-path found Draftscope's module, not REST's")
    if args.datastore:
        source = Path(args.datastore)
    else:
        from draftscope.datastore.default import default_datastore_path

        source = default_datastore_path("HuggingFaceTB/SmolLM2-135M-Instruct")
    if not source.is_file():
        raise SystemExit(
            f"no datastore at {source}: build one (draftscope datastore build-default) or pass --datastore"
        )

    t0 = time.perf_counter()
    docs = documents(source, args.documents)
    split = int(len(docs) * 0.98)
    kept, held = docs[:split], docs[split:]
    vocab = max(max(d) for d in docs if d) + 1
    print(
        f"corpus: {source.name}: {len(kept):,} documents, {sum(map(len, kept)):,} tokens indexed; "
        f"{len(held):,} held back for contexts (read in {time.perf_counter() - t0:.1f}s)"
    )

    work = Path(args.work_dir) if args.work_dir else Path(tempfile.mkdtemp(prefix="rest-dropin-"))
    readers = {}
    for name, module in (("draftscope", ours_module), ("REST", rest_module)):
        if module is None:
            continue
        path = str(work / f"{name}.idx")
        t0 = time.perf_counter()
        writer = module.Writer(index_file_path=path, vocab_size=vocab)
        for d in kept:
            writer.add_entry(d)
        writer.finalize()
        del writer  # REST's writer flushes on drop
        build_s = time.perf_counter() - t0
        t0 = time.perf_counter()
        readers[name] = module.Reader(index_file_path=path)
        print(
            f"{name:>10}: index written in {build_s:.1f}s ({os.path.getsize(path) / 1e6:.0f} MB), "
            f"opened in {time.perf_counter() - t0:.2f}s"
        )

    contexts = step_contexts(held, args.steps, np.random.default_rng(0))
    figures = {name: ([], [], [], []) for name in readers}
    order = list(readers)
    for r in range(args.rounds):
        for name in order if r % 2 == 0 else order[::-1]:  # alternate who goes first
            out = replay(readers[name].search, contexts)
            for acc, new in zip(figures[name], out):
                acc.extend(new)

    print(
        f"\n{args.steps:,} steps x {args.rounds} rounds, spans {SPANS[0]}..{SPANS[-1]}, choices=64 "
        f"(machine: {os.cpu_count()} cores; Python {sys.version.split()[0]})"
    )
    print(
        "| reader | step median µs | step mean µs | step p90 µs | calls per step | miss median µs | hit median µs | steps with drafts |"
    )
    print("|---|---:|---:|---:|---:|---:|---:|---:|")
    for name, (steps, misses, hits, spans) in figures.items():
        calls = (len(misses) + len(hits)) / len(steps)
        with_drafts = sum(1 for s in spans if s) / len(spans)
        print(
            f"| {name} | {us(steps)} | {statistics.mean(steps) * 1e6:.1f} | {us(steps, 0.9)} | {calls:.1f} | "
            f"{us(misses)} | {us(hits)} | {with_drafts:.1%} |"
        )
    if len(figures) == 2:
        a, b = figures["draftscope"], figures["REST"]
        ratio = statistics.median(a[0]) / statistics.median(b[0])
        mean_ratio = statistics.mean(a[0]) / statistics.mean(b[0])
        same = sum(1 for x, y in zip(a[3], b[3]) if x == y) / len(a[3])
        print(
            f"\nDraftscope / REST per step: median {ratio:.2f}x, mean {mean_ratio:.2f}x; "
            f"same hitting span in {same:.1%} of steps (REST also matches across entries in one chunk)"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
