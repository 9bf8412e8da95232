"""``bench spec``'s tables: per category and method, tokens per second over the whole answer and
its speedup, tau, whether the answer equals the baseline's; the time to the first token and the
writing rate (tokens after the first over the time after it, as llama-server's prompt_ms and
predicted_ms split them); each method's worst prompt; drafting's own cost."""

from __future__ import annotations

from collections import defaultdict


def summarise(rows: list[dict], methods: list[str], base: str = "hf") -> dict:
    out = {}
    for cat, rs in _groups(rows).items():
        base_rows = [r for r in rs if r["method"] == base]
        base_tps, base_writing, base_first = _tps(base_rows), _writing(base_rows), _first(base_rows)
        out[cat] = {}
        for m in methods:
            mr = [r for r in rs if r["method"] == m]
            if not mr:
                continue
            tps, writing, first = _tps(mr), _writing(mr), _first(mr)
            steps = [r["steps"] for r in mr if r["steps"]]
            out[cat][m] = {
                "tokens_per_s": tps,
                "speedup": tps / base_tps if base_tps else None,
                "tau": sum(r["tokens"] for r in mr if r["steps"]) / sum(steps) if steps else None,
                "equal": sum(r["equal"] for r in mr) / len(mr),
                "first_token_s": first,
                "first_token_ratio": first / base_first if first is not None and base_first else None,
                "writing_per_s": writing,
                "writing_speedup": writing / base_writing if writing is not None and base_writing else None,
            }
    return out


def _groups(rows: list[dict]) -> dict[str, list[dict]]:
    groups: dict[str, list[dict]] = defaultdict(list)
    for r in rows:
        groups[r["category"]].append(r)
        if r.get("turn", 1) == 2:
            groups["second turns"].append(r)
        groups["overall"].append(r)
    return groups


def _tps(rows: list[dict]) -> float:
    secs = sum(r["seconds"] for r in rows)
    return sum(r["tokens"] for r in rows) / secs if secs else 0.0


def _writing(rows: list[dict]) -> float | None:
    """Tokens after the first over the time after the first, over every answer that can say."""
    timed = [r for r in rows if r.get("writing_s")]
    secs = sum(r["writing_s"] for r in timed)
    return sum(r["tokens"] - r["first_tokens"] for r in timed) / secs if secs else None


def _first(rows: list[dict]) -> float | None:
    """Mean seconds to the first token."""
    timed = [r["first_s"] for r in rows if r.get("first_s") is not None]
    return sum(timed) / len(timed) if timed else None


def format_table(table: dict, methods: list[str]) -> str:
    head = "| category | " + " | ".join(methods) + " |"
    lines = [head, "|" + "---|" * (len(methods) + 1)]
    for cat in _ordered(table):
        cells = []
        for m in methods:
            v = table[cat].get(m)
            if v is None:
                cells.append("–")
                continue
            tau = f"τ {v['tau']:.2f}, " if v["tau"] else ""
            eq = "" if v["equal"] == 1 else f", same {v['equal']:.0%}"
            cells.append(f"{tau}{v['tokens_per_s']:.1f}/s, {v['speedup']:.2f}x{eq}")
        lines.append(f"| {cat} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def timing_table(table: dict, methods: list[str], base: str) -> str:
    """Time to the first token and the writing rate, each against ``base``'s on the same prompts."""
    timed = [m for m in methods if table.get("overall", {}).get(m, {}).get("writing_per_s")]
    if not timed:
        return ""
    lines = [
        f"first token (s, mean) and writing rate (tokens/s after the first), each over {base}",
        "",
        "| category | " + " | ".join(timed) + " |",
        "|" + "---|" * (len(timed) + 1),
    ]
    for cat in _ordered(table):
        cells = []
        for m in timed:
            v = table[cat].get(m) or {}
            if v.get("writing_per_s") is None:
                cells.append("–")
                continue
            first = f"{v['first_token_s']:.2f} s ({v['first_token_ratio']:.2f}x)" if v.get("first_token_ratio") else "–"
            writing = f"{v['writing_per_s']:.1f}/s ({v['writing_speedup']:.2f}x)" if v.get("writing_speedup") else "–"
            cells.append(f"{first}, {writing}")
        lines.append(f"| {cat} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def _ordered(table: dict) -> list[str]:
    return [c for c in table if c not in ("overall", "second turns")] + [
        c for c in ("second turns", "overall") if c in table
    ]


def against(rows: list[dict], base: str) -> list[dict]:
    """The rows with each speedup taken over ``base`` on the same prompt and turn."""
    base_rate = {
        (r["question_id"], r.get("turn", 1)): r["tokens"] / r["seconds"]
        for r in rows
        if r["method"] == base and r["seconds"]
    }
    out = []
    for r in rows:
        ref = base_rate.get((r["question_id"], r.get("turn", 1)))
        speedup = (r["tokens"] / r["seconds"]) / ref if ref and r["seconds"] else None
        out.append(dict(r, speedup=speedup))
    return out


def worst_prompts(rows: list[dict], methods: list[str], base: str = "hf") -> str:
    """Each method's slowest prompt against the baseline on the same prompt."""
    lines = [f"| method | worst prompt (speedup over {base}) | prompts below 0.95x |", "|---|---|---|"]
    for m in methods:
        mine = [r for r in rows if r["method"] == m and r["speedup"] is not None]
        if m == base or not mine:
            continue
        worst = min(mine, key=lambda r: r["speedup"])
        below = sum(r["speedup"] < 0.95 for r in mine)
        lines.append(
            f"| {m} | {worst['speedup']:.2f}x ({worst['category']} #{worst['question_id']}, turn "
            f"{worst.get('turn', 1)}) | {below} of {len(mine)} |"
        )
    return "\n".join(lines)


def draft_costs(rows: list[dict], methods: list[str]) -> str:
    """Mean drafting milliseconds per step that drafted, per method (the head's cost for recurrent)."""
    lines = []
    for m in methods:
        ms = [r["draft_ms"] for r in rows if r["method"] == m and r.get("draft_ms") is not None]
        if ms:
            lines.append(f"| {m} | {sum(ms) / len(ms):.1f} |")
    return "\n\n| method | drafting ms per step |\n|---|---|\n" + "\n".join(lines) if lines else ""
