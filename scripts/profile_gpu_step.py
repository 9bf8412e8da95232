"""Where a plain step and a 64-node tree step spend their time on a card (issue 53, item 2): the
static cache's captured steps (as the app runs them) timed and profiled with torch.profiler at one
cache length, kernels summed by name; then the same steps eager, to show what the graphs remove.

    python scripts/profile_gpu_step.py [--shape qwen2.5-1.5b] [--context 2000] [--attention sdpa|flex]
                                       [--compiled on|off]
"""

from __future__ import annotations

import argparse

import numpy as np


def profile_steps(backend, ids, trees: dict, device, rows: int) -> None:
    import torch
    from torch.profiler import ProfilerActivity, profile

    from draftscope.bench.gpu_report import timed

    past = backend.cached
    for name, tree in trees.items():
        ms = timed(lambda tree=tree: (backend.verify(ids[-1], tree), backend.truncate(past)), device, 10)
        with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
            for _ in range(5):
                backend.verify(ids[-1], tree)
                backend.truncate(past)
            torch.cuda.synchronize(device)
        print(f"\n=== {name}: {ms:.3f} ms a step (median of 10); 5 steps profiled ===", flush=True)
        print(
            prof.key_averages().table(sort_by="device_time_total", row_limit=rows, max_name_column_width=70), flush=True
        )


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--shape", default="qwen2.5-1.5b")
    p.add_argument("--context", type=int, default=2000)
    p.add_argument("--attention", default="sdpa", choices=("sdpa", "flex", "auto"))
    p.add_argument("--compiled", default="off", choices=("on", "off"))
    p.add_argument("--rows", type=int, default=18)
    args = p.parse_args()

    import torch

    from draftscope.bench.gpu_models import IdsOnly, shape_model, wide_tree
    from draftscope.engine.backends import chain_tree, torch_backend_for

    device = torch.device("cuda")
    model = shape_model(args.shape, device, torch.bfloat16)
    rng = np.random.default_rng(0)
    ids = rng.integers(0, 150000, args.context).tolist()
    trees = {
        "plain step (chain 0)": chain_tree(rng.integers(0, 150000, 0)),
        "wide 64 (8 x chain of 8)": wide_tree(rng, 150000),
    }
    graphed = torch_backend_for(
        model, IdsOnly(), cache="static", attention=args.attention, compiled=args.compiled == "on"
    )
    print(f"{args.shape}, context {args.context}: {graphed.describe()}", flush=True)
    graphed.start(ids)
    profile_steps(graphed, ids, trees, device, args.rows)
    graphed.close()
    del graphed
    torch.cuda.empty_cache()
    eager = torch_backend_for(model, IdsOnly(), cache="static", graphs="off")
    print(f"\n--- the same steps eager: {eager.describe()}", flush=True)
    eager.start(ids)
    profile_steps(eager, ids, trees, device, args.rows)


if __name__ == "__main__":
    main()
