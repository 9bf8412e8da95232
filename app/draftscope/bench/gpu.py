"""``draftscope bench gpu``: what the torch backend's steps cost on this device, in five sections.

1. verify cost curve: one verify of [root] + a chain of 0-64 nodes, and of a 64-node wide tree,
   over caches of each ``--contexts`` length, as ms and as a ratio to the plain (0-node) step;
2. worst step: an answer-like run of 64-node tree steps, every cache length new (as in a
   conversation), committing 3 nodes + the root a step: median, 99th percentile and max;
3. plain decoding vs HF generate: Hugging Face's eager ``generate`` against the engine's plain
   loop (``Engine.generate`` with no drafters), greedy, alternated;
4. oracle limit: the engine with an oracle drafter replaying the plain answer (every draft right)
   at fixed depths and with the adaptive budget: the most drafting can buy here;
5. spec-bench: ``draftscope bench spec`` on the Spec-Bench questions (only with ``--model``).

``--shape`` builds a Qwen2.5-shaped model from its published config with random weights (no
download; the GPU machines have no network), sharpened so that greedy answers are not near-ties
and the oracle's drafts are accepted in bf16 too (see ``shape_model``). It has no tokenizer and needs
none: prompts are seeded random token ids, fed to the engine directly. Random weights measure
costs, not acceptance. Every time is the median of ``--reps`` runs after warm-ups, read after
synchronising the device.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import statistics
import time
from pathlib import Path

import numpy as np

from draftscope.bench.gpu_models import (
    SHAPES,
    SHARPEN,
    IdsOnly,
    WideOracle,
    card_bandwidth,
    shape_model,
    step_bytes,
    wide_tree,
)
from draftscope.core import argtypes

SECTIONS = {
    "verify": "verify cost curve",
    "worst": "worst step",
    "plain": "plain decoding vs HF generate",
    "oracle": "oracle limit",
    "spec-bench": "spec-bench",
}
CHAINS = (0, 1, 2, 4, 8, 16, 32, 64)
WARMUP = 2  # untimed runs before each timed series
WORST_WARMUP = 3  # the first tree steps of section 2, reported on their own
COMMIT = [0, 1, 2]  # nodes kept per worst-step step: a branch's first three, as an answer accepts them
PROMPT_LEN = 128  # random-id prompt of a shape model (sections 3 and 4)
QUESTION = "Explain how a hash table works, with a short example in Python."  # a real model's prompt
ORACLE_DEPTHS = (3, 7, 15)
WIDE = "wide 64 (8 x 8)"  # the oracle configuration whose steps verify 64 nodes
# the app's drafting (auto) against HF's plain and prompt-lookup loops, with our plain loop and the oracle's limit
SPEC_METHODS = "hf,hf-pld,plain,auto,oracle"


def _contexts(text: str) -> list[int]:
    values = [argtypes.positive_int(x) for x in text.split(",") if x.strip()]
    if not values:
        raise argparse.ArgumentTypeError("give at least one context length, e.g. 256,2048")
    return values


def _sections(text: str) -> list[str]:
    chosen = [x.strip() for x in text.split(",") if x.strip()]
    unknown = [x for x in chosen if x not in SECTIONS]
    if unknown or not chosen:
        raise argparse.ArgumentTypeError(
            f"unknown section(s) {', '.join(map(repr, unknown)) or '(none given)'} (choose from {', '.join(SECTIONS)})"
        )
    return [k for k in SECTIONS if k in chosen]  # always in the documented order


def add_arguments(p: argparse.ArgumentParser) -> None:
    _add_model_arguments(p)
    _add_measure_arguments(p)
    _add_backend_arguments(p)
    _add_output_arguments(p)


def _add_model_arguments(p: argparse.ArgumentParser) -> None:
    """What runs: the device, a shape or a real model, and its precision."""
    p.add_argument(
        "--device", type=argtypes.device, default=None, help="cuda, mps or cpu (default: the best available)"
    )
    what = p.add_mutually_exclusive_group()
    what.add_argument(
        "--shape",
        choices=tuple(SHAPES),
        default="qwen2.5-1.5b",
        help="a Qwen2.5-shaped model with random weights (default: %(default)s)",
    )
    what.add_argument("--model", default=None, help="a real model instead: catalogue name, folder or .gguf (on torch)")
    p.add_argument(
        "--dtype",
        type=argtypes.dtype,
        default=None,
        help="default: bf16 on CUDA, fp32 elsewhere for a shape; the app's choice for --model",
    )


def _add_measure_arguments(p: argparse.ArgumentParser) -> None:
    """How much is measured: answer lengths, cache lengths, bandwidth and repetitions."""
    p.add_argument(
        "--tokens",
        type=argtypes.positive_int,
        default=128,
        help="new tokens per answer, and steps of the worst-step run",
    )
    p.add_argument(
        "--contexts",
        type=_contexts,
        default=_contexts("256,2000,8000"),
        help="cache lengths of the verify cost curve (default: %(default)s, off the spans' boundaries)",
    )
    p.add_argument(
        "--bandwidth",
        type=float,
        default=None,
        metavar="GB/S",
        help="the device's memory bandwidth, for the share of it a step uses (default: from a table "
        "of cards by name; none for a CPU)",
    )
    p.add_argument("--reps", type=argtypes.positive_int, default=5, help="timed repetitions of each figure")


def _add_backend_arguments(p: argparse.ArgumentParser) -> None:
    """The torch backend's cache, attention and compilation, to compare their costs."""
    p.add_argument(
        "--cache",
        choices=("auto", "static", "dynamic"),
        default="auto",
        help="the torch backend's KV cache: static (CUDA graphs on CUDA), dynamic, or auto (static on "
        "CUDA, as the app runs); run both in one session to compare",
    )
    p.add_argument(
        "--attention",
        choices=("auto", "sdpa", "flex"),
        default=None,
        help="the static cache's graphed tree attention: FlexAttention, SDPA (cuDNN in graphs), or auto "
        "(both captured, the faster kept; the default on CUDA)",
    )
    p.add_argument(
        "--compiled",
        choices=("auto", "on", "off"),
        default="auto",
        help="the graphed steps through torch.compile: on, off, or auto (on where CUDA and Triton are, as "
        "the app runs); the capture's progress is printed with its times",
    )


