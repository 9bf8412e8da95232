"""``draftscope bench lossless``: an exactness audit anyone can run on a real model.

- Greedy: the answer of every drafter (alone and together) equals Hugging Face ``generate`` on
  sample prompts. In fp32 that is the test; in bf16/fp16 a verify pass over many tokens rounds
  differently from a one-token pass, so the audit reports the agreement rate and, at each first
  differing token, the gap between the target's two best scores next to the rounding noise
  measured at that very position (the same logits from a one-token pass and a whole-prefix
  pass; at least two steps of the dtype at that magnitude). A gap inside the noise is
  rounding; a gap outside it is a bug.
- Sampling (T > 0), token identity: each answer is a function of its seed, so for several seeds
  per prompt every drafter's answer must equal plain decoding's with the same seed, token for
  token (fp32; in bf16 the same near-tie story as greedy, on the noised scores).
- Sampling, the sampler itself (plain seeded decoding; every drafter gives the same answers):
  (a) the exact joint of the next two tokens after a prompt and the start of its answer
  (transformers' own logits processors; one forward per likely first token) against seeded runs,
  chi-square; (b) the randomized probability-integral transform of every sampled token under the
  target's processed distribution given its prefix (one forward per answer; tokens ordered by
  probability): uniform (Kolmogorov-Smirnov) and independent (lag-1 pairs, chi-square).
- ``--biased`` runs the sampling tests again with deliberately broken noise (keyed by the step
  instead of the position, for identity; reused across positions, for the sampler), to show the
  audit's power at the chosen sizes.

Exit code 0 only when every test holds.
"""

from __future__ import annotations

import argparse
import json
import math
from dataclasses import asdict, fields
from pathlib import Path

from draftscope.bench.lossless_report import Check, Progress, print_verdict
from draftscope.bench.lossless_sampler import first_tokens_check, mid_answer, pit_checks
from draftscope.bench.lossless_setup import Audit, load_audit
from draftscope.bench.lossless_stats import logit_rows, noise_keyed_by_step, one_token_logits, reused_noise
from draftscope.commands.sampling_options import add_sampling_options, given_sampling
from draftscope.core import argtypes
from draftscope.optional_torch import require_torch
from draftscope.rules import SamplingParams


def add_arguments(p: argparse.ArgumentParser) -> None:
    _add_drafting_arguments(p)
    _add_test_arguments(p)
    _add_running_arguments(p)


def _add_drafting_arguments(p: argparse.ArgumentParser) -> None:
    """The model audited, its drafters, and the sampling settings the audit runs under."""
    p.add_argument("--model", default="default")
    p.add_argument(
        "--draft-model",
        default=None,
        help="a model sharing the target's tokenizer; 'self' (the target drafts for itself) or 'self:N' "
        "(the target's first N layers)",
    )
    p.add_argument("--datastore", default=None, help="index for retrieval drafts (default: the default chat datastore)")
    p.add_argument(
        "--head",
        default=None,
        help="recurrent head for the recurrent drafter (default: the app's head for --model, when one was trained)",
    )
    p.add_argument(
        "--configs",
        default="auto",
        help="drafter sets to audit, ';'-separated comma lists (e.g. 'context;retrieval,context,model'); "
        "auto = each available drafter alone, then all together",
    )
    p.add_argument("--temperature", default="0,0.7,1", help="comma list; 0 = the greedy identity test")
    # the other fields of SamplingParams, each off unless given (their own defaults)
    add_sampling_options(p, {f.name: f.default for f in fields(SamplingParams)}, leave_out=("temperature",))


