"""``draftscope bench project``: what drafting would buy on another device, from two measurements.

A model that cannot be run there (the catalogue's Qwen2.5-Coder-1.5B on a GPU machine that takes
64 MiB a transfer) is drafted for here: ``bench spec --trace T`` writes each step of each answer
(nodes verified, tokens it gave, the drafters whose tokens were accepted, drafting ms). ``bench gpu
--json C`` measured there what a verify of n nodes costs. Replayed: an answer's projected decoding
time is the sum over its steps of cost(nodes), plus the drafting time of the steps that drafted,
against plain decoding's cost(0) a token; the prompt's reading is left out of both. Labelled as a
projection wherever shown: acceptance is this machine's (the same model and drafters give the
same drafts; only a near-tie flipped by the other device's rounding would differ), costs the other's.
"""

from __future__ import annotations

import argparse
import json
from collections import defaultdict
from pathlib import Path


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--trace", required=True, help="steps written by `bench spec --trace`")
    p.add_argument("--costs", required=True, help="`bench gpu --json` output: its verify cost curve")
    p.add_argument(
        "--context",
        type=int,
        default=None,
        help="which measured context's curve to use (default: the shortest measured)",
    )
    p.add_argument(
        "--drafting",
        choices=("measured", "free"),
        default="measured",
        help="count each step's drafting time as measured here, or as free (a bound)",
    )


def write_trace(path: str | Path, method: str, question, steps) -> None:
    """One JSON line per step event of an answer, added to ``path``: what `bench project` replays."""
    with open(path, "a", encoding="utf-8") as file:
        for ev in steps:
            sources: dict[str, int] = {}
            for source in ev.provenance:
                if source != "target":
                    sources[source] = sources.get(source, 0) + 1
            file.write(
                json.dumps(
                    {
                        "method": method,
                        "question_id": question,
                        "step": ev.step,
                        "nodes": ev.proposed,
                        "tokens": len(ev.token_ids),
                        "sources": sources,
                        "draft_ms": round(ev.draft_ms, 3),
                    }
                )
                + "\n"
            )


def load_costs(path: str | Path, context: int | None = None) -> tuple[dict[int, float], int]:
    """({nodes: ms} of one context's chains, that context) from bench gpu's JSON lines."""
    curves: dict[int, dict[int, float]] = defaultdict(dict)
    for line in Path(path).read_text().splitlines():
        row = json.loads(line)
        if row.get("section") == "verify cost curve" and str(row.get("tree", "")).startswith("chain "):
            curves[int(row["context"])][int(row["nodes"])] = float(row["ms"])
    if not curves:
        raise ValueError(f"{path} holds no verify cost curve (write one with `draftscope bench gpu --json`)")
    chosen = context if context is not None else min(curves)
    if chosen not in curves:
        raise ValueError(f"{path} has no curve at context {chosen}: it has {', '.join(map(str, sorted(curves)))}")
    if 0 not in curves[chosen]:
        raise ValueError(f"{path}: the curve at context {chosen} has no plain step (chain 0)")
    return dict(sorted(curves[chosen].items())), chosen


def cost(curve: dict[int, float], nodes: int) -> float:
    """ms of a verify of ``nodes`` nodes: the measured size, else a line between the two around it
    (beyond the largest, the largest's cost per node carried on)."""
    if nodes in curve:
        return curve[nodes]
    sizes = sorted(curve)
    below = max((s for s in sizes if s < nodes), default=sizes[0])
    above = min((s for s in sizes if s > nodes), default=None)
    if above is None:
        return curve[below] * nodes / below if below else curve[below]
    return curve[below] + (curve[above] - curve[below]) * (nodes - below) / (above - below)


def read_trace(path: str | Path) -> list[dict]:
    return [json.loads(line) for line in Path(path).read_text().splitlines() if line.strip()]


def project(steps: list[dict], curve: dict[int, float], *, drafting: bool = True) -> dict[str, dict]:
    """Per method: tokens, steps, projected ms, plain ms for the same tokens, and the speedup."""
    out: dict[str, dict] = {}
    for s in steps:
        m = out.setdefault(s["method"], {"tokens": 0, "steps": 0, "ms": 0.0, "accepted_by": defaultdict(int)})
        m["tokens"] += s["tokens"]
        m["steps"] += 1
        # drafting time where something was drafted (a step with no drafts pays what plain decoding pays)
        m["ms"] += cost(curve, s["nodes"]) + (s.get("draft_ms", 0.0) if drafting and s["nodes"] else 0.0)
        for source, n in (s.get("sources") or {}).items():
            m["accepted_by"][source] += n
    for m in out.values():
        m["plain_ms"] = m["tokens"] * curve[0]
        m["speedup"] = m["plain_ms"] / m["ms"] if m["ms"] else None
        m["tau"] = m["tokens"] / m["steps"] if m["steps"] else None
        m["accepted_by"] = dict(m["accepted_by"])
    return out


def run(args: argparse.Namespace) -> int:
    curve, context = load_costs(args.costs, args.context)
    projected = project(read_trace(args.trace), curve, drafting=args.drafting == "measured")
    print(
        f"PROJECTION (not measured): acceptance from {args.trace}, step costs from {args.costs} at context "
        f"{context} (plain step {curve[0]:.2f} ms); drafting {'as measured here' if args.drafting == 'measured' else 'free'}; "
        "prompts left out"
    )
    print("| method | tokens | tau | projected tokens/s | plain tokens/s | projected speedup |")
    print("|---|---:|---:|---:|---:|---:|")
    for method, m in projected.items():
        print(
            f"| {method} | {m['tokens']} | {m['tau']:.2f} | {m['tokens'] / m['ms'] * 1000:.1f} | "
            f"{1000 / curve[0]:.1f} | {m['speedup']:.2f}x |"
        )
    return 0
