"""``draftscope bench spec``: Spec-Bench-format questions, every method on the same prompts in
one process, greedy. Prints per category and overall: tau (tokens per target forward), tokens/s,
speedup over Hugging Face ``generate``, and whether the output equals the baseline's.

Methods: ``hf`` (baseline), ``hf-pld`` (HF prompt lookup), ``hf-assisted`` (with --draft-model),
on the llama.cpp backend ``llama`` (the baseline: llama-cpp-python's own ``Llama`` loop on the
same GGUF and threads), ``llama-pld`` (its ``LlamaPromptLookupDecoding``) and llama.cpp's own
server with its speculation types: ``llama-server`` (plain), ``llama-server-ngram-mod``
(``--spec-default``), ``llama-server-ngram-simple``, ``llama-server-ngram-map-k`` and
``llama-server-draft`` (with a GGUF --draft-model) — skipped, saying why, where no llama-server
is found (bench/llama_server.py),
ours: ``auto`` (what the app does out of the box: the settings' default drafters — retrieval from
the default datastore, the model's learned answers, the conversation — plus the draft model when
one is given, under the step policy), ``plain``, ``retrieval``, ``context``, ``learned``,
``composite`` (every drafter at hand), ``model`` (with --draft-model), and ``oracle`` (drafts = the
baseline's answer: the ceiling). ``--code-prompts N`` adds N HumanEval-style function-writing
prompts (our own, category "code"). ``--second-turns`` also runs each question's second turn,
with the model's own first answer in the context. ``--questions grounded`` runs the shipped
grounded prompts (bench/grounded_questions.jsonl: code edits, bug fixes, summaries and quotes of
texts that ship with Python, the answers that copy their context; ``--categories grounded-file``:
the whole files given back with a few changes). Besides the whole answer's rate, each method's time
to the first token and writing rate (the tokens after the first over the time after it) are reported
against ``--base`` (default: the backend's own plain loop); a grounded run also reports prompt by
prompt (bench/spec_prompts.py: writing rate, τ, the longest accepted run, the whole files' share of
the batch curve's ceiling). Every run prints the verify curve the step policy decided with (the
engine's costs at load and at the end) beside llama-bench's (bench/batch_curve.py).

Learned answers: the run starts from an empty learned store (or ``--learn-from`` a distilled
answers file, its first ``--learned-answers`` N) and, as the app does, learns each ``auto``
answer once it is measured. ``--learning-curve 0,50,200,1000`` instead measures ``auto`` on
``--held-out`` ShareGPT prompts absent from the answers file after N of them were learned.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import time
from collections import defaultdict
from pathlib import Path
from typing import NamedTuple

from draftscope.bench.batch_curve import backend_curve, ceiling_curve, curve_table, describe, engine_curve
from draftscope.bench.llama_server import METHODS as SERVER_METHODS
from draftscope.bench.spec_methods import Run, distilled, learn_answers
from draftscope.bench.spec_prompts import prompt_table, wants_prompt_table
from draftscope.bench.spec_report import against, draft_costs, format_table, summarise, timing_table, worst_prompts
from draftscope.core import argtypes
from draftscope.drafter_kinds import DATASTORE, DRAFT_MODEL, HEAD, KINDS, drafter_names
from draftscope.rules import BACKENDS

# Spec-Bench's first 10 questions of each of its 13 categories, as the package ships them; the whole
# set (480 questions) is any path given to --questions (DRAFTSCOPE_SPEC_BENCH).
DEFAULT_QUESTIONS = Path(__file__).with_name("spec_bench_question.jsonl")
CODE_PROMPTS = Path(__file__).with_name("code_prompts.jsonl")
GROUNDED_QUESTIONS = Path(__file__).with_name("grounded_questions.jsonl")  # scripts/make_grounded_questions.py
NAMED_QUESTIONS = {"grounded": GROUNDED_QUESTIONS}
ALL_METHODS = [
    "hf",
    "hf-pld",
    "hf-assisted",
    "llama",
    "llama-pld",
    *SERVER_METHODS,
    "auto",
    "auto-no-recurrent",
    "plain",
    *drafter_names(),  # each drafter kind alone
    "composite",
    "oracle",
]
# methods that only make sense with a recurrent head, or with a draft model
NEEDS_HEAD = (*(k.name for k in KINDS if k.needs is HEAD), "auto-no-recurrent")
NEEDS_DRAFT_MODEL = ("hf-assisted", *(k.name for k in KINDS if k.needs is DRAFT_MODEL), "llama-server-draft")
REFERENCES = {
    "torch": ("hf", "hf-pld", "hf-assisted"),  # each backend's own loops
    "llama.cpp": ("llama", "llama-pld", *SERVER_METHODS),
}


def add_arguments(p: argparse.ArgumentParser) -> None:
    _add_question_arguments(p)
    _add_method_arguments(p)
    _add_learning_arguments(p)
    _add_output_arguments(p)


def _add_question_arguments(p: argparse.ArgumentParser) -> None:
    """Which questions are asked, and how long each answer may be."""
    p.add_argument(
        "--questions",
        default=os.environ.get("DRAFTSCOPE_SPEC_BENCH", str(DEFAULT_QUESTIONS)),
        help="Spec-Bench question file (JSONL with question_id, category, turns), or 'grounded': "
        "the shipped prompts answered from a text they hold",
    )
    p.add_argument(
        "--per-category", type=argtypes.positive_int, default=1, help="questions per category (first turn of each)"
    )
    p.add_argument("--categories", default="", help="comma-separated subset of categories")
    p.add_argument("--max-new-tokens", type=argtypes.positive_int, default=128)


def _add_method_arguments(p: argparse.ArgumentParser) -> None:
    """The model, its drafters and the methods compared, and what runs them."""
    p.add_argument("--model", default="default")
    p.add_argument("--datastore", default=None, help="index for retrieval (default: the default chat datastore)")
    p.add_argument("--draft-model", default=None, help="a small model for hf-assisted and our model drafter")
    p.add_argument("--methods", default=",".join(ALL_METHODS))
    p.add_argument(
        "--base",
        default="",
        help="the method every speedup is over (default: the backend's own plain loop, hf or llama; e.g. llama-server)",
    )
    p.add_argument(
        "--head",
        default=None,
        help="recurrent head for the recurrent drafter (default: the app's head for --model, when one was trained)",
    )
    p.add_argument("--budget", type=argtypes.count, default=None, help="draft nodes per step (default: adaptive)")
    p.add_argument("--code-prompts", type=argtypes.count, default=0, help="also this many HumanEval-style code prompts")
    p.add_argument("--device", type=argtypes.device, default=None)
    p.add_argument(
        "--dtype",
        type=argtypes.dtype,
        default=None,
        help="float32, bfloat16 or float16 (default: as the app picks; every method runs in the same dtype)",
    )
    p.add_argument(
        "--backend",
        choices=BACKENDS,
        default="auto",
        help="what runs the model (auto: llama.cpp for a GGUF on the CPU); the baseline is that "
        "backend's own plain loop: HF generate (hf) or llama-cpp-python's Llama (llama)",
    )


def _add_learning_arguments(p: argparse.ArgumentParser) -> None:
    """Second turns, and answers learned before the run (with their learning curve)."""
    p.add_argument(
        "--second-turns",
        action="store_true",
        help="also each question's second turn (after the model's own first answer)",
    )
    p.add_argument(
        "--learn-from",
        default=None,
        help="a distilled answers file (`datastore distill` writes "
        "<out>.answers.jsonl) whose answers are learned before the run",
    )
    p.add_argument(
        "--learned-answers", type=argtypes.positive_int, default=None, help="learn only the first N of --learn-from"
    )
    p.add_argument(
        "--learning-curve",
        default=None,
        help="e.g. 0,50,200,1000: auto's speedup on held-out "
        "ShareGPT prompts after N answers of --learn-from were learned",
    )
    p.add_argument("--held-out", type=argtypes.positive_int, default=12, help="prompts per point of the learning curve")


def _add_output_arguments(p: argparse.ArgumentParser) -> None:
    """Repeated runs for steadier times, and where the results are written."""
    p.add_argument(
        "--repeats",
        type=argtypes.positive_int,
        default=1,
        help="run every method this many times per prompt, the order rotated each round, and "
        "keep the median time (a busy machine's noise is per run)",
    )
    p.add_argument("--json", dest="json_out", default=None)
    p.add_argument("--markdown", default=None)
    p.add_argument("--trace", default=None, help="our methods' steps as JSON lines here, for `bench project`")


def load_questions(path: str, per_category: int, categories: set[str]) -> list[dict]:
    path = str(NAMED_QUESTIONS.get(path, path))
    if not Path(path).is_file():
        raise FileNotFoundError(f"question file not found: {path} (pass --questions)")
    by_cat: dict[str, list[dict]] = defaultdict(list)
    known = set()
    with open(path, encoding="utf-8") as f:
        for line in f:
            if line.strip():
                q = json.loads(line)
                known.add(q["category"])
                if (not categories or q["category"] in categories) and len(by_cat[q["category"]]) < per_category:
                    by_cat[q["category"]].append(q)
    missing = ", ".join(sorted(categories - known))
    if categories and not by_cat:
        raise ValueError(f"no such categories in {path}: {missing} (it has: {', '.join(sorted(known))})")
    if missing:
        print(f"no such categories in {path}, skipped: {missing}")
    return [q for qs in by_cat.values() for q in qs]


def run(args: argparse.Namespace) -> int:
    import tempfile

    from draftscope.drafters.learned import LearnedStore
    from draftscope.engine.engine import Engine

    methods = _methods_asked(args)
    questions = load_questions(args.questions, args.per_category, {c for c in args.categories.split(",") if c})
    if args.code_prompts:
        questions += load_questions(str(CODE_PROMPTS), args.code_prompts, set())
    engine = Engine.load(args.model, device=args.device, dtype=args.dtype, backend=args.backend)
    scratch = tempfile.TemporaryDirectory(prefix="draftscope-bench-")
    learned = LearnedStore("bench", engine.vocab, Path(scratch.name))
    opened = _open_runners(args, engine, methods, learned)
    runners, methods, base = opened.runners, opened.methods, opened.base
    answers = distilled(args.learn_from) if args.learn_from else []
    if answers and not args.learning_curve:
        learn_answers(learned, engine, answers[: args.learned_answers])
    _print_header(args, engine, runners, methods, questions, learned)
    curves = _measure_curves(engine, runners.peers is not None or wants_prompt_table(questions))
    if args.trace:
        Path(args.trace).write_text("")  # each answer's steps are added as it ends
    warm = engine.encode_chat([{"role": "user", "content": "Hi"}])
    runners.plain(warm)
    runners.ours(warm, [])
    if args.learning_curve:
        return learning_curve(args, engine, answers, runners, Path(scratch.name))
    rows = []
    for qi, q in enumerate(questions):
        rows += measure_question(args, runners, methods, base, q, f"[{qi + 1}/{len(questions)}]")
    if runners.peers is not None:
        runners.peers.close()
    curves += [c for c in [engine_curve(engine.verify_costs, "ours at the end")] if c]
    report(args, rows, methods, base, engine.backend.kind, learned, curves)
    return 0


def _methods_asked(args) -> list[str]:
    methods = [m for m in args.methods.split(",") if m]
    if not args.draft_model:
        methods = [m for m in methods if m not in NEEDS_DRAFT_MODEL]
    unknown = sorted(set(methods + ([args.base] if args.base else [])) - set(ALL_METHODS))
    if unknown:
        raise ValueError(f"unknown method(s): {', '.join(unknown)} (known: {', '.join(ALL_METHODS)})")
    if args.learning_curve and not args.learn_from:
        raise ValueError("--learning-curve needs --learn-from (a distilled answers file)")
    return methods


class _Opened(NamedTuple):
    runners: object  # spec_methods.Runners
    methods: list[str]  # those that can run here, the base first
    base: str  # the method every speedup is over


def _open_runners(args, engine, methods: list[str], learned) -> _Opened:
    """The runners, the methods that can run here and the base: other backends' loops dropped, the
    base first, the peers started, the drafters' datastore, head and draft model opened."""
    from draftscope.bench.spec_methods import LlamaReference, Runners, server_peers
    from draftscope.datastore.default import default_datastore_path
    from draftscope.drafters.draft_model import load_draft_model
    from draftscope.drafters.recurrent.heads import find_recurrent
    from draftscope.retrieval import Reader

    kind = engine.backend.kind
    others = {m for k, refs in REFERENCES.items() if k != kind for m in refs}
    base = args.base or REFERENCES[kind][0]
    if base in others:
        raise ValueError(f"--base {base} does not run on the {kind} backend")
    methods = [base] + [m for m in methods if m not in others and m != base]
    datastore = Path(args.datastore) if args.datastore else default_datastore_path(args.model)
    reads = [k.name for k in KINDS if k.needs is DATASTORE] + ["composite"]
    if any(m in methods for m in reads) and not datastore.is_file():
        raise FileNotFoundError(
            f"datastore not found: {datastore} (build it with `draftscope datastore build-default`)"
        )
    reference = LlamaReference(engine, args.max_new_tokens) if kind == "llama.cpp" else None
    peers = server_peers(methods, engine, args)
    methods = [m for m in methods if m not in SERVER_METHODS or (peers and m in peers.servers)]
    if base not in methods:
        raise ValueError(f"--base {base} cannot run here (see above)")
    recurrent = find_recurrent(args.model, engine, args.head)
    if recurrent is None:
        methods = [m for m in methods if m not in NEEDS_HEAD]
    reader = Reader(datastore) if datastore.is_file() else None  # read once, shared by every method and prompt
    draft = load_draft_model(args.draft_model, engine).model if args.draft_model else None
    runners = Runners(
        args, engine, reader=reader, learned=learned, recurrent=recurrent, draft=draft, reference=reference, peers=peers
    )
    return _Opened(runners, methods, base)