def _add_output_arguments(p: argparse.ArgumentParser) -> None:
    """Where figures go, which sections run, and the spec-bench section's inputs."""
    from draftscope.bench.spec import DEFAULT_QUESTIONS

    p.add_argument("--json", dest="json_out", default=None, help="also write every figure as JSON lines here")
    p.add_argument("--sections", type=_sections, default=list(SECTIONS), help=f"a subset of {','.join(SECTIONS)}")
    p.add_argument(
        "--questions",
        default=os.environ.get("DRAFTSCOPE_SPEC_BENCH", str(DEFAULT_QUESTIONS)),
        help="Spec-Bench question file for the spec-bench section",
    )
    p.add_argument(
        "--spec-methods",
        default=SPEC_METHODS,
        help="bench spec's methods in the spec-bench section (default: %(default)s)",
    )
    p.add_argument(
        "--datastore",
        default=None,
        help="the retrieval index for the spec-bench section (default: the model's default datastore)",
    )


class Report:
    """Prints the figures and, with --json, writes each as one JSON line naming its section."""

    def __init__(self, path: str | None) -> None:
        self.file = open(path, "w", encoding="utf-8") if path else None

    def heading(self, key: str) -> None:
        number = list(SECTIONS).index(key) + 1
        print(f"\n== {number}. {SECTIONS[key]} ==", flush=True)

    def line(self, text: str) -> None:
        print(text, flush=True)

    def figures(self, key: str, text: str | None = None, **data) -> None:
        if text:
            self.line(text)
        if self.file:
            self.file.write(json.dumps({"section": SECTIONS.get(key, key), **data}) + "\n")
            self.file.flush()

    def close(self) -> None:
        if self.file:
            self.file.close()


