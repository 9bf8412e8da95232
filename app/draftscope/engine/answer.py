"""One answer as a state the stepper (engine/stepper.py) advances a round at a time: ``plan`` says what
the next forward should hold for it (its prompt, a chunk of it, or a root and a draft tree), ``accept``
takes that forward's result (verification, commit, stop rules, events). Its events go to its own queue,
which ``Engine.generate`` yields from.

The state between steps: the slot's cache holds every token of prompt + answer except the last one (the
root). A step feeds [root] + tree; the logits at the root and at each node give the target's next-token
distributions; verification picks the accepted path and the token the target adds itself; the cache
keeps the root and the accepted nodes only."""

from __future__ import annotations

import queue
import time
from collections import Counter
from dataclasses import dataclass, field

import torch

from draftscope.draft_tree import DraftTree
from draftscope.engine.ahead_marks import AheadMark, prompt_figures
from draftscope.engine.answer_speed import AnswerSpeed
from draftscope.engine.backends.held import KeepsPrefixes, positions_to_keep
from draftscope.engine.backends.work import PREFILL_BATCH, SHARED_PREFILL, Prefill, Start, Verify
from draftscope.engine.budget import DraftBudget, FixedBudget, InSlot, measure_verify_costs
from draftscope.engine.detokenizer import Detokenizer
from draftscope.engine.events import SOURCE_NAMES, FinalEvent, MessageStats, ReadingEvent, StepEvent, StepTree
from draftscope.engine.loop_guard import LoopGuard
from draftscope.engine.policy import StepPolicy
from draftscope.engine.sampling import PositionNoise, fresh_seed, next_tokens
from draftscope.engine.tree_cuts import cut_pieces, drop_foreign_tokens, first_nodes, limit_leaves, prune_depth
from draftscope.engine.verify import penalised_rows, token_positions, verify_tree

# Prompt tokens between two ReadingEvents, for a request that asks for them (the window): a long
# prompt is read in parts of this size, so its reader hears how far the reading is.
READ_CHUNK = 256
# A read ahead's chunks (in slots read in Prefill chunks: llama.cpp): an answer that needs its slot waits
# at most one, so short (~0.4 s of a 1.5B model's reading on 2 cores); it reads while the user types,
# so its own speed matters less. One-slot torch grows its Starts by READ_CHUNK.
AHEAD_CHUNK = 64


def empty_stats() -> MessageStats:
    return MessageStats(0, 0, 0.0, 0.0, 0.0, 0.0, None)


@dataclass
class _Step:
    """The step in flight: its tree and when its drafting began and ended."""

    tree: DraftTree
    drafted: bool
    began: float
    drafted_at: float


@dataclass
class _Tally:
    """What the answer has said so far, for its events and its final statistics."""

    generated: list[int] = field(default_factory=list)
    by_source: Counter = field(default_factory=Counter)
    steps: int = 0
    first_token_at: float | None = None
    forward_answers: list[int] = field(default_factory=list)  # answers in each of its forwards (shared models)