def _print_header(args, engine, runners, methods, questions, learned) -> None:
    import sys

    torch = sys.modules.get("torch")  # its version where a method ran on it; llama.cpp's runs need none
    torch_words = f"torch {torch.__version__}" if torch else "no torch"
    recurrent = runners.recurrent
    print(
        f"draftscope bench spec: {engine.name} on {engine.backend.describe()} ({engine.dtype_reason}), "
        f"draft model {args.draft_model or 'none'}, {len(questions)} questions, "
        f"max {args.max_new_tokens} new tokens, methods {', '.join(methods)}; "
        f"recurrent head {recurrent.path if recurrent else 'none'}"
        f"{f' (beams {recurrent.width} wide, {recurrent.length} deep)' if recurrent else ''}; "
        f"learned answers at the start: {learned.stats().answers}"
    )
    if recurrent is not None and recurrent.measured:
        print(
            "recurrent head ms per beam-search depth by width: "
            f"{ {w: round(s * 1000, 2) for w, s in recurrent.measured.items()} } ({recurrent.layout or 'GPU'})"
        )
    print(
        f"machine: {platform.machine()} {_cpu_name()}, {os.cpu_count()} cores, {torch_words}, "
        f"{time.strftime('%Y-%m-%d')}; "
        f"verify cost ms by tree size: { {k: round(v * 1000, 1) for k, v in engine.verify_costs.items()} }"
    )


