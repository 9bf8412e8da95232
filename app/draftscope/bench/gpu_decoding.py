"""Sections 3 and 4 of ``draftscope bench gpu``, whole answers through the engine: plain decoding
against Hugging Face's eager ``generate``, and the oracle limit (drafts that are always right, at
fixed depths, with the adaptive budget and as a 64-node wide tree), with the share of a 64-node
step spent outside the forward. Apart from gpu.py, which runs the sections.
"""

from __future__ import annotations

import statistics
import time
from typing import NamedTuple

import numpy as np

from draftscope.bench.gpu_models import WideOracle, wide_tree
from draftscope.bench.gpu_report import Report, answer, sync, timed

ORACLE_DEPTHS = (3, 7, 15)
WIDE = "wide 64 (8 x 8)"  # the oracle configuration whose steps verify 64 nodes


def hf_generate(engine, prompt: list[int], tokens: int):
    """(token ids, seconds) of Hugging Face's own greedy loop on the same model and prompt."""
    import torch

    eos = sorted(engine.eos_ids)
    ids = torch.tensor([prompt], device=engine.device)
    sync(engine.device)
    t0 = time.perf_counter()
    with torch.inference_mode():
        out = engine.model.generate(
            ids,
            attention_mask=torch.ones_like(ids),
            max_new_tokens=tokens,
            do_sample=False,
            temperature=None,
            top_p=None,
            top_k=None,
            eos_token_id=eos or None,
            pad_token_id=eos[0] if eos else 0,
        )
    sync(engine.device)
    return out[0, len(prompt) :].tolist(), time.perf_counter() - t0


class PlainRuns(NamedTuple):
    """The plain section's alternated answers: HF generate's (none on llama.cpp) and the engine's."""

    ours_ids: list[int]
    ours_s: list[float]
    hf_ids: list[int] | None
    hf_s: list[float]
    replays: int  # steps replayed from captured graphs
    steps: int


def _plain_runs(engine, prompt: list[int], args) -> PlainRuns:
    """1 + --reps rounds of HF generate then the engine's plain loop, alternated so that drift hits both
    alike; round 0 warms up. HF needs the torch model: none on llama.cpp."""
    hf_s, ours_s, hf_ids, ours_ids = [], [], None, None
    graphs = getattr(engine.backend, "graphs", None)
    replays = steps = 0
    for rep in range(1 + args.reps):
        if engine.model is not None:
            hf_ids, secs = hf_generate(engine, prompt, args.tokens)
            if rep:
                hf_s.append(secs)
        before = graphs.replays if graphs is not None else 0
        ours = answer(engine, prompt, args.tokens)
        ours_ids = ours.tokens
        replays += (graphs.replays if graphs is not None else 0) - before
        steps += ours.steps
        if rep:
            ours_s.append(ours.seconds)
    return PlainRuns(ours_ids, ours_s, hf_ids, hf_s, replays, steps)


def plain_vs_hf(engine, prompt: list[int], args, report: Report) -> list[int]:
    key = "plain"
    report.heading(key)
    runs = _plain_runs(engine, prompt, args)
    ours_tps = len(runs.ours_ids) / statistics.median(runs.ours_s)
    report.line(
        f"prompt {len(prompt)} tokens, greedy, up to {args.tokens} new tokens; median of {args.reps} "
        "alternated runs after 1 warm-up each, prefill included"
    )
    if runs.hf_ids is None:
        why = f"HF generate runs a torch model; {engine.backend.kind} has none (the peer section has llama.cpp's own)"
        report.figures(key, f"  HF generate        skipped: {why}", method="hf", skipped=why)
    else:
        hf_tps = len(runs.hf_ids) / statistics.median(runs.hf_s)
        report.figures(
            key,
            f"  HF generate        {hf_tps:9.1f} tokens/s ({len(runs.hf_ids)} tokens)",
            method="hf",
            tokens_per_s=round(hf_tps, 2),
            tokens=len(runs.hf_ids),
        )
    report.figures(
        key,
        f"  engine plain loop  {ours_tps:9.1f} tokens/s ({len(runs.ours_ids)} tokens)",
        method="engine plain",
        tokens_per_s=round(ours_tps, 2),
        tokens=len(runs.ours_ids),
    )
    if runs.hf_ids is not None:
        _against_hf(engine, runs, ours_tps / hf_tps, report)
    return runs.ours_ids


