"""Sections 1 and 2 of ``draftscope bench gpu``, the backend's step alone: the verify cost curve
(chains of 0-64 nodes and a 64-node wide tree over caches of each ``--contexts`` length, with the
bytes each step reads against the device's bandwidth) and the worst step (a run of 64-node tree
steps at ever new cache lengths, as in a conversation). Apart from gpu.py, which runs the sections.
"""

from __future__ import annotations

import time

import numpy as np

from draftscope.bench.gpu_models import card_bandwidth, step_bytes, wide_tree
from draftscope.bench.gpu_report import WARMUP, Report, device_name, device_type, sync, timed

CHAINS = (0, 1, 2, 4, 8, 16, 32, 64)
WORST_WARMUP = 3  # the first tree steps of section 2, reported on their own
COMMIT = [0, 1, 2]  # nodes kept per worst-step step: a branch's first three, as an answer accepts them


def bandwidth_bound(engine, args, report: Report) -> float | None:
    """The device's memory bandwidth in GB/s (``--bandwidth``, else the card table), said once."""
    if args.bandwidth:
        bound, where = args.bandwidth, "--bandwidth"
    elif device_type(engine.device) in ("cuda", "gpu"):
        name = device_name(engine.device)
        bound, where = card_bandwidth(name), f"the spec table ({name})"
    else:
        bound, where = None, None
    said = f"{bound:,.0f} GB/s from {where}" if bound else "none known for this device (--bandwidth GB/S gives one)"
    report.figures("verify", f"bandwidth bound: {said}", bandwidth_gb_s=bound, source=where)
    return bound


def bytes_read(backend, context: int, queries: int) -> dict[str, int] | None:
    """What a step over ``context`` cached positions must read of the device's memory: a torch
    model's weights and KV cache, or for llama.cpp those of the layers on the device it computes on
    (gpu_llama.step_bytes); None where neither is known."""
    if backend.model is not None:
        return step_bytes(backend.model, context, queries=queries)
    if backend.kind == "llama.cpp":
        from draftscope.bench.gpu_llama import step_bytes as gguf_step_bytes

        return gguf_step_bytes(backend, context)
    return None


def verify_curve(engine, args, report: Report) -> None:
    from draftscope.draft_tree import chain_tree

    key, backend, rng = "verify", engine.backend, np.random.default_rng(0)
    report.heading(key)
    bound = bandwidth_bound(engine, args, report)
    for context in args.contexts:
        ids = rng.integers(0, engine.vocab, context).tolist()
        backend.start(ids)
        past = backend.cached
        trees = {f"chain {n}": chain_tree(rng.integers(0, engine.vocab, n)) for n in CHAINS}
        trees["wide 64 (8 x chain of 8)"] = wide_tree(rng, engine.vocab)
        report.line(
            f"context {context}: ms per verify (then truncated back), ratio to the plain step, the bytes it "
            "must read (weights + KV cache) over its time, and that as a share of the device's bandwidth; "
            "each tree at one cache length throughout (steady state: section 2 has new lengths)"
        )
        plain = None
        for name, tree in trees.items():
            ms = timed(
                lambda tree=tree: (backend.verify(ids[-1], tree), backend.truncate(past)),  # noqa: B023 - timed now
                engine.device,
                args.reps,
            )
            plain = plain or ms
            read = bytes_read(backend, past + 1 + len(tree), queries=1 + len(tree))
            gb_s = sum(read.values()) / (ms / 1000) / 1e9 if read else None
            share = gb_s / bound if gb_s and bound else None
            report.figures(
                key,
                f"  {name:<26} {ms:9.2f} ms  {ms / plain:6.2f}x"
                + (f"  {gb_s:8.1f} GB/s" if gb_s else "")
                + (f"  {share:6.1%} of the bound" if share else ""),
                context=context,
                tree=name,
                nodes=len(tree),
                ms=round(ms, 3),
                ratio=round(ms / plain, 3),
                statistic="median",
                reps=args.reps,
                warmups=WARMUP,
                bytes_read=sum(read.values()) if read else None,
                gb_per_s=round(gb_s, 2) if gb_s else None,
                bound_share=round(share, 4) if share else None,
            )


def worst_step(engine, args, report: Report) -> None:
    key, backend, rng = "worst", engine.backend, np.random.default_rng(2)
    report.heading(key)
    start = max(args.contexts) + 1  # past every length section 1 verified a 64-node tree at
    ids = rng.integers(0, engine.vocab, start).tolist()
    backend.start(ids)
    tree, root, times = wide_tree(rng, engine.vocab), ids[-1], []
    first = backend.cached
    for _ in range(args.tokens):
        sync(engine.device)
        t0 = time.perf_counter()
        backend.verify(root, tree)
        backend.commit(COMMIT)
        sync(engine.device)
        times.append((time.perf_counter() - t0) * 1000)
        root = int(tree.tokens[COMMIT[-1]])
    warm, rest = times[:WORST_WARMUP], np.array(times[WORST_WARMUP:] or times)
    median, p99, worst = float(np.median(rest)), float(np.percentile(rest, 99)), float(rest.max())
    report.line(
        f"{len(times)} steps of verify + commit of a 64-node tree, {1 + len(COMMIT)} tokens kept a step: "
        f"cache {first} to {backend.cached}, every length new"
    )
    report.figures(
        key,
        f"  first {len(warm)} steps (warm-up): {', '.join(f'{t:.2f}' for t in warm)} ms",
        part="warm-up",
        ms=[round(t, 3) for t in warm],
    )
    report.figures(
        key,
        f"  the other {len(rest)}: median {median:.2f} ms, p99 {p99:.2f} ms, "
        f"max {worst:.2f} ms, max/median {worst / median:.2f}",
        part="steps",
        steps=len(rest),
        median_ms=round(median, 3),
        p99_ms=round(p99, 3),
        max_ms=round(worst, 3),
        max_over_median=round(worst / median, 3),
        first_cache=first,
        last_cache=backend.cached,
    )