def _measure_curves(engine, llama_bench: bool) -> list:
    """The verify costs the step policy starts from (measured at load) and, on llama.cpp where
    asked (beside the peers, or for the grounded prompts' ceiling), llama-bench's curve, printed."""
    curves = [c for c in [engine_curve(engine.verify_costs, "ours at load")] if c]
    if llama_bench and engine.backend.kind == "llama.cpp":
        measured = backend_curve(engine.backend)
        print(f"verify curve: {measured}" if isinstance(measured, str) else describe(measured), flush=True)
        curves += [] if isinstance(measured, str) else [measured]
    return curves


def measure_question(args, runners, methods: list[str], base: str, q: dict, label: str) -> list[dict]:
    """Every method on the question's turns (the second after the baseline's first answer)."""
    engine, rows, messages = runners.engine, [], []
    for turn, text in enumerate(q["turns"][: 2 if args.second_turns else 1], start=1):
        messages.append({"role": "user", "content": text})
        ids = engine.encode_chat(messages)
        first = {}  # the baseline's answer (the oracle drafts it): the baseline runs first in round one

        def run_method(m):
            out = runners.answer(m, ids, base, first.get("ids"), question=q["question_id"])  # noqa: B023 - called at once, in this iteration
            if m == base:
                first.setdefault("ids", out.tokens)  # noqa: B023 - called at once, in this iteration
            return out

        results = repeated(run_method, methods, args.repeats)
        base_run = results[base]
        for m, r in results.items():
            rows.append(_row(q, turn, m, r, base_run))
        if "auto" in results:  # as the app does: the answer is learned once it is given
            runners.learned.add(ids, results["auto"].tokens)
            runners.learned.rebuild()
        messages.append(
            {"role": "assistant", "content": engine.tokenizer.decode(base_run.tokens, skip_special_tokens=True)}
        )
        line = ", ".join(f"{m} {len(r.tokens) / r.seconds:.1f}" for m, r in results.items())
        print(f"{label} {q['category']}{' (turn 2)' if turn == 2 else ''}: tok/s {line}", flush=True)
    return rows