def _against_hf(engine, runs: PlainRuns, ratio: float, report: Report) -> None:
    """The engine's plain loop over HF generate, whether their answers are the same, and the graphs' share."""
    same = runs.hf_ids == runs.ours_ids
    expected = (
        "expected in fp32" if engine.precision == "float32" else f"{engine.precision} rounding may flip near-ties"
    )
    report.figures(
        "plain",
        f"  engine / HF: {ratio:.2f}x; token-identical: {same} ({expected})",
        ratio=round(ratio, 3),
        identical=same,
    )
    report.figures(
        "plain",
        f"  steps replayed from captured graphs: {runs.replays} of {runs.steps}",
        graph_replays=runs.replays,
        steps=runs.steps,
    )


def oracle_limit(engine, prompt: list[int], plain: list[int] | None, args, report: Report) -> None:
    from draftscope.drafters.oracle import OracleDrafter

    key = "oracle"
    report.heading(key)
    if plain is None:
        plain = answer(engine, prompt, args.tokens)[0]
    configs = {f"depth {d}": (d, d) for d in ORACLE_DEPTHS} | {"adaptive": (16, None), WIDE: (8, 64)}  # (depth, budget)
    secs: dict[str, list[float]] = {name: [] for name in ["plain", *configs]}
    out: dict[str, tuple[list[int], int, float]] = {}
    wide_ms: list[float] = []
    for rep in range(1 + args.reps):  # each round: plain, then every configuration; round 0 warms up
        ids, s, steps, nodes, *_ = answer(engine, prompt, args.tokens)
        secs["plain"].append(s)
        out["plain"] = (ids, steps, nodes)
        for name, (depth, budget) in configs.items():
            drafter = (
                WideOracle(plain, len(prompt), engine.vocab)
                if name == WIDE
                else OracleDrafter(plain, len(prompt), max_depth=depth)
            )
            ids, s, steps, nodes, step_ms, _ = answer(engine, prompt, args.tokens, [drafter], budget)
            secs[name].append(s)
            out[name] = (ids, steps, nodes)
            if name == WIDE and rep:
                wide_ms.append(step_ms)
    report.line(
        f"oracle drafts = the plain answer ({len(plain)} tokens), a chain ({WIDE}: its first branch, 7 "
        f"random ones beside it); median of {args.reps} rounds after 1 warm-up, each round plain then "
        "every configuration"
    )
    plain_tps = len(out["plain"][0]) / statistics.median(secs["plain"][1:])
    report.figures(
        key, f"  plain              {plain_tps:9.1f} tokens/s", config="plain", tokens_per_s=round(plain_tps, 2)
    )
    for name in configs:
        ids, steps, nodes = out[name]
        tps = len(ids) / statistics.median(secs[name][1:])
        tau, same = len(ids) / max(steps, 1), ids == plain
        report.figures(
            key,
            f"  {name:<18} {tps:9.1f} tokens/s  {tps / plain_tps:5.2f}x plain  "
            f"tau {tau:5.2f}  {nodes:4.1f} nodes a step  token-identical: {same}",
            config=name,
            tokens_per_s=round(tps, 2),
            speedup=round(tps / plain_tps, 3),
            tau=round(tau, 3),
            nodes_per_step=round(nodes, 2),
            identical=same,
        )
    outside_the_forward(engine, prompt, plain, statistics.median(wide_ms), args, report)


def outside_the_forward(engine, prompt, plain, step: float, args, report: Report) -> None:
    """The share of a 64-node step spent outside the forward: the wide oracle's median step (the
    engine's own step time, the prompt's step left out) against a 64-node verify alone at the
    answer's middle length."""
    backend, rng = engine.backend, np.random.default_rng(4)
    backend.start(prompt + plain[: len(plain) // 2])
    past, tree = backend.cached, wide_tree(rng, engine.vocab)
    forward = timed(lambda: (backend.verify(prompt[-1], tree), backend.truncate(past)), engine.device, args.reps)
    share = max(0.0, 1 - forward / step)
    report.figures(
        "oracle",
        f"  {WIDE}: {step:.2f} ms a step, its 64-node forward alone {forward:.2f} ms: "
        f"{share:.0%} of a step outside the forward (drafting, tree, walk, events)",
        config="outside the forward",
        step_ms=round(step, 3),
        forward_ms=round(forward, 3),
        outside_share=round(share, 3),
    )
