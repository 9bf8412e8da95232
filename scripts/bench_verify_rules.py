"""Accepted draft tokens per step under each exact verification rule for sampled drafts
(issue 12): "model" (min(1, p/q) first, then a deterministic second chance) and
"deterministic" (accept with p(x), for every draft). Same prompts, seeds and drafters for both
rules, which one runs first alternated per prompt.

    python scripts/bench_verify_rules.py [--model default] [--draft-temperature 1.3] [--prompts 6]

The draft model is by default the target's first 8 layers (its q differs from p), mixed with
context drafts and, when the default datastore is built, retrieval drafts.
"""

from __future__ import annotations

import argparse
import os
import platform
import time
from collections import defaultdict

import torch

from draftscope.bench.lossless import DEFAULT_PROMPTS, draft_model_from
from draftscope.datastore.default import default_datastore_path
from draftscope.engine.drafters.factory import drafter_maker
from draftscope.engine.engine import Engine, GenerationRequest
from draftscope.engine.sampling import SamplingParams

RULES = ("model", "deterministic")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default="default")
    ap.add_argument("--draft-model", default="self:8", help="'self', 'self:N' (the target's first N layers) or a model")
    ap.add_argument("--draft-temperature", type=float, default=None)
    ap.add_argument("--temperatures", default="0.7,1")
    ap.add_argument("--prompts", type=int, default=6)
    ap.add_argument("--max-new-tokens", type=int, default=96)
    ap.add_argument("--budget", type=int, default=8)
    ap.add_argument("--dtype", default=None)
    args = ap.parse_args()

    engine = Engine.load(args.model, dtype=args.dtype, measure=False)
    datastore = default_datastore_path()
    names = (["retrieval"] if datastore.is_file() else []) + ["context", "model"]
    make = drafter_maker(names, datastore=datastore, draft_model=draft_model_from(args.draft_model, engine), eos_token_id=engine.tokenizer.eos_token_id,
                         draft_temperature=args.draft_temperature)
    prompts = [engine.encode_chat([{"role": "user", "content": DEFAULT_PROMPTS[i % len(DEFAULT_PROMPTS)]}])
               for i in range(args.prompts)]
    print(f"{engine.name} ({str(engine.dtype).replace('torch.', '')}) on {platform.machine()}, {os.cpu_count()} cores, "
          f"{time.strftime('%Y-%m-%d')}; drafters {'+'.join(names)}, draft {args.draft_model} at T={args.draft_temperature or 'answer'}, budget {args.budget}, "
          f"{args.prompts} prompts x {args.max_new_tokens} tokens")
    for t in [float(x) for x in args.temperatures.split(",")]:
        totals = defaultdict(lambda: [0, 0, 0])  # accepted draft tokens, steps, tokens
        for i, prompt in enumerate(prompts):
            order = RULES[i % 2:] + RULES[: i % 2]  # alternate which rule runs first
            for rule in order:
                req = GenerationRequest(prompt_ids=prompt, max_new_tokens=args.max_new_tokens, drafters=make(),
                                        budget=args.budget, verify_rule=rule,
                                        sampling=SamplingParams(temperature=t, seed=1000 + i))
                events = list(engine.generate(req))
                steps = events[:-1]
                totals[rule][0] += sum(s.accepted for s in steps)
                totals[rule][1] += len(steps)
                totals[rule][2] += events[-1].stats.tokens
        for rule in RULES:
            acc, steps, toks = totals[rule]
            print(f"T={t:g} rule={rule:13s} accepted draft tokens per step {acc / max(steps, 1):.3f}  "
                  f"tau {toks / max(steps, 1):.3f}  ({acc} accepted in {steps} steps)")


if __name__ == "__main__":
    torch.manual_seed(0)
    main()