class Answer:
    """The answer to one request, from its admission into a slot to its final event."""

    def __init__(self, engine, request, prompt: list[int], *, ignore_eos: bool = False) -> None:
        self.engine, self.request, self.prompt, self.ignore_eos = engine, request, prompt, ignore_eos
        self.events: queue.SimpleQueue = queue.SimpleQueue()
        self.said = self.read = 0  # events put, and taken by the reader (the stepper holds an answer ahead of it)
        self.abandoned = False  # its generator was closed or dropped: the stepper frees its slot
        self.finished = False
        self.slot: int | None = None
        self.asked = time.perf_counter()  # its time to first token counts from here, a wait for a slot included
        self.phase = "waiting"  # then "prompt", then "steps"
        self.kept, self.reading_at, self.grows = 0, None, None  # where its prompt's reading starts and is
        self.restored = (0, 0.0)  # kept tokens its set-up loaded from a cache on disk, and the seconds
        self.yielding = False  # a background answer asked by the stepper to give its slot to another answer
        self.ahead: AheadMark | None = None  # what read aheads left in its slot (a foreground answer's)

    def lead(self) -> int:
        """Events said that the reader has not taken yet."""
        return self.said - self.read

    def next_event(self):
        event = self.events.get()
        self.read += 1
        return event

    # ------------------------------------------------------------------ set-up (admitted into a slot)

    def begin(self, backend, slot: int) -> None:
        self.backend, self.slot = backend, slot
        self.started = time.perf_counter()
        self._set_up_sampling()
        self._set_up_drafting()
        req, prompt = self.request, self.prompt
        self.limit = min(req.max_new_tokens, self.engine.max_context - len(prompt))
        self.ids = list(prompt)
        self.detok = Detokenizer(self.engine.tokenizer)
        self.tally = _Tally()
        self.speed = AnswerSpeed(self.engine, len(prompt), [d.name for d in self.drafters])
        self.finish, self.error = "length", None
        self.max_stop = max((len(s) for s in req.stop_strings), default=0)
        self.loops = LoopGuard() if req.stop_loops else None  # a verbatim repetition ends the answer
        self.root = prompt[-1]
        self.step: _Step | None = None
        self._set_up_reading()

    def _set_up_sampling(self) -> None:
        params = self.request.sampling
        # The seed decides every token at T > 0 (with the position): kept with the answer.
        self.seed = None if params.greedy else (params.seed if params.seed is not None else fresh_seed())
        self.noise = None if self.seed is None else PositionNoise(self.seed, self.engine.vocab)

    def _set_up_drafting(self) -> None:
        engine, req = self.engine, self.request
        self.drafters = list(req.drafters)
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
                engine.verify_costs = measure_verify_costs(InSlot(self.backend, self.slot))
            self.budget = StepPolicy(
                engine.verify_costs, calibration=engine.calibration, max_size=self.backend.max_tree
            )
        self.drafter = self.drafters[0] if len(self.drafters) == 1 else None
        if len(self.drafters) > 1:
            from draftscope.drafters.composite import CompositeDrafter

            step_cost = engine.verify_costs.get(0) if engine.verify_costs else None
            self.drafter = CompositeDrafter(self.drafters, step_cost=step_cost, memory=engine.drafter_gates)
        # Drafters that read the target's hidden state (the recurrent head) get it from the forwards
        # the answer runs anyway: the prompt's, then each verify step's.
        self.wants_hidden = self.drafter is not None and self.drafter.wants_hidden
        if self.wants_hidden and not self.backend.gives_hidden:
            raise ValueError(
                f"the recurrent drafter reads the model's hidden state: the {self.backend.kind} backend "
                f"{self.backend.no_hidden_reason}"
            )

    def _set_up_reading(self) -> None:
        """What of the prompt the slot's cache keeps, and where reading the rest starts."""
        backend, slot = self.backend, self.slot
        backend.ensure_open()  # a child process that ended (a lost worker) opens again
        if not self.request.keep_cache:
            backend.truncate_slot(slot, 0)
        self.phase = "prompt"  # then "steps"
        self.pending = None  # the work planned for the forward in flight
        self.kept = 0
        self.reading_at = None  # the next prompt position to read in chunks (None: read whole by start)
        self.past = None  # the positions this answer put in its slot's cache (chunked backends check it)
        # A one-slot backend that keeps what its cache shares with a prompt reads a long prompt as the
        # Starts of its growing prefixes, each reading only its new part (same cache, same tokens):
        # the position read to (None: one Start reads it whole).
        self.grows = None
        if backend.reads_in_chunks:
            self.kept = backend.keep_prefix(slot, self.prompt, want_hidden=self.wants_hidden)
            self.reading_at = self.past = self.kept
        elif self.request.reading_progress and isinstance(backend, KeepsPrefixes):
            self.kept = self.grows = positions_to_keep(
                backend.held_tokens(slot), self.prompt, want_hidden=self.wants_hidden
            )
        self._take_restored()
        if self.reading_at is not None or self.grows is not None:
            self._say_reading(self.kept)  # "0 of M" while the first part is read

    def _take_restored(self) -> None:
        """Add what the slot's last prompt set-up loaded from disk (a one-slot backend loads in its start)."""
        tokens, seconds = self.backend.take_restored(self.slot)
        self.restored = (self.restored[0] + tokens, self.restored[1] + seconds)

    def read_to(self) -> int:
        """The prompt position the slot's cache holds this answer's prompt to: kept, then read."""
        if self.phase != "prompt":
            return len(self.prompt) - 1 if self.phase == "steps" else self.kept
        if self.reading_at is not None:
            return self.reading_at
        return self.grows if self.grows is not None else self.kept

    def _say_reading(self, at: int) -> None:
        """A ReadingEvent: the prompt read up to position ``at`` (those kept from before not counted)."""
        total = len(self.prompt) - 1 - self.kept
        if self.request.reading_progress and total > 0:
            self.said += 1
            self.events.put(ReadingEvent(at - self.kept, total))

    # ------------------------------------------------------------------ plan: the next forward's work

    def plan(self, room: int | None, shared) -> object | None:
        """The work for the next forward, or None: none this round (no room left in it for a prompt
        chunk), or the answer has ended (``finished``: its final event is out). ``room``: tokens the
        forward has left (None: no limit); ``shared``: what the last forward held (ForwardStats) when
        the model is shared, else None."""
        if self.told_to_stop():
            self.finish = "cancel"  # a read ahead that made way ends as a cancel: what it read stays cached
            self.end()
            return None
        if self.phase == "prompt":
            self.pending = self._plan_prompt(room, shared)
            if self.pending is not None or self.phase == "prompt":  # a chunk, or no room for one this round
                return self.pending
        if len(self.tally.generated) >= self.limit:
            self.end()
            return None
        self.pending = self._plan_tree(shared)
        return self.pending

    def told_to_stop(self) -> bool:
        """Cancelled by its caller, or (a background answer) asked to make way for another."""
        return self.yielding or (self.request.cancel is not None and self.request.cancel.is_set())

    def _plan_prompt(self, room: int | None, shared) -> Start | Prefill | None:
        """The prompt whole (backends that read it in their start) or its next chunk; None once read."""
        if self.reading_at is None:
            if self.grows is not None and self.grows + READ_CHUNK < len(self.prompt) - 1:
                return Start(self.prompt[: self.grows + READ_CHUNK + 1])  # its last token is read by the next part
            return Start(self.prompt, want_hidden=self.wants_hidden)
        prefix = self.prompt[:-1]
        if self.reading_at >= len(prefix):
            self.phase = "steps"
            return None
        most = min(PREFILL_BATCH, self.backend.prefill_batch, PREFILL_BATCH if room is None else room)
        if self.request.reading_progress:
            most = min(most, READ_CHUNK)
        # others are decoding: short chunks keep their steps short
        if shared is not None and shared.answers > 1:
            most = min(most, SHARED_PREFILL)
        if self.request.background:
            most = min(most, AHEAD_CHUNK)
        if most <= 0:
            return None
        chunk = prefix[self.reading_at : self.reading_at + most]
        last = self.reading_at + len(chunk) == len(prefix)
        return Prefill(chunk, self.reading_at, want_hidden=self.wants_hidden and last)

    def _plan_tree(self, shared) -> Verify:
        began = time.perf_counter()
        size = self.budget.draft_budget()
        if self.backend.max_tree is not None:  # a fixed --budget beyond what a verify takes: trees cut to fit
            size = min(size, self.backend.max_tree)
        drafter = self.drafter
        tree = drafter.propose(self.ids, size) if (drafter is not None and size > 0) else DraftTree.empty()
        tree = drop_foreign_tokens(tree, self.engine.vocab)
        tree = limit_leaves(prune_depth(tree, self.limit - len(self.tally.generated) - 1), self.backend.leaves)
        tree = first_nodes(self.budget.trim(tree, size, shared), size)
        self.step = _Step(tree, drafter is not None and size > 0, began, time.perf_counter())
        return Verify(self.root, tree, past=self.past, want_hidden=self.wants_hidden)

    # ------------------------------------------------------------------ accept: the forward's result

    def accept(self, result, *, seconds: float, answers: int, shared) -> None:
        """Take the forward's result for the work planned (an error raised: the stepper ends the
        answer with it). The final event is out once ``finished``."""
        item, self.pending = self.pending, None
        if isinstance(result, BaseException):
            raise result
        if isinstance(item, Start):
            read_to = len(item.prompt) - 1
            if self.grows is None:
                self.kept = self.backend.last_kept
            else:
                self.grows = read_to
            self._take_restored()
            if read_to == len(self.prompt) - 1:
                self.phase = "steps"
            self._say_reading(read_to)
        elif isinstance(item, Prefill):
            self.reading_at = self.past = self.reading_at + len(item.tokens)
            self._say_reading(self.reading_at)
        else:
            if self.backend.slots > 1:
                self.tally.forward_answers.append(answers)
            self._accept_tree(self.step, result, seconds, shared)
            return
        if item.want_hidden and result is not None:  # the prompt's last position: the recurrent drafter's first state
            self.drafter.set_hidden(result)

    def _accept_tree(self, step: _Step, verified, seconds: float, shared) -> None:
        began_accept = time.perf_counter()
        tree = step.tree
        chosen = next_tokens(
            verified.logits,
            self.request.sampling,
            token_positions(tree, len(self.ids)),
            self.noise,
            self._rows_seen(tree, verified.logits),
            verified.best,
        )
        path, bonus = verify_tree(tree, chosen)
        self.backend.commit_slot(self.slot, path)
        if self.past is not None:
            self.past += 1 + len(path)
        if self.wants_hidden:  # the position that predicted the bonus token, the next root
            self.drafter.set_hidden(verified.hidden[1 + path[-1] if path else 0])
        verify_s = seconds + time.perf_counter() - began_accept
        emitted, provenance, stop = self._emit(tree, path, bonus)
        self.budget.update(
            tree,
            path,
            draft_seconds=step.drafted_at - step.began,
            verify_seconds=verify_s,
            drafted=step.drafted,
            shared=shared,
        )
        if self.drafter is not None:
            self.drafter.observe(emitted)
            self.drafter.feedback(tree, path)
        self.said += 1
        self.events.put(self._step_event(step, path, emitted, provenance, verify_s, shared))
        if stop:
            self.end()

    def _rows_seen(self, tree: DraftTree, logits: torch.Tensor) -> torch.Tensor | None:
        """For the repetition penalty: the tokens it covers at each row (the last window of them)."""
        params = self.request.sampling
        if not params.penalised:
            return None
        return penalised_rows(self.ids, tree, params.repetition_window, logits.shape[-1]).to(logits.device)

    def _emit(self, tree: DraftTree, path: list[int], bonus: int) -> tuple[list[int], list[str], bool]:
        """The step's tokens as said: cut at the length limit, at an end-of-sequence token, at a stop string."""
        tally = self.tally
        emitted = ([int(tree.tokens[i]) for i in path] + [bonus])[: self.limit - len(tally.generated)]
        provenance = [SOURCE_NAMES[int(tree.source[i])] for i in path] + ["target"]
        stop = False
        if not self.ignore_eos:
            for k, tok in enumerate(emitted):
                if tok in self.engine.eos_ids:
                    emitted, stop, self.finish = emitted[: k + 1], True, "eos"
                    break
        self.pieces = []
        step_start = len(self.detok.text)
        for tok in emitted:
            searched_from = max(0, len(self.detok.text) - self.max_stop + 1)  # a stop may begin in earlier text
            self.pieces.append(self.detok.push(tok))
            tally.generated.append(tok)
            stop_at = self._stop_at(searched_from) if self.max_stop else None
            if stop_at is not None:
                stop, self.finish = True, "stop"
                self.pieces = cut_pieces(self.pieces, stop_at - step_start)
                break
            if self.loops is not None and self.loops.repeats(tok):
                stop, self.finish = True, "loop"
                break
        emitted, provenance = emitted[: len(self.pieces)], provenance[: len(self.pieces)]
        tally.by_source.update(src for src in provenance if src != "target")
        self.ids.extend(emitted)
        self.root = self.ids[-1]
        self.path_said = path[: len(emitted)]  # nodes whose tokens were emitted (EOS may cut the path)
        return emitted, provenance, stop

    def _stop_at(self, start: int) -> int | None:
        """Where the first stop string in the text begins, searched from ``start`` (all the new text:
        one token may carry a whole line of indentation); None when none is there."""
        found = [at for at in (self.detok.text.find(s, start) for s in self.request.stop_strings) if at >= 0]
        return min(found, default=None)

    def _step_event(
        self, step: _Step, path: list[int], emitted: list[int], provenance: list[str], verify_s: float, shared
    ) -> StepEvent:
        tally = self.tally
        tally.steps += 1
        now = time.perf_counter()
        if tally.first_token_at is None:
            tally.first_token_at = now
        elapsed = now - self.started
        done = len(tally.generated)
        alone = shared is None or shared.answers <= 1  # a shared forward's time is not a plain step's
        self.speed.step(
            now=now,
            done=done,
            emitted=len(emitted),
            plain=alone and len(step.tree) == 0,
            draft_seconds=step.drafted_at - step.began,
            budget=self.budget,
        )
        return StepEvent(
            step=tally.steps,
            token_ids=emitted,
            pieces=self.pieces,
            provenance=provenance,
            tree=StepTree.of(step.tree),
            accepted_path=self.path_said,
            proposed=len(step.tree),
            accepted=min(len(path), len(emitted)),
            draft_ms=(step.drafted_at - step.began) * 1000,
            verify_ms=verify_s * 1000,
            total_ms=(now - step.began) * 1000,
            tokens_total=done,
            steps_total=tally.steps,
            tau=done / tally.steps,
            tokens_per_second=done / elapsed if elapsed > 0 else 0.0,
            elapsed_ms=elapsed * 1000,
            **self.speed.figures(now, done),
        )

    # ------------------------------------------------------------------ the end

    def fail(self, exc: BaseException) -> None:
        """A failure in this answer's work ends it with its error: the answer so far stays."""
        if getattr(self, "tally", None) is None or not self.tally.generated:
            self._say_final(FinalEvent("error", "", [], empty_stats(), error=f"{type(exc).__name__}: {exc}"))
            return
        self.finish, self.error = "error", f"{type(exc).__name__}: {exc}"
        self.end()

    def cancelled_waiting(self) -> None:
        self._say_final(FinalEvent("cancel", "", [], empty_stats()))

    def end(self) -> None:
        """Say the final event (the answer's text and statistics)."""
        if isinstance(self.budget, StepPolicy):  # what this answer's steps cost is the next answer's start
            self.engine.verify_costs = dict(self.budget.costs)
        self._say_final(
            FinalEvent(
                self.finish,
                self._final_text(),
                self.tally.generated,
                self._final_stats(),
                prompt_tail=self.prompt[-8:],
                error=self.error,
            )
        )

    def _final_text(self) -> str:
        text = self.engine.tokenizer.decode(self.tally.generated, skip_special_tokens=True)
        if self.finish == "stop":
            cut = min((text.find(s) for s in self.request.stop_strings if s in text), default=len(text))
            text = text[:cut]
        return text

    def _final_stats(self) -> MessageStats:
        tally, elapsed = self.tally, time.perf_counter() - self.started
        done, steps = len(tally.generated), tally.steps
        figures = self.speed.figures(self.speed.last_at, done, final=True)  # writing ends at the last token
        self.speed.learn()  # after the figures: they compare with the curve as it stood around the answer
        shared = tally.forward_answers
        return MessageStats(
            tokens=done,
            steps=steps,
            tau=done / steps if steps else 0.0,
            tokens_per_second=done / elapsed if elapsed > 0 else 0.0,
            time_to_first_token_ms=((tally.first_token_at or time.perf_counter()) - self.asked) * 1000,
            elapsed_s=elapsed,
            drafters=[d.name for d in self.drafters],
            accepted_by_source=dict(tally.by_source),
            seed=self.seed,
            answers_per_forward=sum(shared) / len(shared) if shared else None,
            prompt_tokens=len(self.prompt),
            prompt_kept=self.kept,
            **self._prompt_figures(),
            **figures,
        )

    def _prompt_figures(self) -> dict:
        """Of the kept prompt: what read aheads read before it was asked, and what came from disk."""
        figures = prompt_figures(self.ahead, self.kept, self.restored)
        return {
            "prompt_read_ahead": figures.read_ahead,
            "prompt_restored": figures.restored,
            "restore_seconds": figures.restore_seconds,
        }

    def _say_final(self, event: FinalEvent) -> None:
        self.finished = True
        self.said += 1
        self.events.put(event)