# ----------------------------------------------------------------------------- timing


def sync(device) -> None:
    """Kernels run asynchronously on a GPU: wait for them before reading the clock."""
    import torch

    if device.type == "cuda":
        torch.cuda.synchronize(device)
    elif device.type == "mps":
        torch.mps.synchronize()


def timed(fn, device, reps: int, warm: int = WARMUP) -> float:
    """Median milliseconds of ``fn`` over ``reps`` runs after ``warm`` untimed ones."""
    for _ in range(warm):
        fn()
    times = []
    for _ in range(reps):
        sync(device)
        t0 = time.perf_counter()
        fn()
        sync(device)
        times.append((time.perf_counter() - t0) * 1000)
    return statistics.median(times)


def answer(engine, prompt: list[int], tokens: int, drafters=(), budget: int | None = None):
    """(token ids, seconds, steps, mean nodes verified a step, median ms of a step after the first) of
    one answer through Engine.generate, the app's own loop (the first step holds the prompt's reading)."""
    from draftscope.engine.engine import GenerationRequest

    sync(engine.device)
    t0 = time.perf_counter()
    events = list(
        engine.generate(
            GenerationRequest(
                keep_cache=False, prompt_ids=prompt, max_new_tokens=tokens, drafters=list(drafters), budget=budget
            )
        )
    )
    sync(engine.device)
    seconds, final = time.perf_counter() - t0, events[-1]
    if final.finish_reason == "error":
        raise RuntimeError(final.error)
    steps = [ev for ev in events[:-1] if hasattr(ev, "proposed")]
    nodes = sum(ev.proposed for ev in steps) / len(steps) if steps else 0.0
    step_ms = statistics.median(ev.total_ms for ev in steps[1:]) if len(steps) > 1 else float("nan")
    return final.token_ids, seconds, final.stats.steps, nodes, step_ms


# ----------------------------------------------------------------------------- the model


def open_engine(args):
    """(engine, prompt for sections 3-4): the real model as the app loads it, or a shape model."""
    import torch

    from draftscope.engine.backends import torch_backend_for
    from draftscope.engine.backends.pytorch.loader import load_model
    from draftscope.engine.backends.pytorch.precision import pick_device
    from draftscope.engine.engine import Engine
    from draftscope.models.resolve import resolve_model

    if args.model:
        loaded = load_model(resolve_model(args.model), device=args.device, dtype=args.dtype)
        engine = Engine(
            backend=torch_backend_for(
                loaded.model,
                loaded.tokenizer,
                name=loaded.name,
                device=loaded.device,
                cache=args.cache,
                attention=args.attention,
                **_capture_options(args),
            )
        )
        return engine, engine.encode_chat([{"role": "user", "content": QUESTION}])
    device = pick_device(args.device)
    if device.type == "cuda" and not torch.cuda.is_available():
        raise ValueError("--device cuda: torch sees no CUDA device here")
    if args.dtype and args.dtype != "auto":
        dtype = getattr(torch, args.dtype)
    else:
        dtype = torch.bfloat16 if device.type == "cuda" else torch.float32
    engine = Engine(
        backend=torch_backend_for(
            shape_model(args.shape, device, dtype),
            IdsOnly(),
            name=args.shape,
            cache=args.cache,
            attention=args.attention,
            **_capture_options(args),
        )
    )
    prompt = np.random.default_rng(1).integers(0, engine.vocab, PROMPT_LEN).tolist()
    return engine, prompt


