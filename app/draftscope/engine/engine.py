"""The decoder loop: draft a tree, verify it in one target forward, keep the accepted path,
emit events. Plain decoding is the same loop with an empty tree, so baseline and speculative
runs share model, cache and logit processing.

State between steps: the target's cache holds every token of prompt + answer except the last
one (the root). A step feeds [root] + tree tokens; logits at the root and at each node give the
target's next-token distributions; verification picks the accepted path and the token the
target adds itself; the cache keeps the root and the accepted nodes only. What runs the target
(torch or llama.cpp) sits behind :mod:`draftscope.engine.backends`; nothing here asks which.
"""

from __future__ import annotations

import threading
import time
from collections import Counter
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field

import numpy as np
import torch

from draftscope.draft_tree import DraftTree
from draftscope.engine.backends.base import Backend
from draftscope.engine.backends.slots import Cancelled, SlotPool
from draftscope.engine.budget import FixedBudget, measure_verify_costs
from draftscope.engine.policy import Calibration, StepPolicy, subtree
from draftscope.engine.events import SOURCE_NAMES, FinalEvent, MessageStats, StepEvent, StepTree
from draftscope.engine.sampling import PositionNoise, SamplingParams, fresh_seed, next_tokens
from draftscope.engine.verify import token_positions, verify_tree


MIN_HELD_FOR_BASELINE = 64  # a cache holding fewer tokens is measured on the fixed prompt instead


class PromptTooLongError(ValueError):
    pass


@dataclass
class GenerationRequest:
    prompt_ids: Sequence[int] | None = None
    messages: Sequence[dict] | None = None  # rendered with the chat template when prompt_ids is None
    max_new_tokens: int = 256
    sampling: SamplingParams = field(default_factory=SamplingParams)
    drafters: Sequence = ()  # empty: plain decoding
    budget: int | None = None  # nodes per step; None = adaptive
    stop_strings: Sequence[str] = ()
    cancel: threading.Event | None = None
    # keep what the cache shares with the prompt (the conversation so far) and read only the rest;
    # False reads the whole prompt again (benchmarks that time prompt reading alike for every method)
    keep_cache: bool = True


def drop_foreign_tokens(tree: DraftTree, vocab: int) -> DraftTree:
    """Drafts whose token is not in the model's vocabulary (a datastore built for another
    tokenizer, a damaged index) are dropped with everything below them: they could never be
    accepted, and the model cannot even embed them."""
    if len(tree) == 0:
        return tree
    bad = (tree.tokens < 0) | (tree.tokens >= vocab)
    if not bad.any():
        return tree
    keep = ~bad
    for i in range(len(tree)):
        parent = int(tree.parents[i])
        if parent >= 0 and not keep[parent]:
            keep[i] = False
    return subtree(tree, keep)


def prune_depth(tree: DraftTree, max_depth: int) -> DraftTree:
    """Drop nodes deeper than ``max_depth`` (they could only produce tokens past the limit)."""
    if len(tree) == 0 or tree.max_depth <= max_depth:
        return tree
    return subtree(tree, tree.depth <= max_depth)


TORCH_THREADS = torch.get_num_threads()  # what torch chose for this machine, before anyone changed it


def share_cores_with(backend, threads: int | None = None) -> None:
    """On llama.cpp, torch only samples (a few small ops a step), but its OpenMP threads spin
    between ops and take the cores llama.cpp's threads compute on: off a process's main thread (the
    window's worker, the server's answers) a step cost 86-100 ms instead of 62 (Qwen2.5-1.5B, 2
    cores). One torch thread there; when a torch model runs, ``threads`` (Settings ▸ Generation ▸
    Threads, --threads), else torch's own choice."""
    torch.set_num_threads(1 if backend.kind == "llama.cpp" else threads or TORCH_THREADS)


def first_nodes(tree: DraftTree, most: int) -> DraftTree:
    """The tree's first ``most`` nodes (parents come before children, so it stays a tree)."""
    if len(tree) <= most:
        return tree
    return subtree(tree, np.arange(len(tree)) < most)


