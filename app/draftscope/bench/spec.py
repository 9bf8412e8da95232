"""``draftscope bench spec``: Spec-Bench-format questions, every method on the same prompts in
one process, greedy. Prints per category and overall: tau (tokens per target forward), tokens/s,
speedup over Hugging Face ``generate``, and whether the output equals the baseline's.

Methods: ``hf`` (baseline), ``hf-pld`` (HF prompt lookup), ``hf-assisted`` (with --draft-model),
ours: ``plain``, ``retrieval``, ``context``, ``composite`` (every drafter at hand: retrieval,
context and, with --draft-model, the model), ``model`` (with --draft-model), and ``oracle``
(drafts = the baseline's answer: the ceiling). ``--code-prompts N`` adds N HumanEval-style
function-writing prompts (our own, category "code").
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import time
from collections import defaultdict
from pathlib import Path

DEFAULT_QUESTIONS = Path(__file__).resolve().parents[3] / ".." / "shared" / "bench" / "spec_bench_question.jsonl"
CODE_PROMPTS = Path(__file__).with_name("code_prompts.jsonl")
ALL_METHODS = ["hf", "hf-pld", "hf-assisted", "plain", "retrieval", "context", "composite", "model", "oracle"]


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--questions", default=os.environ.get("DRAFTSCOPE_SPEC_BENCH", str(DEFAULT_QUESTIONS)),
                   help="Spec-Bench question file (JSONL with question_id, category, turns)")
    p.add_argument("--per-category", type=int, default=1, help="questions per category (first turn of each)")
    p.add_argument("--categories", default="", help="comma-separated subset of categories")
    p.add_argument("--max-new-tokens", type=int, default=128)
    p.add_argument("--model", default="default")
    p.add_argument("--datastore", default=None, help="index for retrieval (default: the default chat datastore)")
    p.add_argument("--draft-model", default=None, help="a small model for hf-assisted and our model drafter")
    p.add_argument("--methods", default=",".join(ALL_METHODS))
    p.add_argument("--budget", type=int, default=None, help="draft nodes per step (default: adaptive)")
    p.add_argument("--code-prompts", type=int, default=0, help="also this many HumanEval-style code prompts")
    p.add_argument("--device", default=None)
    p.add_argument("--dtype", default=None, help="float32, bfloat16 or float16 (default: as the app picks; every "
                   "method runs in the same dtype)")
    p.add_argument("--json", dest="json_out", default=None)
    p.add_argument("--markdown", default=None)


def load_questions(path: str, per_category: int, categories: set[str]) -> list[dict]:
    if not Path(path).is_file():
        raise FileNotFoundError(f"question file not found: {path} (pass --questions)")
    by_cat: dict[str, list[dict]] = defaultdict(list)
    with open(path, encoding="utf-8") as f:
        for line in f:
            if line.strip():
                q = json.loads(line)
                if (not categories or q["category"] in categories) and len(by_cat[q["category"]]) < per_category:
                    by_cat[q["category"]].append(q)
    return [q for qs in by_cat.values() for q in qs]


def run(args: argparse.Namespace) -> int:
    import torch

    from draftscope.datastore.default import default_datastore_path
    from draftscope.engine.drafters.factory import setup_drafters
    from draftscope.engine.drafters.oracle import OracleDrafter
    from draftscope.engine.engine import Engine, GenerationRequest
    from draftscope.engine.loader import load_draft_model

    methods = [m for m in args.methods.split(",") if m]
    if not args.draft_model:
        methods = [m for m in methods if m not in ("hf-assisted", "model")]
    questions = load_questions(args.questions, args.per_category, {c for c in args.categories.split(",") if c})
    if args.code_prompts:
        questions += load_questions(str(CODE_PROMPTS), args.code_prompts, set())
    datastore = Path(args.datastore) if args.datastore else default_datastore_path(args.model)
    if any(m in methods for m in ("retrieval", "composite")) and not datastore.is_file():
        raise FileNotFoundError(f"datastore not found: {datastore} (build it with `draftscope datastore build-default`)")

    engine = Engine.load(args.model, device=args.device, dtype=args.dtype)
    model, tok = engine.model, engine.tokenizer
    draft = load_draft_model(args.draft_model, engine).model if args.draft_model else None
    print(f"draftscope bench spec: {engine.name} on {engine.device} ({engine.dtype}: {engine.dtype_reason}), "
          f"draft model {args.draft_model or 'none'}, {len(questions)} questions, "
          f"max {args.max_new_tokens} new tokens, methods {', '.join(methods)}")
    print(f"machine: {platform.machine()}, {os.cpu_count()} cores, torch {torch.__version__}, {time.strftime('%Y-%m-%d')}; "
          f"verify cost ms by tree size: { {k: round(v * 1000, 1) for k, v in engine.verify_costs.items()} }")

    def hf(ids, **kw):
        t0 = time.perf_counter()
        out = model.generate(torch.tensor([ids], device=engine.device), max_new_tokens=args.max_new_tokens,
                             do_sample=False, pad_token_id=tok.eos_token_id, **kw)
        return out[0, len(ids):].tolist(), time.perf_counter() - t0, None

    def ours(ids, drafters):
        t0 = time.perf_counter()
        final = list(engine.generate(GenerationRequest(prompt_ids=ids, max_new_tokens=args.max_new_tokens,
                                                       drafters=drafters, budget=args.budget)))[-1]
        if final.finish_reason == "error":
            raise RuntimeError(final.error)
        return final.token_ids, time.perf_counter() - t0, final.stats.steps

    warm = engine.encode_chat([{"role": "user", "content": "Hi"}])
    hf(warm)
    ours(warm, [])

    rows = []
    for qi, q in enumerate(questions):
        ids = engine.encode_chat([{"role": "user", "content": q["turns"][0]}])
        base_ids, base_t, _ = hf(ids)
        results = {"hf": (base_ids, base_t, None)}
        for m in methods:
            if m == "hf":
                continue
            if m == "hf-pld":
                results[m] = hf(ids, prompt_lookup_num_tokens=10)
            elif m == "hf-assisted":
                results[m] = hf(ids, assistant_model=draft)
            else:
                if m == "oracle":
                    drafters = [OracleDrafter(base_ids, len(ids))]
                else:
                    every = ["retrieval", "context"] + (["model"] if draft is not None else [])
                    names = {"plain": [], "composite": every}.get(m, [m])
                    drafters = setup_drafters(",".join(names) or "none", datastore=datastore, draft_model=draft,
                                              eos_token_id=tok.eos_token_id).make()
                results[m] = ours(ids, drafters)
        for m, (out, secs, steps) in results.items():
            rows.append({"question_id": q["question_id"], "category": q["category"], "method": m, "tokens": len(out),
                         "seconds": secs, "steps": steps, "equal": out == base_ids})
        line = ", ".join(f"{m} {len(r[0]) / r[1]:.1f}" for m, r in results.items())
        print(f"[{qi + 1}/{len(questions)}] {q['category']}: tok/s {line}", flush=True)

    table = summarise(rows, methods)
    text = format_table(table, methods)
    print(text)
    if args.json_out:
        Path(args.json_out).write_text(json.dumps({"rows": rows, "summary": table}, indent=2))
    if args.markdown:
        Path(args.markdown).write_text(text + "\n")
    return 0


def summarise(rows: list[dict], methods: list[str]) -> dict:
    groups: dict[str, list[dict]] = defaultdict(list)
    for r in rows:
        groups[r["category"]].append(r)
        groups["overall"].append(r)
    out = {}
    for cat, rs in groups.items():
        base_tps = _tps([r for r in rs if r["method"] == "hf"])
        out[cat] = {}
        for m in methods:
            mr = [r for r in rs if r["method"] == m]
            if not mr:
                continue
            tps = _tps(mr)
            steps = [r["steps"] for r in mr if r["steps"]]
            out[cat][m] = {
                "tokens_per_s": tps,
                "speedup": tps / base_tps if base_tps else None,
                "tau": sum(r["tokens"] for r in mr if r["steps"]) / sum(steps) if steps else None,
                "equal": sum(r["equal"] for r in mr) / len(mr),
            }
    return out


def _tps(rows: list[dict]) -> float:
    secs = sum(r["seconds"] for r in rows)
    return sum(r["tokens"] for r in rows) / secs if secs else 0.0


def format_table(table: dict, methods: list[str]) -> str:
    head = "| category | " + " | ".join(methods) + " |"
    lines = [head, "|" + "---|" * (len(methods) + 1)]
    cats = [c for c in table if c != "overall"] + ["overall"]
    for cat in cats:
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