def _capture_options(args) -> dict:
    """The static cache's capture as asked (--compiled), its progress printed with the seconds since
    the capture began: what each graph's capture (and compile) costs shows in the printout."""
    started = time.perf_counter()

    def progress(text: str) -> None:
        print(f"  [{time.perf_counter() - started:7.1f} s] {text}", flush=True)

    import torch

    options: dict = {"progress": progress}
    static = args.cache == "static" or (args.cache == "auto" and torch.cuda.is_available())
    if args.compiled != "auto" and static:
        options["compiled"] = args.compiled == "on"
    return options


def device_name(device) -> str:
    import torch

    from draftscope.bench.spec import _cpu_name

    if device.type == "cuda":
        return torch.cuda.get_device_name(device)
    return f"{_cpu_name()} ({os.cpu_count()} cores)" if device.type == "cpu" else device.type


def header(engine, args, report: Report) -> None:
    import torch
    import transformers

    what = f"model {args.model}" if args.model else f"shape {args.shape}"
    report.figures(
        "header",
        f"draftscope bench gpu: {what} on {device_name(engine.device)}; "
        f"torch {torch.__version__}, transformers {transformers.__version__}, {engine.precision}; "
        f"backend {engine.backend.describe()}; {time.strftime('%Y-%m-%d')}",
        device=device_name(engine.device),
        torch=torch.__version__,
        transformers=transformers.__version__,
        dtype=engine.precision,
        model=args.model,
        shape=None if args.model else args.shape,
        backend=engine.backend.describe(),
        random_weights=not args.model,
        tokens=args.tokens,
        reps=args.reps,
    )
    if not args.model:
        report.line(
            "random weights: these figures measure costs, not acceptance "
            f"(embeddings x{SHARPEN:g}, the head a shuffled copy: greedy answers walk a fixed permutation "
            "of the vocabulary; prompts are seeded random token ids: no tokenizer is needed)"
        )
    report.line(
        f"times: median of {args.reps} reps after {WARMUP} warm-ups, the device synchronised before each clock reading"
    )


# ----------------------------------------------------------------------------- sections


def bandwidth_bound(engine, args, report: Report) -> float | None:
    """The device's memory bandwidth in GB/s (``--bandwidth``, else the card table), said once."""
    if args.bandwidth:
        bound, where = args.bandwidth, "--bandwidth"
    elif engine.device.type == "cuda":
        name = device_name(engine.device)
        bound, where = card_bandwidth(name), f"the spec table ({name})"
    else:
        bound, where = None, None
    said = f"{bound:,.0f} GB/s from {where}" if bound else "none known for this device (--bandwidth GB/S gives one)"
    report.figures("verify", f"bandwidth bound: {said}", bandwidth_gb_s=bound, source=where)
    return bound


def verify_curve(engine, args, report: Report) -> None:
    from draftscope.engine.backends import chain_tree

    key, backend, rng = "verify", engine.backend, np.random.default_rng(0)
    report.heading(key)
    bound = bandwidth_bound(engine, args, report)
    for context in args.contexts:
        ids = rng.integers(0, engine.vocab, context).tolist()
        backend.start(ids)
        past = backend.cached
        trees = {f"chain {n}": chain_tree(rng.integers(0, engine.vocab, n)) for n in CHAINS}
        trees["wide 64 (8 x chain of 8)"] = wide_tree(rng, engine.vocab)
        report.line(
            f"context {context}: ms per verify (then truncated back), ratio to the plain step, the bytes it "
            "must read (weights + KV cache) over its time, and that as a share of the device's bandwidth; "
            "each tree at one cache length throughout (steady state: section 2 has new lengths)"
        )
        plain = None
        for name, tree in trees.items():
            ms = timed(
                lambda tree=tree: (backend.verify(ids[-1], tree), backend.truncate(past)),  # noqa: B023 - timed now
                engine.device,
                args.reps,
            )
            plain = plain or ms
            read = step_bytes(backend.model, past + 1 + len(tree), queries=1 + len(tree)) if backend.model else None
            gb_s = sum(read.values()) / (ms / 1000) / 1e9 if read else None
            share = gb_s / bound if gb_s and bound else None
            report.figures(
                key,
                f"  {name:<26} {ms:9.2f} ms  {ms / plain:6.2f}x"
                + (f"  {gb_s:8.1f} GB/s" if gb_s else "")
                + (f"  {share:6.1%} of the bound" if share else ""),
                context=context,
                tree=name,
                nodes=len(tree),
                ms=round(ms, 3),
                ratio=round(ms / plain, 3),
                statistic="median",
                reps=args.reps,
                warmups=WARMUP,
                bytes_read=sum(read.values()) if read else None,
                gb_per_s=round(gb_s, 2) if gb_s else None,
                bound_share=round(share, 4) if share else None,
            )