def _add_test_arguments(p: argparse.ArgumentParser) -> None:
    """The prompts, the size of each test (seeds, runs, PIT tokens), the draft budget and the biased control."""
    p.add_argument("--prompts", type=argtypes.positive_int, default=4, help="sample prompts (built in, or --questions)")
    p.add_argument("--questions", default=None, help="Spec-Bench JSONL to take prompts from")
    p.add_argument("--max-new-tokens", type=argtypes.positive_int, default=64, help="answers' length (identity tests)")
    p.add_argument(
        "--seeds", type=argtypes.positive_int, default=3, help="seeded answers per prompt (identity at T > 0)"
    )
    p.add_argument("--runs", type=argtypes.positive_int, default=600, help="seeded runs per first-tokens test")
    p.add_argument(
        "--pit-tokens",
        type=argtypes.positive_int,
        default=3000,
        help="sampled tokens per PIT test (about 2,000 reject a REST-style bias on SmolLM2)",
    )
    p.add_argument(
        "--pit-length", type=argtypes.positive_int, default=96, help="tokens per sampled answer in the PIT test"
    )
    p.add_argument("--budget", type=argtypes.count, default=None, help="draft nodes per step (default: adaptive)")
    p.add_argument("--biased", action="store_true", help="also run the sampling tests with broken noise")
    p.add_argument(
        "--only-biased",
        action="store_true",
        help="run the sampling tests with broken noise only (to measure the audit's power)",
    )
    p.add_argument("--seed", type=int, default=0)


def _add_running_arguments(p: argparse.ArgumentParser) -> None:
    """What runs the model, and where the results go."""
    p.add_argument("--device", type=argtypes.device, default=None)
    p.add_argument(
        "--dtype", type=argtypes.dtype, default=None, help="float32, bfloat16 or float16 (default: per device)"
    )
    p.add_argument(
        "--backend",
        choices=("torch", "llama.cpp"),
        default="torch",
        help="torch (default: greedy answers are compared with HF generate, identity is the promise in "
        "fp32) or llama.cpp (compared with its own plain decoding; divergences must be near-ties)",
    )
    p.add_argument("--json", dest="json_out", default=None)
    p.add_argument("--quiet", action="store_true", help="no progress lines")


def run(args: argparse.Namespace) -> int:
    from dataclasses import replace

    # its statistics (the distribution tests, the noise keyed by step) are torch's: said before a model opens
    require_torch("draftscope bench lossless (its statistics run in torch)")
    temps = _temperatures(args)
    sampling = _sampling(args)
    audit = load_audit(args)
    variants = [True] if args.only_biased else [False, True] if args.biased else [False]
    progress = Progress(_work_units(args, temps, variants, audit), args.quiet)
    checks: list[Check] = []
    if 0 in temps:
        checks += greedy_checks(audit.engine, audit.prompts, audit.makers, args, progress)
    for t in (t for t in temps if t > 0):
        params = replace(sampling, temperature=t)
        for biased in variants:
            checks += sampling_checks(audit.engine, audit.prompts, audit.makers, params, args, progress, biased=biased)
    progress.line("")
    ok = print_verdict(checks, args)
    if args.json_out:
        Path(args.json_out).write_text(json.dumps([asdict(c) for c in checks], indent=2))
    return 0 if ok else 1


def _temperatures(args) -> list[float]:
    """--temperature's values, refused (with --runs and --pit-tokens too small to mean anything)
    before the model loads."""
    temps = [float(t) for t in args.temperature.split(",") if t.strip()]
    if any(t < 0 for t in temps) or not temps:
        raise ValueError("--temperature: give one or more values >= 0")
    if args.runs < 50 or args.pit_tokens < 100:
        raise ValueError("--runs must be >= 50 and --pit-tokens >= 100 for the tests to mean anything")
    return temps


def _sampling(args):
    """The sampling settings the tests at T > 0 run under (refused, in words, before the model loads)."""
    given = given_sampling(args)
    given.pop("temperature", None)  # --temperature is the list of temperatures the tests run at
    return SamplingParams(**given)


