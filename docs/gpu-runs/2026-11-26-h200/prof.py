"""Device call 3: why a tree step (bucket 4+) costs ~9 ms more than a plain one on the static cache.
Times bucket 0/4/16/64 verifies under several tree-attention kernels, and profiles eager steps."""
import sys, time
import numpy as np
import torch
import transformers.integrations.sdpa_attention as tsdpa
from torch.nn.attention import SDPBackend as K
from draftscope.bench.gpu import IdsOnly, shape_model, timed
from draftscope.engine import attention
from draftscope.engine.backends import chain_tree, torch_backend_for

dev = torch.device(sys.argv[1] if len(sys.argv) > 1 else "cuda")
shape = sys.argv[2] if len(sys.argv) > 2 else "qwen2.5-1.5b"
dtype = torch.bfloat16 if dev.type == "cuda" else torch.float32
model = shape_model(shape, dev, dtype)
rng = np.random.default_rng(0)
ids = rng.integers(0, 150000, 2048).tolist()
orig_gqa = tsdpa.use_gqa_in_sdpa
PLAIN = [K.FLASH_ATTENTION, K.EFFICIENT_ATTENTION, K.MATH]
variants = {
    "math (now)": ([K.MATH], False),
    "mem-efficient, KV expanded": ([K.EFFICIENT_ATTENTION], True),
    "cuDNN": ([K.CUDNN_ATTENTION], False),
    "cuDNN, KV expanded": ([K.CUDNN_ATTENTION], True),
    "math, KV expanded": ([K.MATH], True),
}
for name, (tree_k, expand) in variants.items():
    try:
        attention.KERNELS["cuda"] = (PLAIN, tree_k)
        tsdpa.use_gqa_in_sdpa = (lambda *a, **k: False) if expand else orig_gqa
        b = torch_backend_for(model, IdsOnly(), cache="static")
        b.start(ids)
        past = b.cached
        row = []
        for n in (0, 1, 4, 16, 64):
            t = chain_tree(rng.integers(0, 150000, n))
            row.append(f"{n}:{timed(lambda: (b.verify(ids[-1], t), b.truncate(past)), dev, 5):.2f}")
        print(f"{name:<28} {b.graphs_note[:60]:<60} ms {' '.join(row)}", flush=True)
        b.close(); del b; torch.cuda.empty_cache() if dev.type == "cuda" else None
    except Exception as e:
        print(f"{name}: FAILED {type(e).__name__}: {str(e)[:200]}", flush=True)
attention.KERNELS["cuda"] = (PLAIN, [K.MATH]); tsdpa.use_gqa_in_sdpa = orig_gqa
b = torch_backend_for(model, IdsOnly(), cache="static", graphs="off")
b.start(ids); past = b.cached
from torch.profiler import profile, ProfilerActivity
acts = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if dev.type == "cuda" else [])
for n in (0, 4):
    t = chain_tree(rng.integers(0, 150000, n))
    for _ in range(3): b.verify(ids[-1], t); b.truncate(past)
    with profile(activities=acts) as p:
        for _ in range(5):
            b.verify(ids[-1], t); b.truncate(past)
        torch.cuda.synchronize() if dev.type == "cuda" else None
    key = "device_time_total" if dev.type == "cuda" else "cpu_time_total"
    print(f"\n=== eager steps, chain {n} (bucket {0 if n == 0 else 4}), 5 steps ===")
    print(p.key_averages().table(sort_by=key, row_limit=14, max_name_column_width=60))