def worst_step(engine, args, report: Report) -> None:
    key, backend, rng = "worst", engine.backend, np.random.default_rng(2)
    report.heading(key)
    start = max(args.contexts) + 1  # past every length section 1 verified a 64-node tree at
    ids = rng.integers(0, engine.vocab, start).tolist()
    backend.start(ids)
    tree, root, times = wide_tree(rng, engine.vocab), ids[-1], []
    first = backend.cached
    for _ in range(args.tokens):
        sync(engine.device)
        t0 = time.perf_counter()
        backend.verify(root, tree)
        backend.commit(COMMIT)
        sync(engine.device)
        times.append((time.perf_counter() - t0) * 1000)
        root = int(tree.tokens[COMMIT[-1]])
    warm, rest = times[:WORST_WARMUP], np.array(times[WORST_WARMUP:] or times)
    median, p99, worst = float(np.median(rest)), float(np.percentile(rest, 99)), float(rest.max())
    report.line(
        f"{len(times)} steps of verify + commit of a 64-node tree, {1 + len(COMMIT)} tokens kept a step: "
        f"cache {first} to {backend.cached}, every length new"
    )
    report.figures(
        key,
        f"  first {len(warm)} steps (warm-up): {', '.join(f'{t:.2f}' for t in warm)} ms",
        part="warm-up",
        ms=[round(t, 3) for t in warm],
    )
    report.figures(
        key,
        f"  the other {len(rest)}: median {median:.2f} ms, p99 {p99:.2f} ms, "
        f"max {worst:.2f} ms, max/median {worst / median:.2f}",
        part="steps",
        steps=len(rest),
        median_ms=round(median, 3),
        p99_ms=round(p99, 3),
        max_ms=round(worst, 3),
        max_over_median=round(worst / median, 3),
        first_cache=first,
        last_cache=backend.cached,
    )


def hf_generate(engine, prompt: list[int], tokens: int):
    """(token ids, seconds) of Hugging Face's own greedy loop on the same model and prompt."""
    import torch

    eos = sorted(engine.eos_ids)
    ids = torch.tensor([prompt], device=engine.device)
    sync(engine.device)
    t0 = time.perf_counter()
    with torch.inference_mode():
        out = engine.model.generate(
            ids,
            attention_mask=torch.ones_like(ids),
            max_new_tokens=tokens,
            do_sample=False,
            temperature=None,
            top_p=None,
            top_k=None,
            eos_token_id=eos or None,
            pad_token_id=eos[0] if eos else 0,
        )
    sync(engine.device)
    return out[0, len(prompt) :].tolist(), time.perf_counter() - t0


