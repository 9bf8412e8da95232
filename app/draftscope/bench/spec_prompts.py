"""``bench spec``'s report prompt by prompt, for the grounded runs (answers that copy their context):
each method's writing rate (tokens after the first over the time after it), τ (tokens per step),
the longest accepted run (the most draft tokens accepted in one step) and, for the whole-file
rewrites, the writing rate as a share of the batch curve's ceiling (what a fully accepted draft of
the backend's largest sensible batch writes: bench/batch_curve.py)."""

from __future__ import annotations

FILE_CATEGORIES = ("grounded-file",)  # whole files given back: measured against the ceiling


def longest_run(steps) -> int:
    """The most draft tokens accepted in one step (StepEvent.accepted) over an answer's steps."""
    return max((step.accepted for step in steps), default=0)


def wants_prompt_table(rows: list[dict]) -> bool:
    """Prompt by prompt only for the grounded prompts (a Spec-Bench run's 130 would drown the tables)."""
    return any(r["category"].startswith("grounded") for r in rows)


def prompt_table(rows: list[dict], methods: list[str], ceiling: tuple[int, float] | None, source: str = "") -> str:
    """Each prompt's line per method, in the order the prompts ran; ``ceiling``: (B, tokens/s) of
    the batch curve (None: none measured), from ``source``."""
    if ceiling is None:
        head = "batch curve's ceiling: not measured (no llama-bench and no verify costs)"
    else:
        size, rate = ceiling
        head = (
            f"batch curve's ceiling: {rate:.1f} tokens/s (a fully accepted {size}-token forward, {source}); "
            f"the whole-file rewrites' ({', '.join(FILE_CATEGORIES)}) writing rates as a share of it"
        )
    lines = [
        head,
        "",
        "| prompt | method | tokens | writing rate (tokens/s after the first) | τ | longest accepted run | of the ceiling |",
        "|---|---|---:|---:|---:|---:|---:|",
    ]
    order = {m: i for i, m in enumerate(methods)}
    prompts = list(dict.fromkeys((r["question_id"], r.get("turn", 1)) for r in rows))
    for question, turn in prompts:
        mine = [r for r in rows if (r["question_id"], r.get("turn", 1)) == (question, turn) and r["method"] in order]
        for r in sorted(mine, key=lambda r: order[r["method"]]):
            lines.append(_line(r, ceiling, f"{question}{' (turn 2)' if turn == 2 else ''}"))
    return "\n".join(lines)


def _line(row: dict, ceiling: tuple[int, float] | None, name: str) -> str:
    writing = writing_rate(row)
    tau = row["tokens"] / row["steps"] if row.get("steps") else None
    run = row.get("longest_run")
    share = writing / ceiling[1] if writing and ceiling and row["category"] in FILE_CATEGORIES else None
    cells = [
        name,
        row["method"],
        str(row["tokens"]),
        f"{writing:.1f}" if writing else "–",
        f"{tau:.2f}" if tau else "–",
        "–" if run is None else str(run),
        f"{share:.0%}" if share is not None else "–",
    ]
    return "| " + " | ".join(cells) + " |"


def writing_rate(row: dict) -> float | None:
    """Tokens after the first over the seconds after the first (None where the method cannot say)."""
    if not row.get("writing_s"):
        return None
    return (row["tokens"] - row["first_tokens"]) / row["writing_s"]