def _row(q: dict, turn: int, m: str, r: Run, base_run: Run) -> dict:
    base_ids, base_t = base_run.tokens, base_run.seconds
    return {
        "question_id": q["question_id"],
        "category": q["category"],
        "turn": turn,
        "method": m,
        "tokens": len(r.tokens),
        "seconds": r.seconds,
        "steps": r.steps,
        "draft_ms": r.draft_ms,
        "first_s": r.first_s,
        "first_tokens": r.first_tokens,
        "writing_s": r.writing_seconds(),
        "longest_run": r.longest_run,
        "equal": r.tokens == base_ids,
        "speedup": (len(r.tokens) / r.seconds) / (len(base_ids) / base_t) if r.seconds and base_ids else None,
    }


def report(args, rows: list[dict], methods: list[str], base: str, kind: str, learned, curves=()) -> None:
    from draftscope.sysinfo import peak_rss_mb

    table = summarise(rows, methods, base)
    text = format_table(table, methods) + "\n\n" + worst_prompts(rows, methods, base) + draft_costs(rows, methods)
    if "plain" in methods and base != "plain":  # what drafting costs or gains over our own plain decoding
        text += "\n\n" + worst_prompts(
            against(rows, "plain"), [m for m in methods if m not in REFERENCES[kind]], "plain"
        )
    timing = timing_table(table, methods, base)
    text += "\n\n" + timing if timing else ""
    text += _curve_report(rows, methods, list(curves))
    print(text)
    print(
        f"peak resident memory of this run: {peak_rss_mb():,.0f} MiB (every method's model in one process: "
        "compare memory with one method a run)"
    )
    print(f"learned answers at the end: {learned.stats().answers}")
    if args.json_out:
        measured = {c.source: c.ms for c in curves}
        Path(args.json_out).write_text(json.dumps({"rows": rows, "summary": table, "curves": measured}, indent=2))
    if args.markdown:
        Path(args.markdown).write_text(text + "\n")


