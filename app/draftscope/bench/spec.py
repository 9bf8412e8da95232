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
with the model's own first answer in the context.

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

from draftscope.rules import BACKENDS
from draftscope.bench.llama_server import METHODS as SERVER_METHODS
from draftscope.core import argtypes

DEFAULT_QUESTIONS = Path(__file__).resolve().parents[3] / ".." / "shared" / "bench" / "spec_bench_question.jsonl"
CODE_PROMPTS = Path(__file__).with_name("code_prompts.jsonl")
ALL_METHODS = ["hf", "hf-pld", "hf-assisted", "llama", "llama-pld", *SERVER_METHODS, "auto", "auto-no-recurrent", "plain", "retrieval", "context", "learned",
               "recurrent", "composite", "model", "oracle"]
NEEDS_HEAD = ("recurrent", "auto-no-recurrent")  # methods that only make sense with a recurrent head
REFERENCES = {"torch": ("hf", "hf-pld", "hf-assisted"),  # each backend's own loops
              "llama.cpp": ("llama", "llama-pld", *SERVER_METHODS)}


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--questions", default=os.environ.get("DRAFTSCOPE_SPEC_BENCH", str(DEFAULT_QUESTIONS)),
                   help="Spec-Bench question file (JSONL with question_id, category, turns)")
    p.add_argument("--per-category", type=argtypes.positive_int, default=1, help="questions per category (first turn of each)")
    p.add_argument("--categories", default="", help="comma-separated subset of categories")
    p.add_argument("--max-new-tokens", type=argtypes.positive_int, default=128)
    p.add_argument("--model", default="default")
    p.add_argument("--datastore", default=None, help="index for retrieval (default: the default chat datastore)")
    p.add_argument("--draft-model", default=None, help="a small model for hf-assisted and our model drafter")
    p.add_argument("--methods", default=",".join(ALL_METHODS))
    p.add_argument("--head", default=None, help="recurrent head for the recurrent drafter (default: the app's head "
                   "for --model, when one was trained)")
    p.add_argument("--budget", type=argtypes.count, default=None, help="draft nodes per step (default: adaptive)")
    p.add_argument("--code-prompts", type=argtypes.count, default=0, help="also this many HumanEval-style code prompts")
    p.add_argument("--device", type=argtypes.device, default=None)
    p.add_argument("--dtype", type=argtypes.dtype, default=None, help="float32, bfloat16 or float16 (default: as the app picks; every "
                   "method runs in the same dtype)")
    p.add_argument("--backend", choices=BACKENDS, default="auto",
                   help="what runs the model (auto: llama.cpp for a GGUF on the CPU); the baseline is that "
                   "backend's own plain loop: HF generate (hf) or llama-cpp-python's Llama (llama)")
    p.add_argument("--second-turns", action="store_true", help="also each question's second turn (after the "
                   "model's own first answer)")
    p.add_argument("--learn-from", default=None, help="a distilled answers file (`datastore distill` writes "
                   "<out>.answers.jsonl) whose answers are learned before the run")
    p.add_argument("--learned-answers", type=argtypes.positive_int, default=None, help="learn only the first N of --learn-from")
    p.add_argument("--learning-curve", default=None, help="e.g. 0,50,200,1000: auto's speedup on held-out "
                   "ShareGPT prompts after N answers of --learn-from were learned")
    p.add_argument("--held-out", type=argtypes.positive_int, default=12, help="prompts per point of the learning curve")
    p.add_argument("--repeats", type=argtypes.positive_int, default=1,
                   help="run every method this many times per prompt, the order rotated each round, and "
                        "keep the median time (a busy machine's noise is per run)")
    p.add_argument("--json", dest="json_out", default=None)
    p.add_argument("--markdown", default=None)
    p.add_argument("--trace", default=None, help="our methods' steps as JSON lines here, for `bench project`")