def _work_units(args, temps: list[float], variants: list[bool], audit: Audit) -> int:
    """The audit's answers and tests counted as units of the progress line."""
    configs, prompts = audit.configs, audit.prompts
    sampled = len([t for t in temps if t > 0])
    work = (len(configs) + 2) * len(prompts) * (0 in temps)  # HF references, plain, each config
    work += sampled * len(variants) * (len(configs) + 1) * len(prompts) * args.seeds
    return work + sampled * len(variants) * (args.runs // 10 + args.pit_tokens // 10)


# ----------------------------------------------------------------------------- greedy


def greedy_checks(engine, prompts, makers, args, progress) -> list[Check]:
    """On torch the reference is Hugging Face generate (an independent implementation); on
    llama.cpp it is the backend's own plain decoding, one token a step as llama.cpp's loop does."""
    import torch

    from draftscope.engine.engine import GenerationRequest

    model = engine.model
    eos = sorted(engine.eos_ids)
    refs = []
    for ids in prompts:
        if model is None:
            refs.append(
                list(
                    engine.generate(
                        GenerationRequest(keep_cache=False, prompt_ids=ids, max_new_tokens=args.max_new_tokens)
                    )
                )[-1].token_ids
            )
            progress.step(1, "greedy: plain decoding on the backend")
            continue
        with torch.inference_mode():
            out = model.generate(
                torch.tensor([ids], device=engine.device),
                max_new_tokens=args.max_new_tokens,
                do_sample=False,
                temperature=None,
                top_p=None,
                top_k=None,
                eos_token_id=eos or None,
                pad_token_id=eos[0] if eos else 0,
            )
        refs.append(out[0, len(ids) :].tolist())
        progress.step(1, "greedy: Hugging Face generate")
    cases = [(ids, SamplingParams(), ref) for ids, ref in zip(prompts, refs)]
    reference = "HF generate" if model is not None else f"{engine.backend.kind}'s plain decoding"
    configs = {"plain": lambda: [], **makers} if model is not None else makers
    return [
        agreement_check("greedy", engine, cases, name, make, args, progress, reference=reference)
        for name, make in configs.items()
    ]


def agreement_check(kind, engine, cases, name, make, args, progress, *, reference: str, biased: bool = False) -> Check:
    """Each (prompt, sampling, reference answer) answered with ``make()``'s drafters: identical in
    fp32 (the promise), else every first divergence explained by rounding at a near-tie."""
    import torch

    from draftscope.engine.engine import GenerationRequest

    same, gaps, accepted = 0, [], 0
    temperature = cases[0][1].temperature
    for ids, params, ref in cases:
        events = list(
            engine.generate(
                GenerationRequest(
                    keep_cache=False,
                    prompt_ids=ids,
                    max_new_tokens=args.max_new_tokens,
                    sampling=params,
                    drafters=make(),
                    budget=args.budget,
                )
            )
        )
        final = events[-1]
        if final.finish_reason == "error":
            raise RuntimeError(final.error)
        accepted += sum(e.accepted for e in events[:-1])
        if final.token_ids == ref:
            same += 1
        else:
            gaps.append(divergence(engine, ids, ref, final.token_ids, params))
        progress.step(1, f"{kind} T={temperature:g}: {name}")
    exact = engine.dtype == torch.float32  # torch in fp32: the promise; bf16 and llama.cpp: explained near-ties
    passed = same == len(cases) if exact else all(g["within_noise"] for g in gaps)
    detail = f"{same}/{len(cases)} identical to {reference}, {accepted} draft tokens accepted"
    if gaps:
        detail += "; first divergences: " + ", ".join(f"gap {g['gap']:.3f} vs noise {g['noise']:.3f}" for g in gaps)
    if name != "plain" and accepted == 0:
        detail += " (no draft accepted: this proves little)"
    progress.line(f"{'[biased] ' if biased else ''}{kind} [{name}, T={temperature:g}]: {detail}")
    return Check(
        kind, name, temperature, passed, detail, biased=biased, extra={"agreement": same / len(cases), "gaps": gaps}
    )


def _spacing(x: float, dtype) -> float:
    """The gap between representable numbers near ``x`` in ``dtype`` (bf16: 8 significant bits)."""
    import torch

    bits = {torch.bfloat16: 8, torch.float16: 11}.get(dtype, 24)
    return 2.0 ** (math.floor(math.log2(max(x, 1e-30))) - (bits - 1))


def divergence(engine, prompt, ref, got, params) -> dict:
    """At the first differing token: the gap between the target's two best scores there (logits
    when greedy; log p + the position's noise when sampling), and the rounding noise on those
    scores: what a one-token pass with a cache and one pass over the prefix disagree by, and at
    least two steps of the dtype at that magnitude (over the temperature when sampling)."""
    import torch

    from draftscope.engine.sampling import PositionNoise, probabilities, recent_tokens

    k = next(i for i, (a, b) in enumerate(zip(ref + [None], got + [None])) if a != b)
    prefix = prompt + ref[:k]
    # the same position inside a batch (as a verified tree computes it) and alone (as plain decoding)
    n = min(12, len(prefix) - 1)
    whole = logit_rows(engine, prefix[:-n], prefix[-n:])[-1:]
    one = one_token_logits(engine, prefix)[None]

    def scores(logits):
        if params.greedy:
            return logits[0].float().cpu()
        seen = recent_tokens([prefix], params.repetition_window, engine.vocab)  # what the penalty covers
        noise = torch.from_numpy(PositionNoise(params.seed, engine.vocab).at(len(prefix)))
        return probabilities(logits.cpu(), params, seen)[0].log() + noise

    s_whole, s_one = scores(whole), scores(one)
    top = torch.topk(s_whole, 2)
    a, b = top.indices.tolist()
    gap = float(top.values[0] - top.values[1])
    measured = float(max(abs(s_whole[a] - s_one[a]), abs(s_whole[b] - s_one[b])) * 2)
    # The logits are rounded to the model's dtype: two that lie a step or two apart can swap in
    # any other pass, even where these two passes happened to agree.
    step = _spacing(float(whole[0].float().abs().max()), engine.dtype) / (params.temperature or 1.0)
    noise = max(measured, 2 * step)
    return {
        "position": k,
        "gap": gap,
        "noise": noise,
        "measured_noise": measured,
        "dtype_step": step,
        "within_noise": gap <= noise,
        "tokens": [int(a), int(b)],
        "ref_token": ref[k] if k < len(ref) else None,
        "got_token": got[k] if k < len(got) else None,
    }


# ----------------------------------------------------------------------------- sampling


def sampling_checks(engine, prompts, makers, params, args, progress, *, biased: bool) -> list[Check]:
    """Identity with plain decoding for every configuration, then the sampler's own exactness."""
    import contextlib
    from dataclasses import replace

    from draftscope.engine.engine import GenerationRequest

    checks = []
    with noise_keyed_by_step() if biased else contextlib.nullcontext():
        cases = []
        for i, ids in enumerate(prompts):
            for s in range(args.seeds):
                seeded = replace(params, seed=args.seed * 1_000_003 + 7_919 * i + s)
                final = list(
                    engine.generate(
                        GenerationRequest(
                            keep_cache=False, prompt_ids=ids, max_new_tokens=args.max_new_tokens, sampling=seeded
                        )
                    )
                )[-1]
                cases.append((ids, seeded, final.token_ids))
                progress.step(1, f"identity T={params.temperature:g}: plain")
        checks += [
            agreement_check(
                "identity",
                engine,
                cases,
                name,
                make,
                args,
                progress,
                reference="plain decoding with the same seed",
                biased=biased,
            )
            for name, make in makers.items()
        ]
    with reused_noise() if biased else contextlib.nullcontext():
        checks.append(first_tokens_check(engine, mid_answer(engine, prompts[0]), params, args, progress, biased))
        checks += pit_checks(engine, prompts, params, args, progress, biased)
    return checks