def plain_vs_hf(engine, prompt: list[int], args, report: Report) -> list[int]:
    key = "plain"
    report.heading(key)
    hf_s, ours_s, hf_ids, ours_ids = [], [], None, None
    graphs = getattr(engine.backend, "graphs", None)
    replays = steps = 0
    for rep in range(1 + args.reps):  # alternated, so drift hits both alike; round 0 warms up
        hf_ids, secs = hf_generate(engine, prompt, args.tokens)
        if rep:
            hf_s.append(secs)
        before = graphs.replays if graphs is not None else 0
        ours_ids, secs, answer_steps, *_ = answer(engine, prompt, args.tokens)
        replays += (graphs.replays if graphs is not None else 0) - before
        steps += answer_steps
        if rep:
            ours_s.append(secs)
    hf_tps, ours_tps = len(hf_ids) / statistics.median(hf_s), len(ours_ids) / statistics.median(ours_s)
    same = hf_ids == ours_ids
    report.line(
        f"prompt {len(prompt)} tokens, greedy, up to {args.tokens} new tokens; median of {args.reps} "
        "alternated runs after 1 warm-up each, prefill included"
    )
    report.figures(
        key,
        f"  HF generate        {hf_tps:9.1f} tokens/s ({len(hf_ids)} tokens)",
        method="hf",
        tokens_per_s=round(hf_tps, 2),
        tokens=len(hf_ids),
    )
    report.figures(
        key,
        f"  engine plain loop  {ours_tps:9.1f} tokens/s ({len(ours_ids)} tokens)",
        method="engine plain",
        tokens_per_s=round(ours_tps, 2),
        tokens=len(ours_ids),
    )
    expected = (
        "expected in fp32" if engine.precision == "float32" else f"{engine.precision} rounding may flip near-ties"
    )
    report.figures(
        key,
        f"  engine / HF: {ours_tps / hf_tps:.2f}x; token-identical: {same} ({expected})",
        ratio=round(ours_tps / hf_tps, 3),
        identical=same,
    )
    report.figures(
        key, f"  steps replayed from captured graphs: {replays} of {steps}", graph_replays=replays, steps=steps
    )
    return ours_ids


def oracle_limit(engine, prompt: list[int], plain: list[int] | None, args, report: Report) -> None:
    from draftscope.drafters.oracle import OracleDrafter

    key = "oracle"
    report.heading(key)
    if plain is None:
        plain = answer(engine, prompt, args.tokens)[0]
    configs = {f"depth {d}": (d, d) for d in ORACLE_DEPTHS} | {"adaptive": (16, None), WIDE: (8, 64)}  # (depth, budget)
    secs: dict[str, list[float]] = {name: [] for name in ["plain", *configs]}
    out: dict[str, tuple[list[int], int, float]] = {}
    wide_ms: list[float] = []
    for rep in range(1 + args.reps):  # each round: plain, then every configuration; round 0 warms up
        ids, s, steps, nodes, _ = answer(engine, prompt, args.tokens)
        secs["plain"].append(s)
        out["plain"] = (ids, steps, nodes)
        for name, (depth, budget) in configs.items():
            drafter = (
                WideOracle(plain, len(prompt), engine.vocab)
                if name == WIDE
                else OracleDrafter(plain, len(prompt), max_depth=depth)
            )
            ids, s, steps, nodes, step_ms = answer(engine, prompt, args.tokens, [drafter], budget)
            secs[name].append(s)
            out[name] = (ids, steps, nodes)
            if name == WIDE and rep:
                wide_ms.append(step_ms)
    report.line(
        f"oracle drafts = the plain answer ({len(plain)} tokens), a chain ({WIDE}: its first branch, 7 "
        f"random ones beside it); median of {args.reps} rounds after 1 warm-up, each round plain then "
        "every configuration"
    )
    plain_tps = len(out["plain"][0]) / statistics.median(secs["plain"][1:])
    report.figures(
        key, f"  plain              {plain_tps:9.1f} tokens/s", config="plain", tokens_per_s=round(plain_tps, 2)
    )
    for name in configs:
        ids, steps, nodes = out[name]
        tps = len(ids) / statistics.median(secs[name][1:])
        tau, same = len(ids) / max(steps, 1), ids == plain
        report.figures(
            key,
            f"  {name:<18} {tps:9.1f} tokens/s  {tps / plain_tps:5.2f}x plain  "
            f"tau {tau:5.2f}  {nodes:4.1f} nodes a step  token-identical: {same}",
            config=name,
            tokens_per_s=round(tps, 2),
            speedup=round(tps / plain_tps, 3),
            tau=round(tau, 3),
            nodes_per_step=round(nodes, 2),
            identical=same,
        )
    outside_the_forward(engine, prompt, plain, statistics.median(wide_ms), args, report)


