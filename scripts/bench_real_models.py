"""Figures for a catalogue model on this machine (docs/benchmarks.md, "Real models"): load time
and peak memory (cached weights), plain decoding tokens/s against Hugging Face generate
(alternating runs), the verify cost curve with the usual and the transposed linear layout, and
the bf16/fp32 speed ratio that decides the dtype.

    python scripts/bench_real_models.py --model qwen2.5-coder-1.5b [--dtype float32] [--tokens 48]
"""

from __future__ import annotations

import argparse
import os
import platform
import time

import torch


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--model", default="qwen2.5-coder-1.5b")
    p.add_argument("--dtype", default=None)
    p.add_argument("--tokens", type=int, default=48)
    p.add_argument("--repeats", type=int, default=2)
    p.add_argument("--no-verify-curve", action="store_true", help="skip the verify cost curve (slow in emulated bf16)")
    args = p.parse_args()

    from draftscope.engine.backends.pytorch import cpu_linear, precision
    from draftscope.engine.budget import measure_verify_costs
    from draftscope.engine.engine import Engine, GenerationRequest
    from draftscope.sysinfo import peak_rss_mb

    print(
        f"machine: {platform.processor() or platform.machine()}, {os.cpu_count()} cores, torch {torch.__version__}, "
        f"{time.strftime('%Y-%m-%d')}"
    )
    print(
        f"bf16/fp32 matmul speed here: bf16 is {precision.bf16_speed_ratio():.2f}x fp32's speed; "
        f"CPU features: {precision.cpu_bf16_features()}"
    )
    t0 = time.perf_counter()
    engine = Engine.load(args.model, dtype=args.dtype, measure=False)
    load_s = time.perf_counter() - t0
    print(
        f"load: {load_s:.1f} s (first load of a dtype converts the GGUF; later ones read the cache), peak RSS {peak_rss_mb():,.0f} MiB, "
        f"{engine.dtype}: {engine.dtype_reason}"
    )

    model, tok = engine.model, engine.tokenizer
    ids = engine.encode_chat([{"role": "user", "content": "Explain what a hash map is and write a tiny example."}])
    rates = {"ours": [], "hf": []}
    for _ in range(args.repeats):
        t = time.perf_counter()
        out = model.generate(
            torch.tensor([ids]),
            max_new_tokens=args.tokens,
            min_new_tokens=args.tokens,
            do_sample=False,
            pad_token_id=tok.eos_token_id,
        )
        rates["hf"].append((out.shape[1] - len(ids)) / (time.perf_counter() - t))
        final = list(engine.generate(GenerationRequest(prompt_ids=ids, max_new_tokens=args.tokens, drafters=[])))[-1]
        rates["ours"].append(final.stats.tokens_per_second)
    print(
        f"plain decoding tokens/s (prompt {len(ids)} tokens, {args.tokens} new, prefill included): "
        + ", ".join(f"{k} {max(v):.2f}" for k, v in rates.items())
    )

    if args.no_verify_curve:
        print(f"peak RSS at the end: {peak_rss_mb():,.0f} MiB")
        return
    sizes = (0, 1, 2, 4, 8, 16, 32, 64)
    layouts = {}
    transposed = [m for m in model.modules() if isinstance(m, torch.nn.Linear) and "forward" in m.__dict__]
    for name in ("usual", "transposed") if transposed else ("usual",):
        for m in transposed:
            if name == "usual":
                m.__dict__.pop("forward", None)
            else:
                m.forward = cpu_linear._transposed_forward.__get__(m)
        layouts[name] = measure_verify_costs(model, engine.device, sizes=sizes)
    print("verify cost, ms for one forward of 1 + n tokens over a 256-token cache:")
    print("| layout | " + " | ".join(f"n={n}" for n in sizes) + " |")
    print("|---" * (len(sizes) + 1) + "|")
    for name, costs in layouts.items():
        print(f"| {name} | " + " | ".join(f"{costs[n] * 1000:.0f}" for n in sizes) + " |")
    print(f"peak RSS at the end: {peak_rss_mb():,.0f} MiB")


if __name__ == "__main__":
    main()
