"""How fast ``draftscope datastore distill`` generates answers, by batch size.

    python scripts/bench_distill.py [--model smollm2-135m] [--prompts-count 32] [--batch-sizes 1,2,4,8,16]
                                    [--max-new-tokens 128] [--rounds 2] [--prompts chat:FILE] [--device cuda]

Every round answers the same K prompts (ShareGPT's first K by default) at each batch size, with
distill's own batching (shortest prompts first, left padded, greedy). The order of the batch sizes
alternates per round (ascending, then descending), so warm-up and drift fall on all of them.
Tokens/s counts answer tokens (end token included): not padding, and not the steps a row keeps
running after its answer ended while the rest of its batch goes on. That is the figure that sets
how long a distill takes. "same as b1" counts answers identical to batch size 1's: batched greedy
differs from single greedy only where two logits (nearly) tie, which low precision makes likelier.
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import time

import torch

from draftscope.datastore.distill import encode_prompt, generate_batch, read_prompts
from draftscope.engine.backends.pytorch.loader import load_model


def parse_args() -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default="smollm2-135m", help="catalogue name, folder, .gguf or hub id")
    ap.add_argument("--prompts", default=None, metavar="chat:FILE", help="default: ShareGPT's user turns")
    ap.add_argument("--prompts-count", type=int, default=32, help="K: prompts answered per batch size and round")
    ap.add_argument("--batch-sizes", default="1,2,4,8,16")
    ap.add_argument("--max-new-tokens", type=int, default=128)
    ap.add_argument("--rounds", type=int, default=2, help="times every batch size runs (order alternating)")
    ap.add_argument("--device", default=None)
    ap.add_argument("--dtype", default=None)
    return ap.parse_args()


def answer_all(
    model, tokenizer, prompt_ids: list[list[int]], batch_size: int, max_new_tokens: int
) -> tuple[list, float]:
    """Answers to all prompts in batches of ``batch_size``, and the seconds it took."""
    started = time.perf_counter()
    answers = []
    for start in range(0, len(prompt_ids), batch_size):
        answers += generate_batch(
            model, tokenizer, prompt_ids[start : start + batch_size], max_new_tokens=max_new_tokens
        )
    if torch.cuda.is_available():
        torch.cuda.synchronize()
    return answers, time.perf_counter() - started


def round_orders(sizes: list[int], rounds: int) -> list[list[int]]:
    return [sizes if r % 2 == 0 else sizes[::-1] for r in range(rounds)]


def main() -> None:
    args = parse_args()
    sizes = [int(s) for s in args.batch_sizes.split(",") if s.strip()]
    loaded = load_model(args.model, device=args.device, dtype=args.dtype)
    model, tokenizer = loaded.model, loaded.tokenizer
    prompts = read_prompts(args.prompts, limit=args.prompts_count)
    prompt_ids = sorted((encode_prompt(tokenizer, p) for p in prompts), key=len)  # as distill orders them
    print(
        f"{loaded.name} on {loaded.device} ({str(loaded.dtype).removeprefix('torch.')}; {loaded.dtype_reason}); "
        f"{platform.machine()}, {os.cpu_count()} cores, torch {torch.__version__}, {time.strftime('%Y-%m-%d')}"
    )
    print(
        f"{len(prompts)} prompts ({min(map(len, prompt_ids))}-{max(map(len, prompt_ids))} tokens), "
        f"at most {args.max_new_tokens} new tokens, {args.rounds} rounds, batch sizes {sizes}"
    )

    generate_batch(model, tokenizer, prompt_ids[:1], max_new_tokens=4)  # warm-up: kernels, allocator
    seconds = {b: [] for b in sizes}
    tokens = {b: [] for b in sizes}
    texts: dict[int, list[str]] = {}
    for order in round_orders(sizes, args.rounds):
        for b in order:
            answers, took = answer_all(model, tokenizer, prompt_ids, b, args.max_new_tokens)
            seconds[b].append(took)
            tokens[b].append(sum(g.tokens for g in answers))
            texts.setdefault(b, [g.text for g in answers])
            print(f"  batch {b:>3}: {tokens[b][-1]:,} tokens in {took:.2f} s", flush=True)

    reference = texts.get(1)
    print(f"\n{'batch':>5}  {'tokens/s':>9}  {'per round':>17}  {'s/round':>8}  {'same as b1':>10}")
    for b in sizes:
        rates = [t / s for t, s in zip(tokens[b], seconds[b])]
        same = "-" if reference is None else f"{sum(x == y for x, y in zip(texts[b], reference))}/{len(reference)}"
        print(
            f"{b:>5}  {sum(tokens[b]) / sum(seconds[b]):>9,.1f}  {min(rates):>8,.1f}-{max(rates):<8,.1f}  "
            f"{statistics.median(seconds[b]):>8.2f}  {same:>10}"
        )


if __name__ == "__main__":
    main()