def _curve_report(rows: list[dict], methods: list[str], curves: list) -> str:
    """Prompt by prompt against the ceiling (grounded runs), and the verify curves side by side."""
    text = ""
    if wants_prompt_table(rows):
        top = ceiling_curve(curves)
        text += "\n\n" + prompt_table(rows, methods, top.ceiling() if top else None, top.source if top else "")
    curves = sorted(curves, key=lambda c: c.llama_bench)  # ours first, llama.cpp's own beside them
    return text + ("\n\n" + curve_table(curves) if curves else "")


def repeated(run_method, methods: list[str], repeats: int) -> dict:
    """Each method run ``repeats`` times, the order rotated each round so no method always follows
    the same one; the run of median time is kept (the answer is the same every time: greedy)."""
    runs: dict[str, list[Run]] = {m: [] for m in methods}
    for r in range(repeats):
        shift = r % len(methods)
        for m in methods[shift:] + methods[:shift]:
            runs[m].append(run_method(m))
    return {m: sorted(rs, key=lambda x: x.seconds)[len(rs) // 2] for m, rs in runs.items()}


def learning_curve(args, engine, answers, runners, scratch: Path) -> int:
    """auto's speedup on ShareGPT prompts the answers file does not hold, after N answers learned."""
    from draftscope.datastore.distill import prompt_id, read_prompts
    from draftscope.drafters.learned import LearnedStore

    seen = {a.id for a in answers}
    pool = read_prompts(None, limit=len(seen) + 10 * args.held_out)
    held_out = [p for p in pool if prompt_id(p) not in seen][-args.held_out :]  # from the end: never distilled
    points = [int(x) for x in args.learning_curve.split(",") if x.strip()]
    print(f"learning curve: {len(held_out)} held-out ShareGPT prompts; {len(answers)} answers available")
    lines = [
        "| answers learned | tokens learned | auto τ | auto speedup over hf | worst prompt |",
        "|---|---|---|---|---|",
    ]
    for n in points:
        store = LearnedStore(f"curve-{n}", engine.vocab, scratch)
        learn_answers(store, engine, answers[:n])
        base_tokens = base_secs = tokens = secs = steps = 0
        worst = float("inf")
        for prompt in held_out:
            ids = engine.encode_chat([{"role": "user", "content": prompt}])
            base_run = runners.plain(ids)
            base_ids, base_t = base_run.tokens, base_run.seconds
            mine = runners.ours(ids, runners.drafters("auto", ids, base_ids, store))
            out, t, st = mine.tokens, mine.seconds, mine.steps
            base_tokens, base_secs = base_tokens + len(base_ids), base_secs + base_t
            tokens, secs, steps = tokens + len(out), secs + t, steps + st
            worst = min(worst, (len(out) / t) / (len(base_ids) / base_t))
        speedup = (tokens / secs) / (base_tokens / base_secs)
        line = f"| {min(n, len(answers))} | {store.stats().tokens:,} | {tokens / steps:.2f} | {speedup:.2f}x | {worst:.2f}x |"
        print(line, flush=True)
        lines.append(line)
    if args.markdown:
        Path(args.markdown).write_text("\n".join(lines) + "\n")
    return 0


def _cpu_name() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor()
