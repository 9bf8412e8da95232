"""One answer as a state the stepper (engine/stepper.py) advances a round at a time: ``plan`` says what
the next forward should hold for it (a part of its prompt, or a root and a draft tree), ``accept``
takes that forward's result (verification, commit, events; the stop rules are engine/writing.py's).
Its events go to its own queue, which ``Engine.generate`` yields from. Its state is grouped: how far
its prompt is read (``reading``) and what it has said (``writing``).

A prompt is read one way on every backend: the slot keeps what its cache shares with the prompt
(``keep_prefix``), then the rest goes in Prefill parts, as large as the backend and the forward allow.

The state between steps: the slot's cache holds every token of prompt + answer except the last one (the
root). A step feeds [root] + tree; the logits at the root and at each node give the target's next-token
distributions; verification picks the accepted path and the token the target adds itself; the cache
keeps the root and the accepted nodes only."""

from __future__ import annotations

import queue
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol, TypeAlias, cast

import numpy as np

from draftscope.draft_tree import DraftTree, drop_foreign_tokens, first_nodes, limit_leaves, prune_depth
from draftscope.engine.acceptance import Calibration
from draftscope.engine.ahead_marks import AheadMark, prompt_figures
from draftscope.engine.answer_speed import AnswerSpeed, EngineRates, StepTiming
from draftscope.engine.backends.base import Backend, SlotView, Verified
from draftscope.engine.backends.work import PREFILL_BATCH, SHARED_PREFILL, ForwardStats, Prefill, Verify
from draftscope.engine.budget import DraftBudget, FixedBudget, measure_verify_costs
from draftscope.engine.detokenizer import Detokenizer, Tokenizer
from draftscope.engine.drafting import Drafting, combined
from draftscope.engine.events import Event, FinalEvent, MessageStats, ReadingEvent, StepEvent, StepTree, TokenLogprob
from draftscope.engine.fork import fork_of
from draftscope.engine.grammar import Constraint, ForcedDrafts, masked, vocabulary_of
from draftscope.engine.logprobs import said_logprobs
from draftscope.engine.loop_guard import LoopGuard
from draftscope.engine.policy import StepPolicy
from draftscope.engine.request import GenerationRequest
from draftscope.engine.sampling import PositionNoise, SeenTokens, fresh_seed, next_tokens
from draftscope.engine.verify import penalised_rows, token_positions, verify_tree
from draftscope.engine.writing import Said, Writing

if TYPE_CHECKING:
    from draftscope.engine.arrays import Array

# Prompt tokens between two ReadingEvents, for a request that asks for them (the window): a long
# prompt is read in parts of this size, so its reader hears how far the reading is.
READ_CHUNK = 256
# A read ahead's chunks (in slots read in chunks: llama.cpp, torch's slots): an answer that needs its
# slot waits at most one, so short (~0.4 s of a 1.5B model's reading on 2 cores); it reads while the
# user types, so its own speed matters less. A one-answer backend reads it in READ_CHUNK parts.
AHEAD_CHUNK = 64


# What a forward gives an answer for its work: a Prefill's last hidden state (when asked) or None, a
# Verify's Verified, or the error that work met
ForwardResult: TypeAlias = "Verified | Array | BaseException | None"


class AnswerEngine(EngineRates, Protocol):
    """What an answer reads of its engine (engine/engine.py's Engine), its speed's figures besides."""

    tokenizer: Tokenizer
    vocab: int
    max_context: int
    eos_ids: set[int]
    calibration: Calibration


class EventQueue(Protocol):
    """Where an answer says its events and its reader takes them: a queue (engine/event_feed.py's
    LoopFeed for a reader on an event loop)."""

    def put(self, event: Event, /) -> None: ...

    def get(self) -> Event: ...


def empty_stats() -> MessageStats:
    return MessageStats(0, 0, 0.0, 0.0, 0.0, 0.0, None)


@dataclass
class _Step:
    """The step in flight: its tree and when its drafting began and ended."""

    tree: DraftTree
    drafted: bool
    began: float
    drafted_at: float
    masks: np.ndarray | None = None  # each verify row's grammar mask (None: no grammar)
    forward_seconds: float = 0.0  # its forward's time (the verify's sampling aside)


@dataclass
class _Reading:
    """How far the prompt is in the slot's cache: what was kept from before, then read on."""

    kept: int = 0  # prompt positions the cache kept from the answers before (not read again)
    at: int = 0  # the next prompt position to read
    restored: tuple[int, float] = (0, 0.0)  # of those kept, tokens loaded from a cache on disk, and the seconds