def outside_the_forward(engine, prompt, plain, step: float, args, report: Report) -> None:
    """The share of a 64-node step spent outside the forward: the wide oracle's median step (the
    engine's own step time, the prompt's step left out) against a 64-node verify alone at the
    answer's middle length."""
    backend, rng = engine.backend, np.random.default_rng(4)
    backend.start(prompt + plain[: len(plain) // 2])
    past, tree = backend.cached, wide_tree(rng, engine.vocab)
    forward = timed(lambda: (backend.verify(prompt[-1], tree), backend.truncate(past)), engine.device, args.reps)
    share = max(0.0, 1 - forward / step)
    report.figures(
        "oracle",
        f"  {WIDE}: {step:.2f} ms a step, its 64-node forward alone {forward:.2f} ms: "
        f"{share:.0%} of a step outside the forward (drafting, tree, walk, events)",
        config="outside the forward",
        step_ms=round(step, 3),
        forward_ms=round(forward, 3),
        outside_share=round(share, 3),
    )


def spec_bench(args, report: Report) -> int:
    """``bench spec`` itself (its questions, methods and table), run after this run's model is gone."""
    import tempfile

    from draftscope.bench import spec

    key = "spec-bench"
    report.heading(key)
    why = (
        "needs --model: random weights accept no real drafts"
        if not args.model
        else None
        if Path(args.questions).is_file()
        else f"no questions at {args.questions} (pass --questions)"
    )
    if why:
        report.figures(key, f"skipped: {why}", skipped=why)
        return 0
    parser = argparse.ArgumentParser()
    spec.add_arguments(parser)
    with tempfile.TemporaryDirectory(prefix="draftscope-bench-gpu-") as scratch:
        summary = Path(scratch) / "spec.json"
        argv = [
            "--model",
            args.model,
            "--questions",
            args.questions,
            "--backend",
            "torch",
            "--methods",
            args.spec_methods,
            "--max-new-tokens",
            str(args.tokens),
            "--json",
            str(summary),
        ]
        argv += ["--datastore", args.datastore] if args.datastore else []
        argv += ["--device", args.device] if args.device else []
        argv += ["--dtype", args.dtype] if args.dtype else []
        code = spec.run(parser.parse_args(argv))
        overall = json.loads(summary.read_text())["summary"]["overall"]
    for method, v in overall.items():
        report.figures(key, None, method=method, **v)
    return code


# ----------------------------------------------------------------------------- run


def engine_sections(args, report: Report) -> None:
    engine, prompt = open_engine(args)
    longest = max(args.contexts) + 1 + args.tokens * (1 + len(COMMIT)) + 65
    if longest > engine.max_context:
        raise ValueError(
            f"--contexts and --tokens reach {longest:,} cached tokens; {engine.name} holds {engine.max_context:,}"
        )
    header(engine, args, report)
    plain = None
    if "verify" in args.sections:
        verify_curve(engine, args, report)
    if "worst" in args.sections:
        worst_step(engine, args, report)
    if "plain" in args.sections:
        plain = plain_vs_hf(engine, prompt, args, report)
    if "oracle" in args.sections:
        oracle_limit(engine, prompt, plain, args, report)
    engine.backend.close()


def run(args: argparse.Namespace) -> int:
    report = Report(args.json_out)
    try:
        if set(args.sections) - {"spec-bench"}:
            engine_sections(args, report)
        if "spec-bench" in args.sections:
            gc.collect()  # this run's model is gone before bench spec loads its own
            import torch

            if torch.cuda.is_available():
                torch.cuda.empty_cache()
            return spec_bench(args, report)
    finally:
        report.close()
    return 0
