"""What asking llama.cpp for the final hidden states costs (issue 43): plain steps and a 16-node
tree on the same cache with and without them, alternated, medians.

    python scripts/bench_llama_hidden.py [--model qwen2.5-coder-1.5b] [--steps 32]
"""

from __future__ import annotations

import argparse
import statistics
import time

import numpy as np


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--model", default="qwen2.5-coder-1.5b")
    p.add_argument("--steps", type=int, default=32)
    args = p.parse_args()
    from draftscope.draft_tree import DraftTree
    from draftscope.engine.backends import chain_tree, open_backend

    backend = open_backend(args.model, backend="llama.cpp")
    prompt = list(range(1000, 1120))
    backend.start(prompt)
    past = backend.cached
    tree = chain_tree(np.arange(2000, 2016))
    times: dict[tuple[str, bool], list[float]] = {}
    for _ in range(args.steps):
        for name, t in (("plain step", DraftTree.empty()), ("16-node tree", tree)):
            for hidden in (False, True):
                t0 = time.perf_counter()
                backend.verify(prompt[-1], t, want_hidden=hidden)
                times.setdefault((name, hidden), []).append(time.perf_counter() - t0)
                backend.truncate(past)
    for name in ("plain step", "16-node tree"):
        off, on = statistics.median(times[(name, False)]), statistics.median(times[(name, True)])
        print(f"{name}: {off * 1000:.2f} ms without hidden states, {on * 1000:.2f} ms with ({off / on:.3f}x)")
    backend.close()


if __name__ == "__main__":
    main()
