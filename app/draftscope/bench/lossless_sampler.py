"""The sampler's own exactness tests of ``draftscope bench lossless`` (plain seeded decoding; the
identity tests show every drafter gives the same answers): the exact joint of the first two tokens
against seeded runs (chi-square), and the randomized probability-integral transform of sampled
tokens, uniform (Kolmogorov-Smirnov) and independent (lag-1 pairs). Apart from lossless.py, which
runs them after the identity tests at each temperature.
"""

from __future__ import annotations

from draftscope.bench.lossless_report import Check
from draftscope.bench.lossless_stats import (
    chi_square_test,
    hf_processors,
    ks_uniform,
    one_token_logits,
    pairs_test,
    reference_distribution,
    reference_rows,
)

P_LIMIT = 0.001  # a test fails below this p-value


def mid_answer(engine, prompt: list[int], tokens: int = 24) -> list[int]:
    """The prompt plus the start of the target's greedy answer: drafters have text to continue
    there, so the first-tokens test sees drafts accepted (at an answer's very start few are)."""
    from draftscope.engine.engine import GenerationRequest

    events = list(
        engine.generate(GenerationRequest(keep_cache=False, prompt_ids=prompt, max_new_tokens=tokens), _ignore_eos=True)
    )
    return prompt + events[-1].token_ids


def first_tokens_check(engine, prompt, params, args, progress, biased) -> Check:
    """Joint of the first two tokens: exact cells for the likeliest first tokens, the rest pooled."""
    from dataclasses import replace

    import numpy as np
    import torch

    from draftscope.engine.engine import GenerationRequest

    procs = hf_processors(params)

    def after(prefix):  # the target's processed next-token distribution after ``prefix``
        return reference_distribution(procs, params, prefix, one_token_logits(engine, prefix)[None])[0]

    with torch.inference_mode():
        first = after(prompt)
        top_first = torch.argsort(first, descending=True)[:8].tolist()
        top_first = [a for a in top_first if float(first[a]) * args.runs >= 5] or top_first[:1]
        second = torch.stack([after(prompt + [a]) for a in top_first])
    cells: dict[tuple, int] = {}
    expected: list[float] = []
    for i, a in enumerate(top_first):
        row = second[i]
        likely = [b for b in torch.argsort(row, descending=True)[:8].tolist() if float(first[a] * row[b]) > 0]
        for b in likely:
            cells[(a, b)] = len(expected)
            expected.append(float(first[a] * row[b]))
        cells[(a, None)] = len(expected)
        expected.append(float(first[a]) * (1 - float(row[likely].sum())))
    cells[(None, None)] = len(expected)
    expected.append(max(0.0, 1 - float(first[top_first].sum())))
    counts = np.zeros(len(expected))
    for r in range(args.runs):
        p = replace(params, seed=args.seed * 1_000_003 + r)
        # EOS counts as a token here (the exact joint does not stop at it either).
        events = list(
            engine.generate(
                GenerationRequest(keep_cache=False, prompt_ids=prompt, max_new_tokens=2, sampling=p), _ignore_eos=True
            )
        )
        a, b = events[-1].token_ids[:2]
        key = (a, b) if (a, b) in cells else (a, None) if (a, None) in cells else (None, None)
        counts[cells[key]] += 1
        if r % 10 == 9:
            progress.step(1, f"T={params.temperature:g} {'biased ' if biased else ''}sampler: first tokens")
    stat, df, p_value = chi_square_test(counts, np.array(expected) * args.runs)
    detail = f"chi2 {stat:.1f}, df {df}, p {p_value:.3g}; {args.runs} seeded runs"
    check = Check("first-tokens", "plain", params.temperature, p_value >= P_LIMIT, detail, p_value, biased)
    progress.line(f"{'[biased] ' if biased else ''}first tokens [T={params.temperature:g}]: {detail}")
    return check


def pit_checks(engine, prompts, params, args, progress, biased) -> list[Check]:
    from dataclasses import replace

    import numpy as np

    from draftscope.engine.engine import GenerationRequest

    rng = np.random.default_rng(args.seed + 17)
    sequences = []
    total, run_no = 0, 0
    while total < args.pit_tokens:
        prompt = prompts[run_no % len(prompts)]
        p = replace(params, seed=args.seed * 7_919 + 100_000 + run_no)
        events = list(
            engine.generate(
                GenerationRequest(keep_cache=False, prompt_ids=prompt, max_new_tokens=args.pit_length, sampling=p)
            )
        )
        run_no += 1
        answer = events[-1].token_ids
        if not answer:
            continue
        rows = reference_rows(engine, prompt, answer, params).double().numpy()
        tok = np.array(answer)
        mass = rows[np.arange(len(tok)), tok]
        # Tokens ordered by probability (ties by id): a bias towards likely tokens (e.g. drafts
        # accepted too easily) moves u towards 0 instead of scattering it over [0, 1].
        ids = np.arange(rows.shape[1])
        below = np.array([row[(row > m) | ((row == m) & (ids < t))].sum() for row, m, t in zip(rows, mass, tok)])
        u = np.clip(below + rng.random(len(tok)) * mass, 0.0, 1.0)
        sequences.append(u)
        total += len(answer)
        progress.step(len(answer) // 10, f"T={params.temperature:g} {'biased ' if biased else ''}sampler: PIT")
    allu = np.concatenate(sequences)
    d, p_ks = ks_uniform(allu)
    stat, df, p_pairs = pairs_test(sequences)
    tag = f"{len(allu)} tokens in {run_no} answers"
    uniform = Check(
        "pit-uniform", "plain", params.temperature, p_ks >= P_LIMIT, f"KS D {d:.4f}, p {p_ks:.3g}; {tag}", p_ks, biased
    )
    pairs = Check(
        "pit-pairs",
        "plain",
        params.temperature,
        p_pairs >= P_LIMIT,
        f"lag-1 chi2 {stat:.1f}, df {df}, p {p_pairs:.3g}",
        p_pairs,
        biased,
    )
    progress.line(f"{'[biased] ' if biased else ''}PIT [T={params.temperature:g}]: {uniform.detail}; {pairs.detail}")
    return [uniform, pairs]
