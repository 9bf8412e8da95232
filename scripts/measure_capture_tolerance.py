"""How far a right kernel's logits drift from the math kernel's in bf16, against the capture check's
tolerance (engine/backends/pytorch/step_graphs.py: 2% of the largest logit). The check's own branching tree, padded,
over each bucket, is run eagerly on the static cache in bf16 twice, once on SDPA's math kernel and
once on the fused kernel the CPU has (flash), and once in fp32; printed: the largest difference over
the largest logit, per bucket. A kernel that is right differs by rounding only.

    python scripts/measure_capture_tolerance.py [--model smollm2-135m]
"""

from __future__ import annotations

import argparse

import numpy as np
import torch


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--model", default="smollm2-135m")
    args = p.parse_args()
    from torch.nn.attention import SDPBackend, sdpa_kernel

    from draftscope.engine.backends.pytorch.loader import load_model
    from draftscope.engine.backends.pytorch.static_cache import BUCKETS, step_layout
    from draftscope.engine.backends.pytorch.step_graphs import CHECK_PROMPT, CHECK_TOLERANCE, check_tree
    from draftscope.engine.backends.pytorch.torch_static import StaticTorchBackend

    runs = {}
    for dtype in ("float32", "bfloat16"):
        loaded = load_model(args.model, device="cpu", dtype=dtype)
        backend = StaticTorchBackend(loaded.model, loaded.tokenizer, graphs="off", first_span=64)
        prompt = [int(t) % backend.vocab for t in CHECK_PROMPT]
        for kernel in (
            ((SDPBackend.MATH,), (SDPBackend.FLASH_ATTENTION,)) if dtype == "bfloat16" else ((SDPBackend.MATH,),)
        ):
            backend.start(prompt)
            past = backend._past
            out = {}
            for padded in BUCKETS:
                tree = check_tree(padded)
                positions, allowed, _ = step_layout(tree, past, padded)
                ids = np.full(padded + 1, prompt[-1], dtype=np.int64)
                ids[1 : len(tree) + 1] = tree.tokens % backend.vocab
                inputs = (
                    torch.from_numpy(ids)[None],
                    torch.from_numpy(past + positions)[None],
                    torch.from_numpy(allowed),
                )
                span = min(s for s in backend.spans if s >= past + padded + 1)
                with torch.inference_mode(), sdpa_kernel(list(kernel)):
                    out[padded] = backend._eager_step(past, *inputs, span=span, rows=len(tree) + 1).logits.float()
            runs[(dtype, kernel[0].name)] = out
    reference = runs[("float32", "MATH")]
    for (dtype, kernel), out in runs.items():
        if dtype == "float32":
            continue
        drift = {
            padded: float((out[padded] - reference[padded]).abs().max() / reference[padded].abs().max())
            for padded in out
        }
        print(
            f"{args.model} {dtype} {kernel} against fp32 math: largest difference / largest logit by tree size: "
            + ", ".join(f"{k}: {v:.2%}" for k, v in drift.items())
            + f" (tolerance {CHECK_TOLERANCE:.0%})"
        )
    bf = [runs[k] for k in runs if k[0] == "bfloat16"]
    if len(bf) == 2:
        drift = {
            padded: float((bf[0][padded] - bf[1][padded]).abs().max() / bf[0][padded].abs().max()) for padded in bf[0]
        }
        print(f"{args.model} bf16 math against bf16 flash: " + ", ".join(f"{k}: {v:.2%}" for k, v in drift.items()))


if __name__ == "__main__":
    main()