def limit_leaves(tree: DraftTree, max_leaves: int | None) -> DraftTree:
    """At most ``max_leaves`` leaves (a backend shared by several answers gives each fewer cache
    sequences, one per leaf): nodes are kept in the tree's order, parents first, while they do not
    add a leaf past the limit."""
    if max_leaves is None or len(tree) == 0 or len(tree.leaves()) <= max_leaves:
        return tree
    keep = np.zeros(len(tree), dtype=bool)
    is_leaf = np.zeros(len(tree), dtype=bool)
    leaves = 0
    for i in range(len(tree)):
        parent = int(tree.parents[i])
        if parent >= 0 and not keep[parent]:
            continue
        extends = parent >= 0 and is_leaf[parent]  # the parent stops being a leaf: the count holds
        if not extends and leaves >= max_leaves:
            continue
        keep[i], is_leaf[i] = True, True
        if extends:
            is_leaf[parent] = False
        else:
            leaves += 1
    return subtree(tree, keep)


class _Detokenizer:
    """Text of each new token. The tokens since the last piece are decoded together with the few
    before them (so a leading space or a multi-byte character comes out as in the whole text); a
    piece that ends inside a UTF-8 sequence waits for the next token, and bytes that never make a
    character come out as U+FFFD once a later token is readable, as in the whole text's decode."""

    CONTEXT = 4  # tokens decoded before the new ones, for the tokenizer's spacing rules
    MAX_PENDING = 8  # tokens held back at most, then the text goes out as it decodes

    def __init__(self, tokenizer) -> None:
        self.tokenizer = tokenizer
        self.ids: list[int] = []
        self.text = ""
        self._read = 0  # tokens whose text is out

    def push(self, token: int) -> str:
        self.ids.append(token)
        start = max(0, self._read - self.CONTEXT)
        before = self.tokenizer.decode(self.ids[start : self._read], skip_special_tokens=True)
        after = self.tokenizer.decode(self.ids[start:], skip_special_tokens=True)
        if after.endswith("\ufffd") and len(self.ids) - self._read < self.MAX_PENDING:
            return ""  # incomplete UTF-8: the next token may complete it
        piece = after[len(before):] if after.startswith(before) else ""
        self._read = len(self.ids)
        self.text += piece
        return piece