class Answer:
    """The answer to one request, from its admission into a slot to its final event."""

    def __init__(
        self, engine: AnswerEngine, request: GenerationRequest, prompt: list[int], *, ignore_eos: bool = False
    ) -> None:
        self.engine, self.request, self.prompt, self.ignore_eos = engine, request, prompt, ignore_eos
        self.events: EventQueue = queue.SimpleQueue[Event]()
        self.said = self.read = 0  # events put, and taken by the reader (the stepper holds an answer ahead of it)
        self.abandoned = False  # its generator was closed or dropped: the stepper frees its slot
        self.finished = False
        self.asked = time.perf_counter()  # its time to first token counts from here, a wait for a slot included
        self.phase = "waiting"  # then "prompt", then "steps"
        self.reading = _Reading()
        self.writing = Writing(  # nothing said until it runs in a slot
            ids=list(prompt),
            limit=min(request.max_new_tokens, engine.max_context - len(prompt)),
            detok=Detokenizer(engine.tokenizer),
            stops=request.stop_strings,
            eos_ids=set() if ignore_eos else engine.eos_ids,
            loops=LoopGuard() if request.stop_loops else None,
        )
        # its grammar, built here so a grammar that cannot be used is refused before the answer queues
        self.constraint = (
            None
            if request.grammar is None
            else Constraint(request.grammar, vocabulary_of(engine.tokenizer, engine.vocab, engine.eos_ids))
        )
        if self.constraint is not None:  # the grammar's end is the answer's, even where EOS is otherwise ignored
            self.writing.eos_ids = self.writing.eos_ids | self.constraint.ends  # a new set: the engine's stays
        self.yielding = False  # a background answer asked by the stepper to give its slot to another answer
        self.ahead: AheadMark | None = None  # what read aheads left in its slot (a foreground answer's)
        self.fork = fork_of(request, self)  # one of n answers to its prompt, which one of them reads
        self.logprobs: list[TokenLogprob] = []  # every step's, where the request asks for them

    def lead(self) -> int:
        """Events said that the reader has not taken yet."""
        return self.said - self.read

    def next_event(self) -> Event:
        event = self.events.get()
        self.read += 1
        return event

    @property
    def kept(self) -> int:
        """Prompt positions its slot's cache kept from the answers before."""
        return self.reading.kept

    @property
    def restored(self) -> tuple[int, float]:
        """Of those kept, the tokens its set-up loaded from a cache on disk, and the seconds it took."""
        return self.reading.restored

    # ------------------------------------------------------------------ set-up (admitted into a slot)

    def begin(self, backend: Backend, slot: int) -> None:
        """Admitted into ``slot`` of ``backend``: its sampling, drafting and reading set up."""
        self.backend, self.slot = backend, slot
        self.started = time.perf_counter()
        self._set_up_sampling()
        self._set_up_drafting()
        self.speed = AnswerSpeed(self.engine, len(self.prompt), [d.name for d in self.drafters])
        self.step: _Step | None = None  # the step in flight (its tree planned, its result not yet taken)
        self._set_up_reading()

    def _set_up_sampling(self) -> None:
        params = self.request.sampling
        # The seed decides every token at T > 0 (with the position): kept with the answer.
        self.seed: int | None = None if params.greedy else (params.seed if params.seed is not None else fresh_seed())
        self.noise: PositionNoise | None = None if self.seed is None else PositionNoise(self.seed, self.engine.vocab)

    def _set_up_drafting(self) -> None:
        engine, req = self.engine, self.request
        self.drafters: list[Drafting] = list(req.drafters)
        if self.drafters and self.constraint is not None:  # drafting: the grammar's forced tokens too
            self.drafters.append(ForcedDrafts(self.constraint))
        for d in self.drafters:
            d.set_sampling(req.sampling, self.noise)  # a draft model couples its drafts to the same noise
            d.reset(self.prompt)
        self.budget: DraftBudget
        if not self.drafters:
            self.budget = FixedBudget(0)
        elif req.budget is not None:
            self.budget = FixedBudget(req.budget)
        else:
            if engine.verify_costs is None:  # the adaptive budget prices trees by what a verify costs
                engine.verify_costs = measure_verify_costs(SlotView(self.backend, self.slot))
            self.budget = StepPolicy(
                engine.verify_costs, calibration=engine.calibration, max_size=self.backend.max_tree
            )
        self.drafter: Drafting | None = self.drafters[0] if len(self.drafters) == 1 else None
        if len(self.drafters) > 1:
            step_cost = engine.verify_costs.get(0) if engine.verify_costs else None
            self.drafter = combined(self.drafters, step_cost=step_cost, memory=engine.drafter_gates)
        # Drafters that read the target's hidden state (the recurrent head) get it from the forwards
        # the answer runs anyway: the prompt's, then each verify step's.
        self.wants_hidden = self.drafter is not None and self.drafter.wants_hidden
        if self.wants_hidden and not self.backend.gives_hidden:
            raise ValueError(
                f"the recurrent drafter reads the model's hidden state: the {self.backend.kind} backend "
                f"{self.backend.no_hidden_reason}"
            )

    def _set_up_reading(self) -> None:
        """What of the prompt the slot's cache keeps: reading the rest starts there."""
        backend, slot = self.backend, self.slot
        backend.ensure_open()  # a child process that ended (a lost worker) opens again
        if not self.request.keep_cache:
            backend.truncate_slot(slot, 0)
        self.phase = "prompt"  # then "steps"
        self.pending: Prefill | Verify | None = None  # the work planned for the forward in flight
        kept = backend.keep_prefix(slot, self.prompt, want_hidden=self.wants_hidden)
        self.reading = _Reading(kept, kept, backend.take_restored(slot))
        self._say_reading(kept)  # "0 of M" while the first part is read

    def read_to(self) -> int:
        """The prompt position the slot's cache holds this answer's prompt to: kept, then read."""
        return len(self.prompt) - 1 if self.phase == "steps" else self.reading.at

    def _say_reading(self, at: int) -> None:
        """A ReadingEvent: the prompt read up to position ``at`` (those kept from before not counted)."""
        total = len(self.prompt) - 1 - self.reading.kept
        if self.request.reading_progress and total > 0:
            self.said += 1
            self.events.put(ReadingEvent(at - self.reading.kept, total))

    # ------------------------------------------------------------------ plan: the next forward's work

    def plan(self, room: int | None, shared: ForwardStats | None) -> Prefill | Verify | None:
        """The work for the next forward, or None: none this round (no room left in it for a prompt
        chunk), or the answer has ended (``finished``: its final event is out). ``room``: tokens the
        forward has left (None: no limit); ``shared``: what the last forward held (ForwardStats) when
        the model is shared, else None."""
        if self.told_to_stop():
            self.writing.finish = "cancel"  # a read ahead that made way ends as a cancel: what it read stays cached
            self.end()
            return None
        if self.phase == "prompt":
            self.pending = self._plan_prompt(room, shared)
            if self.pending is not None or self.phase == "prompt":  # a chunk, or no room for one this round
                return self.pending
        if self.writing.left <= 0:
            self.end()
            return None
        self.pending = self._plan_tree(shared)
        return self.pending

    def told_to_stop(self) -> bool:
        """Cancelled by its caller, or (a background answer) asked to make way for another."""
        return self.yielding or (self.request.cancel is not None and self.request.cancel.is_set())

    def _plan_prompt(self, room: int | None, shared: ForwardStats | None) -> Prefill | None:
        """The prompt's next part; None once it is read (the steps come next) or when the forward has
        no room for one."""
        prefix, at = self.prompt[:-1], self.reading.at
        if at < len(prefix) and self.fork is not None:
            copied = self.fork.copied_for(self)
            if copied is None:  # a sibling reads the prompt: this answer copies its cache once it has
                return None
            if copied:
                self.reading, self.ahead = _Reading(copied, copied), None
                at = copied
        if at >= len(prefix):
            self.phase = "steps"
            return None
        most = self._part_size(room, shared)
        if most <= 0:
            return None
        part = prefix[at : at + most]
        last = at + len(part) == len(prefix)
        return Prefill(part, at, want_hidden=self.wants_hidden and last)

    def _part_size(self, room: int | None, shared: ForwardStats | None) -> int:
        """Prompt tokens the next part may hold. A backend of one answer reads the rest in one forward
        (in READ_CHUNK parts where the reader hears how far it is); one of slots reads in chunks that
        fit the forward, short ones while others decode or where the answer reads ahead."""
        req = self.request
        if not self.backend.reads_in_chunks:
            return READ_CHUNK if req.reading_progress else len(self.prompt)
        most = min(PREFILL_BATCH, self.backend.prefill_batch, PREFILL_BATCH if room is None else room)
        if req.reading_progress:
            most = min(most, READ_CHUNK)
        if shared is not None and shared.answers > 1:  # others are decoding: short chunks keep their steps short
            most = min(most, SHARED_PREFILL)
        if req.background:
            most = min(most, AHEAD_CHUNK)
        return most

    def _plan_tree(self, shared: ForwardStats | None) -> Verify:
        began = time.perf_counter()
        writing = self.writing
        size = self.budget.draft_budget()
        if self.backend.max_tree is not None:  # a fixed --budget beyond what a verify takes: trees cut to fit
            size = min(size, self.backend.max_tree)
        drafter = self.drafter
        tree = drafter.propose(writing.ids, size) if (drafter is not None and size > 0) else DraftTree.empty()
        tree = drop_foreign_tokens(tree, self.engine.vocab)
        tree = limit_leaves(prune_depth(tree, writing.left - 1), self.backend.leaves)
        tree = first_nodes(self.budget.trim(tree, size, shared), size)
        masks = None
        if self.constraint is not None:  # what the grammar forbids is cut; each row's mask kept for accept
            tree, masks = self.constraint.plan(tree)
        self.step = _Step(tree, drafter is not None and size > 0, began, time.perf_counter(), masks)
        # the slot's cache holds every token said but the root: a backend of slots checks it still does
        past = len(writing.ids) - 1
        return Verify(writing.ids[-1], tree, past=past, want_hidden=self.wants_hidden)

    # ------------------------------------------------------------------ accept: the forward's result

    def accept(self, result: ForwardResult, *, seconds: float, answers: int, shared: ForwardStats | None) -> None:
        """Take the forward's result for the work planned (an error raised: the stepper ends the
        answer with it). The final event is out once ``finished``."""
        item, self.pending = self.pending, None
        if isinstance(result, BaseException):
            raise result
        if isinstance(item, Prefill):
            self.reading.at += len(item.tokens)
            self._say_reading(self.reading.at)
            # the prompt's last position: the recurrent drafter's first state (wants_hidden: a drafter)
            if item.want_hidden and result is not None and self.drafter is not None:
                self.drafter.set_hidden(cast("Array", result))  # a Prefill's result: its hidden state
            return
        if self.backend.slots > 1:
            self.writing.forward_answers.append(answers)
        # the result of the Verify planned with self.step
        self._accept_tree(cast(_Step, self.step), cast(Verified, result), seconds, shared)

    def _accept_tree(self, step: _Step, verified: Verified, seconds: float, shared: ForwardStats | None) -> None:
        began_accept = time.perf_counter()
        tree = step.tree
        logits, best = verified.logits, verified.best
        if step.masks is not None:  # the grammar is part of the rule: each row sampled under its mask
            logits, best = masked(logits, step.masks), None
        chosen = next_tokens(
            logits,
            self.request.sampling,
            token_positions(tree, len(self.writing.ids)),
            self.noise,
            self._rows_seen(tree, logits),
            best,
        )
        path, bonus = verify_tree(tree, chosen)
        self.backend.commit_slot(self.slot, path)
        if self.wants_hidden and self.drafter is not None:  # the position that predicted the bonus token, the next root
            self.drafter.set_hidden(self._hidden(verified)[1 + path[-1] if path else 0])
        verify_s, step.forward_seconds = seconds + time.perf_counter() - began_accept, seconds
        said = self.writing.say(tree, path, bonus)
        if self.constraint is not None:
            self.constraint.consume(said.tokens)
        self.budget.update(
            tree,
            path,
            draft_seconds=step.drafted_at - step.began,
            verify_seconds=verify_s,
            drafted=step.drafted,
            shared=shared,
        )
        if self.drafter is not None:
            self.drafter.observe(said.tokens)
            self.drafter.feedback(tree, path)
        self.said += 1
        event = self._step_event(step, path, said, verify_s, shared)
        if self.request.logprobs is not None:  # from the raw rows that chose the tokens, before any mask
            ends, top = self.writing.eos_ids, self.request.logprobs
            event.logprobs = said_logprobs(verified.logits, path, said.tokens, ends, top)
            self.logprobs += event.logprobs
        self.events.put(event)
        if said.stop:
            self.end()

    def _hidden(self, verified: Verified) -> Array:
        """The verify's hidden states, asked for (want_hidden) by an answer whose drafter reads them."""
        if verified.hidden is None:
            raise RuntimeError(f"the {self.backend.kind} backend gave no hidden state for a verify that asked for it")
        return verified.hidden

    def _rows_seen(self, tree: DraftTree, logits: Array) -> SeenTokens | None:
        """For the repetition penalty: the tokens it covers at each row (the last window of them)."""
        params = self.request.sampling
        if not params.penalised:
            return None
        return penalised_rows(self.writing.ids, tree, params.repetition_window, logits.shape[-1])

    def _step_event(
        self, step: _Step, path: list[int], said: Said, verify_s: float, shared: ForwardStats | None
    ) -> StepEvent:
        writing = self.writing
        writing.steps += 1
        now = time.perf_counter()
        if writing.first_token_at is None:
            writing.first_token_at = now
        elapsed = now - self.started
        done = len(writing.generated)
        alone = shared is None or shared.answers <= 1  # a shared forward's time is not a plain step's
        self.speed.step(
            now=now,
            done=done,
            emitted=len(said.tokens),
            timing=StepTiming(len(step.tree), alone, step.drafted_at - step.began, step.forward_seconds),
            budget=self.budget,
        )
        return StepEvent(
            step=writing.steps,
            token_ids=said.tokens,
            pieces=said.pieces,
            provenance=said.provenance,
            tree=StepTree.of(step.tree),
            accepted_path=path[: len(said.tokens)],  # nodes whose tokens were said (EOS may cut the path)
            proposed=len(step.tree),
            accepted=min(len(path), len(said.tokens)),
            draft_ms=(step.drafted_at - step.began) * 1000,
            verify_ms=verify_s * 1000,
            total_ms=(now - step.began) * 1000,
            tokens_total=done,
            steps_total=writing.steps,
            tau=done / writing.steps,
            tokens_per_second=done / elapsed if elapsed > 0 else 0.0,
            elapsed_ms=elapsed * 1000,
            **self.speed.figures(now, done),
        )

    # ------------------------------------------------------------------ the end

    def fail(self, exc: BaseException) -> None:
        """A failure in this answer's work ends it with its error: the answer so far stays."""
        if not self.writing.generated:
            self._say_final(FinalEvent("error", "", [], empty_stats(), error=f"{type(exc).__name__}: {exc}"))
            return
        self.writing.finish, self.writing.error = "error", f"{type(exc).__name__}: {exc}"
        self.end()

    def cancelled_waiting(self) -> None:
        self._say_final(FinalEvent("cancel", "", [], empty_stats()))

    def end(self) -> None:
        """Say the final event (the answer's text and statistics)."""
        if isinstance(self.budget, StepPolicy):  # what this answer's steps cost is the next answer's start
            self.engine.verify_costs = dict(self.budget.costs)
        writing = self.writing
        self._say_final(
            FinalEvent(
                writing.finish,
                writing.final_text(self.engine.tokenizer),
                writing.generated,
                self._final_stats(),
                prompt_tail=self.prompt[-8:],
                logprobs=None if self.request.logprobs is None else self.logprobs,
                error=writing.error,
            )
        )

    def _final_stats(self) -> MessageStats:
        writing, elapsed = self.writing, time.perf_counter() - self.started
        done, steps = len(writing.generated), writing.steps
        figures = self.speed.figures(self.speed.last_at, done, final=True)  # writing ends at the last token
        self.speed.learn()  # after the figures: they compare with the curve as it stood around the answer
        shared = writing.forward_answers
        return MessageStats(
            tokens=done,
            steps=steps,
            tau=done / steps if steps else 0.0,
            tokens_per_second=done / elapsed if elapsed > 0 else 0.0,
            time_to_first_token_ms=((writing.first_token_at or time.perf_counter()) - self.asked) * 1000,
            elapsed_s=elapsed,
            drafters=[d.name for d in self.drafters],
            accepted_by_source=dict(writing.by_source),
            seed=self.seed,
            answers_per_forward=sum(shared) / len(shared) if shared else None,
            prompt_tokens=len(self.prompt),
            prompt_kept=self.reading.kept,
            **self._prompt_figures(),
            **figures,
        )

    def _prompt_figures(self) -> dict[str, Any]:
        """Of the kept prompt: what read aheads read before it was asked, and what came from disk."""
        figures = prompt_figures(self.ahead, self.reading.kept, self.reading.restored)
        return {
            "prompt_read_ahead": figures.read_ahead,
            "prompt_restored": figures.restored,
            "restore_seconds": figures.restore_seconds,
        }

    def _say_final(self, event: FinalEvent) -> None:
        self.finished = True
        self.said += 1
        self.events.put(event)