def load_questions(path: str, per_category: int, categories: set[str]) -> list[dict]:
    if not Path(path).is_file():
        raise FileNotFoundError(f"question file not found: {path} (pass --questions)")
    by_cat: dict[str, list[dict]] = defaultdict(list)
    with open(path, encoding="utf-8") as f:
        for line in f:
            if line.strip():
                q = json.loads(line)
                if (not categories or q["category"] in categories) and len(by_cat[q["category"]]) < per_category:
                    by_cat[q["category"]].append(q)
    return [q for qs in by_cat.values() for q in qs]


def run(args: argparse.Namespace) -> int:
    import tempfile

    import torch

    from draftscope.datastore.default import default_datastore_path
    from draftscope.drafters.learned import LearnedStore
    from draftscope.core.drafter_factory import setup_drafters
    from draftscope.drafters.oracle import OracleDrafter
    from draftscope.drafters.recurrent.head_drafter import find_recurrent
    from draftscope.engine.engine import Engine, GenerationRequest
    from draftscope.engine.draft_model import load_draft_model
    from draftscope.storage.settings import Settings

    methods = [m for m in args.methods.split(",") if m]
    if not args.draft_model:
        methods = [m for m in methods if m not in ("hf-assisted", "model", "llama-server-draft")]
    unknown = sorted(set(methods) - set(ALL_METHODS))
    if unknown:
        raise ValueError(f"unknown method(s): {', '.join(unknown)} (known: {', '.join(ALL_METHODS)})")
    if args.learning_curve and not args.learn_from:
        raise ValueError("--learning-curve needs --learn-from (a distilled answers file)")
    questions = load_questions(args.questions, args.per_category, {c for c in args.categories.split(",") if c})
    if args.code_prompts:
        questions += load_questions(str(CODE_PROMPTS), args.code_prompts, set())
    datastore = Path(args.datastore) if args.datastore else default_datastore_path(args.model)
    if any(m in methods for m in ("retrieval", "composite")) and not datastore.is_file():
        raise FileNotFoundError(f"datastore not found: {datastore} (build it with `draftscope datastore build-default`)")

    engine = Engine.load(args.model, device=args.device, dtype=args.dtype, backend=args.backend)
    model, tok = engine.model, engine.tokenizer
    kind = engine.backend.kind
    others = {m for k, refs in REFERENCES.items() if k != kind for m in refs}
    methods = [m for m in methods if m not in others]
    base = REFERENCES[kind][0]  # every speedup is over the backend's own plain loop
    if base not in methods:
        methods.insert(0, base)
    reference = LlamaReference(engine, args.max_new_tokens) if kind == "llama.cpp" else None
    peers = _server_peers(methods, engine, args)
    methods = [m for m in methods if m not in SERVER_METHODS or (peers and m in peers.servers)]
    recurrent = find_recurrent(args.model, engine, args.head)
    from draftscope.retrieval import Reader

    reader = Reader(datastore) if datastore.is_file() else None  # read once, shared by every method and prompt
    if recurrent is None:
        methods = [m for m in methods if m not in NEEDS_HEAD]
    draft = load_draft_model(args.draft_model, engine).model if args.draft_model else None
    scratch = tempfile.TemporaryDirectory(prefix="draftscope-bench-")
    learned = LearnedStore("bench", engine.vocab, Path(scratch.name))
    answers = _distilled(args.learn_from) if args.learn_from else []
    if answers and not args.learning_curve:
        learn_answers(learned, engine, answers[: args.learned_answers])
    print(f"draftscope bench spec: {engine.name} on {engine.backend.describe()} ({engine.dtype_reason}), "
          f"draft model {args.draft_model or 'none'}, {len(questions)} questions, "
          f"max {args.max_new_tokens} new tokens, methods {', '.join(methods)}; "
          f"recurrent head {recurrent.path if recurrent else 'none'}"
          f"{f' (beams {recurrent.width} wide, {recurrent.length} deep)' if recurrent else ''}; "
          f"learned answers at the start: {learned.stats().answers}")
    if recurrent is not None and recurrent.measured:
        print("recurrent head ms per beam-search depth by width: "
              f"{ {w: round(s * 1000, 2) for w, s in recurrent.measured.items()} } ({recurrent.layout or 'GPU'})")
    print(f"machine: {platform.machine()} {_cpu_name()}, {os.cpu_count()} cores, torch {torch.__version__}, "
          f"{time.strftime('%Y-%m-%d')}; "
          f"verify cost ms by tree size: { {k: round(v * 1000, 1) for k, v in engine.verify_costs.items()} }")

    def hf(ids, **kw):
        t0 = time.perf_counter()
        out = model.generate(torch.tensor([ids], device=engine.device), max_new_tokens=args.max_new_tokens,
                             do_sample=False, pad_token_id=tok.eos_token_id, **kw)
        return out[0, len(ids):].tolist(), time.perf_counter() - t0, None, None

    if args.trace:
        Path(args.trace).write_text("")  # each answer's steps are added as it ends

    def ours(ids, drafters, method="", question=None):
        t0 = time.perf_counter()
        events = list(engine.generate(GenerationRequest(keep_cache=False, prompt_ids=ids, max_new_tokens=args.max_new_tokens,
                                                        drafters=drafters, budget=args.budget)))
        final = events[-1]
        if final.finish_reason == "error":
            raise RuntimeError(final.error)
        if args.trace and method:  # the warm-up's answer is not traced
            from draftscope.bench.projection import write_trace

            write_trace(args.trace, method, question, events[:-1])
        draft_ms = [ev.draft_ms for ev in events[:-1] if ev.proposed]
        return final.token_ids, time.perf_counter() - t0, final.stats.steps, (sum(draft_ms) / len(draft_ms)
                                                                                if draft_ms else None)

    def make_drafters(m, ids, base_ids, store=None):
        store = store or learned
        if m == "oracle":
            return [OracleDrafter(base_ids, len(ids))]
        if m in ("auto", "auto-no-recurrent"):  # the app's default switches (Settings), the draft model if given
            switches = dict(Settings().drafters, model=draft is not None)
            if m == "auto-no-recurrent":
                switches["recurrent"] = False
            return setup_drafters(switches, datastore=reader, draft_model=draft, eos_token_id=tok.eos_token_id,
                                  vocab_size=engine.vocab, learned=store, recurrent=recurrent, tokenizer=tok).make()
        every = ["retrieval", "learned", "context"] + (["model"] if draft is not None else [])
        names = {"plain": [], "composite": every}.get(m, [m])
        return setup_drafters(",".join(names) or "none", datastore=reader, draft_model=draft,
                              eos_token_id=tok.eos_token_id, learned=store, recurrent=recurrent, tokenizer=tok).make()

    if reference is not None:
        hf = reference.plain  # noqa: F811 - the llama.cpp backend's baseline is llama.cpp's own loop
    warm = engine.encode_chat([{"role": "user", "content": "Hi"}])
    hf(warm)
    ours(warm, [])
    if args.learning_curve:
        return learning_curve(args, engine, answers, hf, ours, make_drafters, Path(scratch.name))

    rows = []
    for qi, q in enumerate(questions):
        turns = q["turns"][: 2 if args.second_turns else 1]
        messages = []
        for turn, text in enumerate(turns, start=1):
            messages.append({"role": "user", "content": text})
            ids = engine.encode_chat(messages)

            first = {}  # the baseline's answer (the oracle drafts it): the baseline runs first in round one

            def run_method(m):
                if m == base:
                    out = hf(ids)
                    first.setdefault("ids", out[0])
                    return out
                if m == "llama-pld":
                    return reference.prompt_lookup(ids)
                if m in SERVER_METHODS:
                    return peers.answer(m, ids)
                if m == "hf-pld":
                    return hf(ids, prompt_lookup_num_tokens=10)
                if m == "hf-assisted":
                    return hf(ids, assistant_model=draft)
                return ours(ids, make_drafters(m, ids, first["ids"]), method=m, question=q["question_id"])

            results = repeated(run_method, [base, *[m for m in methods if m != base]], args.repeats)
            base_ids, base_t = results[base][0], results[base][1]
            for m, (out, secs, steps, draft_ms) in results.items():
                rows.append({"question_id": q["question_id"], "category": q["category"], "turn": turn, "method": m,
                             "tokens": len(out), "seconds": secs, "steps": steps, "draft_ms": draft_ms,
                             "equal": out == base_ids,
                             "speedup": (len(out) / secs) / (len(base_ids) / base_t) if secs and base_ids else None})
            if "auto" in results:  # as the app does: the answer is learned once it is given
                learned.add(ids, results["auto"][0])
                learned.rebuild()
            messages.append({"role": "assistant", "content": tok.decode(base_ids, skip_special_tokens=True)})
            line = ", ".join(f"{m} {len(r[0]) / r[1]:.1f}" for m, r in results.items())
            print(f"[{qi + 1}/{len(questions)}] {q['category']}{' (turn 2)' if turn == 2 else ''}: tok/s {line}",
                  flush=True)

    if peers is not None:
        peers.close()
    from draftscope.sysinfo import peak_rss_mb

    table = summarise(rows, methods, base)
    text = format_table(table, methods) + "\n\n" + worst_prompts(rows, methods, base) + draft_costs(rows, methods)
    if "plain" in methods and base != "plain":  # what drafting costs or gains over our own plain decoding
        text += "\n\n" + worst_prompts(against(rows, "plain"), [m for m in methods if m not in REFERENCES[kind]], "plain")
    print(text)
    print(f"peak resident memory of this run: {peak_rss_mb():,.0f} MiB (every method's model in one process: "
          "compare memory with one method a run)")
    print(f"learned answers at the end: {learned.stats().answers}")
    if args.json_out:
        Path(args.json_out).write_text(json.dumps({"rows": rows, "summary": table}, indent=2))
    if args.markdown:
        Path(args.markdown).write_text(text + "\n")
    return 0


