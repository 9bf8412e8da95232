"""``bench spec``'s methods: each answers a prompt's token ids, greedy, and says how long it took,
when its first token was known, and (ours) in how many steps. The baselines are each backend's own
plain loop: Hugging Face ``generate`` for torch, llama-cpp-python's ``Llama`` for llama.cpp; the
peers are llama.cpp's own server and its speculation types (bench/llama_server.py)."""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path

from draftscope.bench.llama_server import METHODS as SERVER_METHODS
from draftscope.bench.spec_prompts import longest_run
from draftscope.drafter_kinds import DRAFT_MODEL, HEAD, auto_switches, kinds


@dataclass
class Run:
    """One answer as a method gave it. ``first_s``: seconds until its first ``first_tokens`` tokens
    were known (prompt reading included; None where the method cannot say, as HF ``generate``)."""

    tokens: list[int]
    seconds: float
    first_s: float | None = None
    first_tokens: int = 1
    steps: int | None = None
    draft_ms: float | None = None
    longest_run: int | None = None  # the most draft tokens accepted in one step (ours only)

    def writing_seconds(self) -> float | None:
        """The time after the first token: what speculation changes (prompt reading is the backend's)."""
        if self.first_s is None or len(self.tokens) <= self.first_tokens or self.seconds <= self.first_s:
            return None
        return self.seconds - self.first_s


class Runners:
    """Every method of one run on one engine: the backend's baseline, the peers, and ours with the
    drafters each method names."""

    def __init__(self, args, engine, *, reader, learned, recurrent, draft, reference, peers) -> None:
        self.args, self.engine = args, engine
        self.reader, self.learned, self.recurrent, self.draft = reader, learned, recurrent, draft
        self.reference, self.peers = reference, peers

    def plain(self, ids, **kw) -> Run:
        """The backend's own plain loop (``hf`` / ``llama``), or HF's with generate's options."""
        if self.reference is not None:
            return self.reference.plain(ids)
        import torch

        engine = self.engine
        t0 = time.perf_counter()
        out = engine.model.generate(
            torch.tensor([ids], device=engine.device),
            max_new_tokens=self.args.max_new_tokens,
            do_sample=False,
            pad_token_id=engine.tokenizer.eos_token_id,
            **kw,
        )
        return Run(out[0, len(ids) :].tolist(), time.perf_counter() - t0)

    def ours(self, ids, drafters, method: str = "", question=None) -> Run:
        from draftscope.engine.engine import GenerationRequest
        from draftscope.engine.events import FinalEvent, StepEvent

        request = GenerationRequest(
            keep_cache=False,
            prompt_ids=ids,
            max_new_tokens=self.args.max_new_tokens,
            drafters=drafters,
            budget=self.args.budget,
        )
        t0 = time.perf_counter()
        steps, final, first_s, first_tokens = [], None, None, 1
        for event in self.engine.generate(request):
            if isinstance(event, StepEvent):
                if first_s is None:  # the first token is known when the first step's event is out
                    first_s, first_tokens = time.perf_counter() - t0, len(event.token_ids)
                steps.append(event)
            elif isinstance(event, FinalEvent):
                final = event
        seconds = time.perf_counter() - t0
        if final is None or final.finish_reason == "error":
            raise RuntimeError(final.error if final else "the answer ended without its final event")
        if self.args.trace and method:  # the warm-up's answer is not traced
            from draftscope.bench.project import write_trace

            write_trace(self.args.trace, method, question, steps)
        draft_ms = [ev.draft_ms for ev in steps if ev.proposed]
        return Run(
            final.token_ids,
            seconds,
            first_s=first_s,
            first_tokens=first_tokens,
            steps=final.stats.steps,
            draft_ms=sum(draft_ms) / len(draft_ms) if draft_ms else None,
            longest_run=longest_run(steps),
        )

    def drafters(self, m: str, ids, base_ids, store=None):
        from draftscope.core.drafter_factory import setup_drafters
        from draftscope.drafters.oracle import OracleDrafter

        store = store or self.learned
        eos = self.engine.tokenizer.eos_token_id
        common = dict(
            datastore=self.reader,
            draft_model=self.draft,
            eos_token_id=eos,
            learned=store,
            recurrent=self.recurrent,
            tokenizer=self.engine.tokenizer,
        )
        if m == "oracle":
            return [OracleDrafter(base_ids, len(ids))]
        if m in ("auto", "auto-no-recurrent"):  # the app's default switches, the draft model if given
            switches = auto_switches(draft_model=self.draft is not None)
            if m == "auto-no-recurrent":
                switches.update({k.name: False for k in kinds() if k.needs is HEAD})
            return setup_drafters(switches, vocab_size=self.engine.vocab, **common).make()
        names = {"plain": [], "composite": self.composite()}.get(m, [m])
        return setup_drafters(",".join(names) or "none", **common).make()

    def composite(self) -> list[str]:
        """``composite``: every kind at hand but the recurrent head's (that one is measured alone and
        in ``auto``), the draft model's only when one is given."""
        return [
            k.name for k in kinds() if k.needs is not HEAD and (k.needs is not DRAFT_MODEL or self.draft is not None)
        ]

    def answer(self, m: str, ids, base: str, base_ids, question=None) -> Run:
        """Method ``m``'s answer; ``base_ids`` is the baseline's (the oracle drafts it)."""
        if m in SERVER_METHODS:
            return server_run(self.peers.answer(m, ids))
        if m == base or m in ("hf", "llama"):
            return self.plain(ids)
        if m == "llama-pld":
            return self.reference.prompt_lookup(ids)
        if m == "hf-pld":
            return self.plain(ids, prompt_lookup_num_tokens=10)
        if m == "hf-assisted":
            return self.plain(ids, assistant_model=self.draft)
        return self.ours(ids, self.drafters(m, ids, base_ids), method=m, question=question)


