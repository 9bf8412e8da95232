"""What coupling costs a draft model: the seeded rule (drafts chosen with the target's keyed
Gumbel noise, accepted when equal to the target's token) against the previous rejection rule
(drafts sampled independently, accepted with min(1, p/q)), same target, draft model, prompts,
seeds and budget.

The previous rule lives in an older checkout (the commit before issue 23's change), so each rule
runs in its own worker process that loads the models once; prompts alternate between the two, the
one that goes first alternating too.

    git worktree add /tmp/old b0e362c && cp app/draftscope/_retriever*.so /tmp/old/app/draftscope/
    python scripts/bench_coupling.py --old-tree /tmp/old --model qwen2.5-coder-1.5b \
        --draft-model qwen2.5-coder-0.5b --temperatures 0.7,1 --prompts 8

Prints, per temperature and rule: accepted draft tokens per step, acceptance (accepted over
drafted tokens), tau (tokens per step) and decode tokens/s; plain decoding's tokens/s (this
checkout) for reference.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent


def worker(args) -> None:
    """Answer requests read as JSON lines on stdin with whatever draftscope is on sys.path."""
    import inspect

    import torch

    from draftscope.drafters.draft_model import load_draft_model
    from draftscope.drafters.model_drafter import ModelDrafter
    from draftscope.engine.engine import Engine, GenerationRequest
    from draftscope.engine.sampling import SamplingParams

    torch.set_num_threads(args.threads)
    # both rules on torch (the previous rule's checkout has no other backend)
    on_torch = {"backend": "torch"} if "backend" in inspect.signature(Engine.load).parameters else {}
    engine = Engine.load(args.model, dtype=args.dtype, measure=False, **on_torch)
    draft = load_draft_model(args.draft_model, engine, dtype=args.dtype).model
    eos = engine.tokenizer.eos_token_id
    print(json.dumps({"ready": True, "dtype": str(engine.dtype)}), flush=True)
    for line in sys.stdin:
        job = json.loads(line)
        prompt = engine.encode_chat([{"role": "user", "content": job["prompt"]}])
        drafters = [ModelDrafter(draft, max_tokens=args.budget, eos_token_id=eos)] if job["drafts"] else []
        request = GenerationRequest(
            prompt_ids=prompt,
            max_new_tokens=args.max_new_tokens,
            drafters=drafters,
            budget=args.budget if job["drafts"] else None,
            sampling=SamplingParams(temperature=job["temperature"], seed=job["seed"]),
        )
        events = list(engine.generate(request))
        steps, final = events[:-1], events[-1]
        print(
            json.dumps(
                {
                    "steps": len(steps),
                    "tokens": final.stats.tokens,
                    "accepted": sum(s.accepted for s in steps),
                    "proposed": sum(s.proposed for s in steps),
                    "decode_tps": final.stats.decode_tokens_per_second,
                    "error": final.error,
                }
            ),
            flush=True,
        )


class Worker:
    def __init__(self, tree: Path, args) -> None:
        env = dict(os.environ, PYTHONPATH=str(tree / "app"))
        cmd = [
            sys.executable,
            str(HERE / "bench_coupling.py"),
            "--worker",
            "--model",
            args.model,
            "--draft-model",
            args.draft_model,
            "--budget",
            str(args.budget),
            "--max-new-tokens",
            str(args.max_new_tokens),
            "--threads",
            str(args.threads),
        ] + (["--dtype", args.dtype] if args.dtype else [])
        self.proc = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=env)
        self.info = self.read()

    def read(self) -> dict:
        line = self.proc.stdout.readline()
        if not line:
            raise RuntimeError("a worker ended early (see its error above)")
        return json.loads(line)

    def ask(self, **job) -> dict:
        self.proc.stdin.write(json.dumps(job) + "\n")
        self.proc.stdin.flush()
        return self.read()

    def close(self) -> None:
        self.proc.stdin.close()
        self.proc.wait()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--old-tree", type=Path, help="a checkout with the previous (rejection) rule")
    ap.add_argument("--model", default="qwen2.5-coder-1.5b")
    ap.add_argument("--draft-model", default="qwen2.5-coder-0.5b")
    ap.add_argument("--temperatures", default="0.7,1")
    ap.add_argument("--prompts", type=int, default=8)
    ap.add_argument(
        "--questions", default=str(HERE.parent / "app" / "draftscope" / "bench" / "spec_bench_question.jsonl")
    )
    ap.add_argument("--max-new-tokens", type=int, default=64)
    ap.add_argument("--budget", type=int, default=5, help="draft tokens per step (the model drafter's chain)")
    ap.add_argument("--threads", type=int, default=os.cpu_count() or 1)
    ap.add_argument("--dtype", default=None)
    ap.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.worker:
        worker(args)
        return
    if args.old_tree is None:
        ap.error("--old-tree is required")

    questions = [json.loads(line) for line in Path(args.questions).read_text().splitlines() if line.strip()]
    # Spread over categories: every k-th question.
    step = max(1, len(questions) // args.prompts)
    prompts = [q["turns"][0] for q in questions[::step][: args.prompts]]
    workers = {
        "coupled (seeded rule)": Worker(HERE.parent, args),
        "rejection (previous rule)": Worker(args.old_tree, args),
    }
    print(
        f"{args.model} + draft {args.draft_model} ({workers['coupled (seeded rule)'].info['dtype']}), "
        f"{platform.machine()} {platform.processor() or ''}, {args.threads} threads, {time.strftime('%Y-%m-%d')}; "
        f"{len(prompts)} Spec-Bench first turns x {args.max_new_tokens} tokens, chain of {args.budget} a step"
    )
    names = list(workers)
    for t in [float(x) for x in args.temperatures.split(",")]:
        totals = {n: {"steps": 0, "tokens": 0, "accepted": 0, "proposed": 0, "tps": []} for n in names + ["plain"]}
        for i, prompt in enumerate(prompts):
            order = names[i % 2 :] + names[: i % 2]
            for name in order:
                r = workers[name].ask(prompt=prompt, temperature=t, seed=1000 + i, drafts=True)
                if r["error"]:
                    raise RuntimeError(f"{name}: {r['error']}")
                for k in ("steps", "tokens", "accepted", "proposed"):
                    totals[name][k] += r[k]
                totals[name]["tps"].append(r["decode_tps"] or 0.0)
            r = workers[names[0]].ask(prompt=prompt, temperature=t, seed=1000 + i, drafts=False)
            for k in ("steps", "tokens"):
                totals["plain"][k] += r[k]
            totals["plain"]["tps"].append(r["decode_tps"] or 0.0)
            print(f"  T={t:g} prompt {i + 1}/{len(prompts)} done", file=sys.stderr, flush=True)
        plain_tps = sum(totals["plain"]["tps"]) / len(prompts)
        print(f"\nT={t:g}: plain decoding {plain_tps:.2f} tokens/s")
        print("| rule | accepted per step | acceptance | tau | tokens/s | vs plain |")
        print("|---|---|---|---|---|---|")
        for name in names:
            s = totals[name]
            tps = sum(s["tps"]) / len(prompts)
            print(
                f"| {name} | {s['accepted'] / max(s['steps'], 1):.3f} | {s['accepted'] / max(s['proposed'], 1):.3f} | "
                f"{s['tokens'] / max(s['steps'], 1):.3f} | {tps:.2f} | {tps / plain_tps:.2f}x |"
            )
    for w in workers.values():
        w.close()


if __name__ == "__main__":
    main()