def repeated(run_method, methods: list[str], repeats: int) -> dict:
    """Each method run ``repeats`` times, the order rotated each round so no method always follows
    the same one; the median time is kept (the answer is the same every time: greedy)."""
    runs: dict[str, list] = {m: [] for m in methods}
    for r in range(repeats):
        shift = r % len(methods)
        for m in methods[shift:] + methods[:shift]:
            runs[m].append(run_method(m))
    out = {}
    for m, rs in runs.items():
        secs = sorted(x[1] for x in rs)
        median = secs[len(secs) // 2] if len(secs) % 2 else (secs[len(secs) // 2 - 1] + secs[len(secs) // 2]) / 2
        out[m] = (rs[0][0], median, *rs[0][2:])
    return out


def _server_peers(methods: list[str], engine, args):
    """The llama-server methods asked for, or None (saying why) where they cannot run."""
    from draftscope.bench.llama_server import LlamaServerPeers

    wanted = [m for m in methods if m in SERVER_METHODS]
    if not wanted:
        return None
    draft = None
    if "llama-server-draft" in wanted:
        from draftscope.models.resolve import resolve_model

        source = resolve_model(args.draft_model)
        if source.kind != "gguf":
            print("llama-server-draft skipped: the draft model is not a GGUF file")
            wanted.remove("llama-server-draft")
        else:
            draft = source.gguf_path
    try:
        return LlamaServerPeers(wanted, engine, args.max_new_tokens, draft)
    except FileNotFoundError as exc:
        print(f"{', '.join(wanted)} skipped: {exc}")
        return None


def draft_costs(rows: list[dict], methods: list[str]) -> str:
    """Mean drafting milliseconds per step that drafted, per method (the head's cost for recurrent)."""
    lines = []
    for m in methods:
        ms = [r["draft_ms"] for r in rows if r["method"] == m and r.get("draft_ms") is not None]
        if ms:
            lines.append(f"| {m} | {sum(ms) / len(ms):.1f} |")
    return "\n\n| method | drafting ms per step |\n|---|---|\n" + "\n".join(lines) if lines else ""


def _distilled(path: str) -> list:
    from draftscope.datastore.distill import load_answers

    if not Path(path).is_file():
        raise FileNotFoundError(f"answers file not found: {path} (`draftscope datastore distill` writes "
                                "<out>.answers.jsonl)")
    return list(load_answers(Path(path)).values())


def learn_answers(store, engine, answers) -> None:
    """Distilled answers (text) into a learned store, tokenised as the engine does."""
    for a in answers:
        prompt = engine.encode_chat([{"role": "user", "content": a.prompt}])
        ids = engine.tokenizer(a.answer, add_special_tokens=False)["input_ids"]
        if a.finished and engine.tokenizer.eos_token_id is not None:
            ids = ids + [engine.tokenizer.eos_token_id]
        store.add(prompt, ids)
    store.rebuild()


def learning_curve(args, engine, answers, hf, ours, make_drafters, scratch: Path) -> int:
    """auto's speedup on ShareGPT prompts the answers file does not hold, after N answers learned."""
    from draftscope.datastore.distill import prompt_id, read_prompts
    from draftscope.drafters.learned import LearnedStore

    seen = {a.id for a in answers}
    pool = read_prompts(None, limit=len(seen) + 10 * args.held_out)
    held_out = [p for p in pool if prompt_id(p) not in seen][-args.held_out:]  # from the end: never distilled
    points = [int(x) for x in args.learning_curve.split(",") if x.strip()]
    print(f"learning curve: {len(held_out)} held-out ShareGPT prompts; {len(answers)} answers available")
    lines = ["| answers learned | tokens learned | auto τ | auto speedup over hf | worst prompt |", "|---|---|---|---|---|"]
    for n in points:
        store = LearnedStore(f"curve-{n}", engine.vocab, scratch)
        learn_answers(store, engine, answers[:n])
        base_tokens = base_secs = tokens = secs = steps = 0
        worst = float("inf")
        for prompt in held_out:
            ids = engine.encode_chat([{"role": "user", "content": prompt}])
            base_ids, base_t, _, _ = hf(ids)
            out, t, st, _ = ours(ids, make_drafters("auto", ids, base_ids, store))
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


def summarise(rows: list[dict], methods: list[str], base: str = "hf") -> dict:
    groups: dict[str, list[dict]] = defaultdict(list)
    for r in rows:
        groups[r["category"]].append(r)
        if r.get("turn", 1) == 2:
            groups["second turns"].append(r)
        groups["overall"].append(r)
    out = {}
    for cat, rs in groups.items():
        base_tps = _tps([r for r in rs if r["method"] == base])
        out[cat] = {}
        for m in methods:
            mr = [r for r in rs if r["method"] == m]
            if not mr:
                continue
            tps = _tps(mr)
            steps = [r["steps"] for r in mr if r["steps"]]
            out[cat][m] = {
                "tokens_per_s": tps,
                "speedup": tps / base_tps if base_tps else None,
                "tau": sum(r["tokens"] for r in mr if r["steps"]) / sum(steps) if steps else None,
                "equal": sum(r["equal"] for r in mr) / len(mr),
            }
    return out


def _tps(rows: list[dict]) -> float:
    secs = sum(r["seconds"] for r in rows)
    return sum(r["tokens"] for r in rows) / secs if secs else 0.0


def format_table(table: dict, methods: list[str]) -> str:
    head = "| category | " + " | ".join(methods) + " |"
    lines = [head, "|" + "---|" * (len(methods) + 1)]
    cats = [c for c in table if c not in ("overall", "second turns")] + [c for c in ("second turns", "overall")
                                                                       if c in table]
    for cat in cats:
        cells = []
        for m in methods:
            v = table[cat].get(m)
            if v is None:
                cells.append("–")
                continue
            tau = f"τ {v['tau']:.2f}, " if v["tau"] else ""
            eq = "" if v["equal"] == 1 else f", same {v['equal']:.0%}"
            cells.append(f"{tau}{v['tokens_per_s']:.1f}/s, {v['speedup']:.2f}x{eq}")
        lines.append(f"| {cat} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def against(rows: list[dict], base: str) -> list[dict]:
    """The rows with each speedup taken over ``base`` on the same prompt and turn."""
    base_rate = {(r["question_id"], r.get("turn", 1)): r["tokens"] / r["seconds"]
                 for r in rows if r["method"] == base and r["seconds"]}
    out = []
    for r in rows:
        ref = base_rate.get((r["question_id"], r.get("turn", 1)))
        speedup = (r["tokens"] / r["seconds"]) / ref if ref and r["seconds"] else None
        out.append(dict(r, speedup=speedup))
    return out


def worst_prompts(rows: list[dict], methods: list[str], base: str = "hf") -> str:
    """Each method's slowest prompt against the baseline on the same prompt."""
    lines = [f"| method | worst prompt (speedup over {base}) | prompts below 0.95x |", "|---|---|---|"]
    for m in methods:
        mine = [r for r in rows if r["method"] == m and r["speedup"] is not None]
        if m == base or not mine:
            continue
        worst = min(mine, key=lambda r: r["speedup"])
        below = sum(r["speedup"] < 0.95 for r in mine)
        lines.append(f"| {m} | {worst['speedup']:.2f}x ({worst['category']} #{worst['question_id']}, turn "
                     f"{worst.get('turn', 1)}) | {below} of {len(mine)} |")
    return "\n".join(lines)


def _cpu_name() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor()


class LlamaReference:
    """llama-cpp-python's own loops on the engine's GGUF, threads and context: what CPU users
    already run. Greedy, ending at EOS (kept, as our answers keep it) or the token limit."""

    def __init__(self, engine, max_new_tokens: int) -> None:
        from llama_cpp import Llama
        from llama_cpp.llama_speculative import LlamaPromptLookupDecoding

        # everything on the thread that drives our model (its stepper): from another, its OpenMP
        # team and the engine's slow each other
        self._native = lambda fn, *args, **kwargs: engine.slots.call(lambda: fn(*args, **kwargs))
        backend = engine.backend
        self.eos = engine.eos_ids
        self.max_new_tokens = max_new_tokens
        options = dict(model_path=str(backend.path), n_ctx=backend.max_context, n_threads=backend.threads,
                       n_threads_batch=backend.threads, verbose=False)
        self.llm = self._native(Llama, **options)
        self._pld_options = options
        self._pld = None
        self._PLD = LlamaPromptLookupDecoding

    def _run(self, llm, ids):
        llm.reset()  # no prompt reuse from the previous run: every method pays its prompt
        t0 = time.perf_counter()
        out = []
        for tok in llm.generate(ids, temp=0.0, top_k=1, top_p=1.0, min_p=0.0, repeat_penalty=1.0):
            out.append(int(tok))
            if tok in self.eos or len(out) >= self.max_new_tokens:
                break
        return out, time.perf_counter() - t0, None, None

    def plain(self, ids):
        return self._native(self._run, self.llm, ids)

    def prompt_lookup(self, ids):
        if self._pld is None:  # its own Llama: the draft model is fixed at construction
            from llama_cpp import Llama

            # logits_all spelt out: llama-cpp-python 0.3.36 turns it on for a draft model but sizes
            # its score buffer by the argument (n_batch rows), so prompts over 512 tokens fail there
            self._pld = self._native(Llama, **self._pld_options, logits_all=True,
                                     draft_model=self._PLD(num_pred_tokens=10))
        return self._native(self._run, self._pld, ids)