class LlamaReference:
    """llama-cpp-python's own loops on the engine's GGUF, threads and context: what CPU users
    already run. Greedy, ending at EOS (kept, as our answers keep it) or the token limit."""

    def __init__(self, engine, max_new_tokens: int) -> None:
        from llama_cpp import Llama
        from llama_cpp.llama_speculative import LlamaPromptLookupDecoding

        # everything on the thread that drives our model (its stepper): from another, its OpenMP
        # team and the engine's slow each other
        self._native = lambda fn, *args, **kwargs: engine.stepper.call(lambda: fn(*args, **kwargs))
        backend = engine.backend
        self.eos = engine.eos_ids
        self.max_new_tokens = max_new_tokens
        options = dict(
            model_path=str(backend.path),
            n_ctx=backend.max_context,
            n_threads=backend.threads,
            n_threads_batch=backend.threads,
            verbose=False,
        )
        self.llm = self._native(Llama, **options)
        self._pld_options = options
        self._pld = None
        self._PLD = LlamaPromptLookupDecoding

    def _run(self, llm, ids) -> Run:
        llm.reset()  # no prompt reuse from the previous run: every method pays its prompt
        t0 = time.perf_counter()
        out, first_s = [], None
        for tok in llm.generate(ids, temp=0.0, top_k=1, top_p=1.0, min_p=0.0, repeat_penalty=1.0):
            out.append(int(tok))
            first_s = time.perf_counter() - t0 if first_s is None else first_s
            if tok in self.eos or len(out) >= self.max_new_tokens:
                break
        return Run(out, time.perf_counter() - t0, first_s)

    def plain(self, ids) -> Run:
        return self._native(self._run, self.llm, ids)

    def prompt_lookup(self, ids) -> Run:
        if self._pld is None:  # its own Llama: the draft model is fixed at construction
            from llama_cpp import Llama

            # logits_all spelt out: llama-cpp-python 0.3.36 turns it on for a draft model but sizes
            # its score buffer by the argument (n_batch rows), so prompts over 512 tokens fail there
            self._pld = self._native(
                Llama, **self._pld_options, logits_all=True, draft_model=self._PLD(num_pred_tokens=10)
            )
        return self._native(self._run, self._pld, ids)


def server_run(answer) -> Run:
    """A llama-server answer as a Run. Its first token is known when its prompt reading ends:
    ``predicted_ms`` is the time after that (the server samples the first token from the prompt's
    last logits and counts it among ``predicted_n``)."""
    predicted = answer.timings.get("predicted_ms")
    first_s = max(0.0, answer.seconds - predicted / 1000) if isinstance(predicted, (int, float)) else None
    return Run(answer.tokens, answer.seconds, first_s)


def server_peers(methods: list[str], engine, args):
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


def distilled(path: str) -> list:
    from draftscope.datastore.distill import load_answers

    if not Path(path).is_file():
        raise FileNotFoundError(
            f"answers file not found: {path} (`draftscope datastore distill` writes <out>.answers.jsonl)"
        )
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