class Engine:
    """``Engine(model, tokenizer)`` runs a torch model; ``Engine(backend=...)`` any backend
    (:func:`draftscope.engine.backends.open_backend` picks and opens one)."""

    def __init__(self, model=None, tokenizer=None, *, name: str = "model", device=None, backend: Backend | None = None,
                 threads: int | None = None) -> None:
        if backend is None:
            from draftscope.engine.backends import torch_backend_for

            backend = torch_backend_for(model, tokenizer, name=name, device=device)
        self.backend = backend
        share_cores_with(backend, threads)
        self.tokenizer = backend.tokenizer
        self.name = backend.name
        self.dtype_reason = backend.precision_reason  # why this precision (shown in the status bar)
        self.vocab = backend.vocab
        self.max_context = backend.max_context
        self.eos_ids = backend.eos_ids
        self.verify_costs: dict[int, float] | None = None
        # Each answer holds a slot of the backend (its own cache) while it runs: one on a backend
        # that holds one answer, several on llama.cpp opened with slots (their steps then share
        # forwards). An answer abandoned mid-way on a thread (its generator never closed) gives its
        # slot to the thread's next answer and stops with an error if resumed.
        self.slots = SlotPool(backend)
        # What the step policy learned of each drafter's acceptance (per source), kept across answers.
        self.calibration = Calibration()
        self.drafter_gates: dict[str, dict] = {}  # which slow drafters earn their time (CompositeDrafter)
        self.baseline_tokens_per_second: float | None = None
        self.baseline_measured_at: float | None = None  # time.monotonic() of the last measurement

    @property
    def model(self):
        """The torch module (None on llama.cpp): the self:N draft model, head training, HF references."""
        return self.backend.model

    @property
    def device(self):
        return self.backend.device

    @property
    def dtype(self):
        """The torch dtype, or None where the backend computes in the file's own formats."""
        return getattr(self.backend, "dtype", None)

    @property
    def precision(self) -> str:
        return self.backend.precision

    @classmethod
    def load(cls, spec: str, *, device: str | None = None, dtype: str | None = None, backend: str = "auto",
             measure: bool = True, slots: int = 1, workers: list[str] | None = None,
             threads: int | None = None, progress=None) -> Engine:
        """``progress(text)`` hears of the slow parts of opening (on CUDA: capturing the step graphs).
        ``threads``: CPU threads the model computes on (None: this computer's cores)."""
        from draftscope.engine.backends import open_backend

        engine = cls(backend=open_backend(spec, backend=backend, device=device, dtype=dtype, slots=slots,
                                          workers=workers, threads=threads, progress=progress), threads=threads)
        if measure:
            engine.measure()
        return engine

    # ------------------------------------------------------------------ measuring

    def measure(self) -> None:
        """Verify cost by tree size (for the adaptive budget) and plain tokens/s (the baseline)."""
        self.verify_costs = measure_verify_costs(self.backend)
        self.slots.set_step_cost(self.verify_costs[0])
        self.measure_baseline()
        if self.slots.shared is not None:  # answers per forward count the answers', not the measurements'
            self.slots.shared.reset_counts()

    def measure_baseline(self, tokens: int = 32) -> float:
        """Plain decoding speed after the first token (prefill excluded): on what the model's cache
        holds (the conversation so far), so measuring again keeps its cache for the next turn, or
        on a fixed prompt when it holds little."""
        held = self.backend.held_tokens(0) if hasattr(self.backend, "held_tokens") else []
        fits = MIN_HELD_FOR_BASELINE <= len(held) < self.max_context - tokens - 1
        prompt = held if fits else list(range(10, 138))
        req = GenerationRequest(prompt_ids=prompt, max_new_tokens=tokens)
        final = [ev for ev in self.generate(req, _ignore_eos=True)][-1]
        self.baseline_tokens_per_second = final.stats.decode_tokens_per_second
        self.baseline_measured_at = time.monotonic()
        return self.baseline_tokens_per_second

    def _speedup(self, decode_tps: float | None) -> float | None:
        if not decode_tps or not self.baseline_tokens_per_second:
            return None
        return decode_tps / self.baseline_tokens_per_second

    # ------------------------------------------------------------------ prompts

    def encode_chat(self, messages: Sequence[dict]) -> list[int]:
        if getattr(self.tokenizer, "chat_template", None):
            text = self.tokenizer.apply_chat_template(list(messages), tokenize=False, add_generation_prompt=True)
            return self.tokenizer(text, add_special_tokens=False)["input_ids"]
        text = "\n\n".join(m["content"] for m in messages)
        return self.tokenizer(text)["input_ids"]

    # ------------------------------------------------------------------ the loop

    def generate(self, request: GenerationRequest, *, _ignore_eos: bool = False) -> Iterator[StepEvent | FinalEvent]:
        prompt = list(request.prompt_ids) if request.prompt_ids is not None else self.encode_chat(request.messages or [])
        if not prompt:
            raise ValueError("empty prompt")
        if len(prompt) >= self.max_context:
            raise PromptTooLongError(
                f"the prompt has {len(prompt):,} tokens; {self.name} reads at most {self.max_context:,} "
                "(shorten the conversation or start a new one)"
            )
        if any(not 0 <= t < self.vocab for t in prompt):
            raise ValueError(f"prompt token ids must be in [0, {self.vocab})")
        try:
            # Every face (window, server, terminal) shares the model: as many answers at once as it
            # has slots, the others wait for one.
            try:
                backend = self.slots.acquire(request.cancel, prompt)
            except Cancelled:
                yield FinalEvent("cancel", "", [], MessageStats(0, 0, 0.0, 0.0, 0.0, 0.0, None))
                return
            try:
                yield from self._loop(request, prompt, _ignore_eos, backend)
            finally:
                self.slots.release(backend)
        except PromptTooLongError:
            raise
        except Exception as exc:  # reported as an event: the GUI shows it, the answer so far stays
            yield FinalEvent("error", "", [], MessageStats(0, 0, 0.0, 0.0, 0.0, 0.0, None), error=f"{type(exc).__name__}: {exc}")

    @torch.inference_mode()
    def _loop(self, request: GenerationRequest, prompt: list[int], ignore_eos: bool,
              backend: Backend) -> Iterator[StepEvent | FinalEvent]:
        params = request.sampling
        # The seed decides every token at T > 0 (with the position): kept with the answer.
        seed = None if params.greedy else (params.seed if params.seed is not None else fresh_seed())
        noise = None if seed is None else PositionNoise(seed, self.vocab)
        drafters = list(request.drafters)
        for d in drafters:
            if hasattr(d, "set_sampling"):  # a draft model couples its drafts to the same noise
                d.set_sampling(params, noise)
            d.reset(prompt)
        if not drafters:
            budget = FixedBudget(0)
        elif request.budget is not None:
            budget = FixedBudget(request.budget)
        else:
            if self.verify_costs is None:
                self.verify_costs = measure_verify_costs(backend)
            budget = StepPolicy(self.verify_costs, calibration=self.calibration)
        drafter = drafters[0] if len(drafters) == 1 else None
        if len(drafters) > 1:
            from draftscope.engine.drafting.composite import CompositeDrafter

            step_cost = self.verify_costs.get(0) if self.verify_costs else None
            drafter = CompositeDrafter(drafters, step_cost=step_cost, memory=self.drafter_gates)
        # Drafters that read the target's hidden state (the recurrent head) get it from the
        # forwards the loop runs anyway: the prefill, then each verify step.
        wants_hidden = drafter is not None and getattr(drafter, "wants_hidden", False)
        if wants_hidden and not backend.gives_hidden:
            raise ValueError(f"the recurrent drafter reads the model's hidden state: the {backend.kind} backend "
                             f"{backend.no_hidden_reason}")

        limit = min(request.max_new_tokens, self.max_context - len(prompt))
        ids = list(prompt)
        seen = torch.zeros(self.vocab, dtype=torch.bool)
        seen[torch.tensor(prompt)] = True
        detok = _Detokenizer(self.tokenizer)
        generated: list[int] = []
        accepted_by_source: Counter = Counter()
        started = time.perf_counter()
        first_token_at = None
        if not request.keep_cache:
            backend.truncate(0)
        hidden = backend.start(prompt, want_hidden=wants_hidden)
        kept = backend.last_kept
        if hidden is not None:
            drafter.set_hidden(hidden)
        root = prompt[-1]
        step = 0
        first_step_tokens = 0
        finish = "length"
        max_stop = max((len(s) for s in request.stop_strings), default=0)

        error = None
        sharing = getattr(backend, "answers_in_last_forward", None) is not None and backend.forward_stats() is not None
        forward_answers: list[int] = []  # answers in each step's forward, when the model is shared
        try:
            while len(generated) < limit:
                if request.cancel is not None and request.cancel.is_set():
                    finish = "cancel"
                    break
                if not self.slots.holds(backend):
                    raise RuntimeError("another answer started on this model while this one was paused")
                t0 = time.perf_counter()
                size = budget.draft_budget()
                if backend.max_tree is not None:  # a fixed --budget beyond what a verify takes: trees cut to fit
                    size = min(size, backend.max_tree)
                tree = drafter.propose(ids, size) if (drafter is not None and size > 0) else DraftTree.empty()
                tree = limit_leaves(prune_depth(drop_foreign_tokens(tree, self.vocab), limit - len(generated) - 1),
                                    getattr(backend, "max_leaves", None))
                shared = backend.forward_stats() if hasattr(backend, "forward_stats") else None
                tree = first_nodes(budget.trim(tree, size, shared), size)
                t1 = time.perf_counter()
                verified = backend.verify(root, tree, want_hidden=wants_hidden)
                if sharing:
                    forward_answers.append(backend.answers_in_last_forward() or 1)
                logits = verified.logits
                row_seen = None
                if params.repetition_penalty != 1.0:
                    row_seen = seen.repeat(len(tree) + 1, 1)
                    for i in range(len(tree)):
                        row_seen[i + 1, torch.tensor(tree.token_path(i))] = True
                    row_seen = row_seen.to(logits.device)
                chosen = next_tokens(logits, params, token_positions(tree, len(ids)), noise, row_seen, verified.best)
                path, bonus = verify_tree(tree, chosen)
                backend.commit(path)
                if wants_hidden:  # the position that predicted the bonus token, the next root
                    drafter.set_hidden(verified.hidden[1 + path[-1] if path else 0])
                t2 = time.perf_counter()

                emitted = [int(tree.tokens[i]) for i in path] + [bonus]
                provenance = [SOURCE_NAMES[int(tree.source[i])] for i in path] + ["target"]
                emitted = emitted[: limit - len(generated)]
                stop_here = False
                if not ignore_eos:
                    for k, tok in enumerate(emitted):
                        if tok in self.eos_ids:
                            emitted, stop_here, finish = emitted[: k + 1], True, "eos"
                            break
                provenance = provenance[: len(emitted)]
                pieces = []
                for tok in emitted:
                    pieces.append(detok.push(tok))
                    generated.append(tok)
                    if max_stop and any(s in detok.text[-(max_stop + 16):] for s in request.stop_strings):
                        stop_here, finish = True, "stop"
                        break
                emitted = emitted[: len(pieces)]
                provenance = provenance[: len(pieces)]
                for src in provenance:
                    if src != "target":
                        accepted_by_source[src] += 1
                ids.extend(emitted)
                seen[torch.tensor(emitted)] = True
                root = ids[-1]
                budget.update(tree, path, draft_seconds=t1 - t0, verify_seconds=t2 - t1,
                              drafted=drafter is not None and size > 0,
                              shared=backend.forward_stats() if hasattr(backend, "forward_stats") else None)
                if drafter is not None:
                    drafter.observe(emitted)
                    if hasattr(drafter, "feedback"):
                        drafter.feedback(tree, path)
                step += 1
                now = time.perf_counter()
                if first_token_at is None:
                    first_token_at = now
                elapsed = now - started
                tps = len(generated) / elapsed if elapsed > 0 else 0.0
                if step == 1:
                    first_step_tokens = len(generated)
                decode_tps = (len(generated) - first_step_tokens) / (now - first_token_at) if now > first_token_at else None
                yield StepEvent(
                    step=step,
                    token_ids=emitted,
                    pieces=pieces,
                    provenance=provenance,
                    tree=StepTree.of(tree),
                    accepted_path=path[: len(emitted)],  # nodes whose tokens were emitted (EOS may cut the path)
                    proposed=len(tree),
                    accepted=min(len(path), len(emitted)),
                    draft_ms=(t1 - t0) * 1000,
                    verify_ms=(t2 - t1) * 1000,
                    total_ms=(now - t0) * 1000,
                    tokens_total=len(generated),
                    steps_total=step,
                    tau=len(generated) / step,
                    tokens_per_second=tps,
                    speedup_estimate=self._speedup(decode_tps),
                    elapsed_ms=elapsed * 1000,
                    decode_tokens_per_second=decode_tps,
                )
                if stop_here:
                    break

        except Exception as exc:  # noqa: BLE001 - the answer so far stays; the error is said with it
            if not generated:
                raise
            finish, error = "error", f"{type(exc).__name__}: {exc}"
        if isinstance(budget, StepPolicy):  # what this answer's steps cost is the next answer's start
            self.verify_costs = dict(budget.costs)
        elapsed = time.perf_counter() - started
        text = self.tokenizer.decode(generated, skip_special_tokens=True)
        if finish == "stop":
            cut = min((text.find(s) for s in request.stop_strings if s in text), default=len(text))
            text = text[:cut]
        tps = len(generated) / elapsed if elapsed > 0 else 0.0
        decode_tps = None
        if first_token_at is not None and step > 1:
            decode_tps = (len(generated) - first_step_tokens) / (started + elapsed - first_token_at)
        stats = MessageStats(
            tokens=len(generated),
            steps=step,
            tau=len(generated) / step if step else 0.0,
            tokens_per_second=tps,
            time_to_first_token_ms=((first_token_at or time.perf_counter()) - started) * 1000,
            elapsed_s=elapsed,
            speedup_estimate=self._speedup(decode_tps),
            decode_tokens_per_second=decode_tps,
            drafters=[d.name for d in drafters],
            accepted_by_source=dict(accepted_by_source),
            seed=seed,
            answers_per_forward=sum(forward_answers) / len(forward_answers) if forward_answers else None,
            prompt_tokens=len(prompt),
            prompt_kept=kept,
        )
        yield FinalEvent(finish, text, generated, stats, prompt_tail=prompt[-8:], error=error)
