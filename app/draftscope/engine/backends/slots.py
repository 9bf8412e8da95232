"""Several answers on one model at once: each answer holds a slot (its own cache), and the
forwards of the answers stepping at the same time are one forward.

``SlotPool(backend)`` hands out :class:`SlotBackend` views, one per answer; each view is a whole
Backend to the answer loop, which never knows it shares the model. On a backend that can hold
several answers (llama.cpp opened with ``slots`` > 1: a sequence range per slot, ``decode_many``)
the views' ``start`` and ``verify`` calls meet in a :class:`SharedForward`: the first caller waits
until every other answer in progress has asked too, or a short while at most, then runs them all
in one ``llama_decode`` (continuous batching: answers join and leave between steps). Prompts are
read in small chunks while other answers are waiting, so no answer waits behind another's prompt
for more than one short forward. A backend that holds one answer gives one slot, and a second
answer waits for the first to end, as before.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass

from draftscope.draft_tree import DraftTree
from draftscope.engine.backends.base import Backend, Verified
from draftscope.engine.backends.held import common_prefix

MAX_TREE = 64  # nodes per tree (the step policy's largest)
PREFILL_BATCH = 512  # prompt tokens a forward takes at most
SHARED_PREFILL = 64  # prompt tokens a slot adds to a forward other answers are waiting on
WAIT_SHARE = 0.25  # how long the first caller waits for the others, as a share of a plain step
DEFAULT_WAIT_S = 0.010  # before the plain step's cost is known


@dataclass
class Prefill:
    """Prompt tokens for a slot's cache, from position ``start``; no logits wanted."""

    tokens: list[int]
    start: int
    want_hidden: bool = False  # the last token's hidden state as the result (backends that give them)


@dataclass
class Verify:
    """A root and its draft tree: a row of logits for each."""

    root: int
    tree: DraftTree
    past: int | None = None  # the positions the caller put in its slot's cache (None: not checked)
    want_hidden: bool = False  # also the last hidden state of each row (backends that give them)


@dataclass
class ForwardStats:
    """What the last shared forward held, for the step policy: a tree's nodes cost what they add
    to a forward other answers share."""

    tokens: int = 0  # tokens in the forward, every answer's
    answers: int = 0  # answers in it
    seconds: float = 0.0  # the forward's own time (not the waiting)


class SharedForward:
    """Gathers the slots' work and runs it in one forward: the first caller of a round leads it.

    A round closes when every answer in progress has submitted, or when ``wait_s`` has passed since
    the round opened: the moment its first item arrived, or, for items submitted while a forward
    ran, the moment that forward ended. (Counted from each item's own submission, an answer that
    asked mid-forward would find its wait spent when the forward ended and lead a forward alone
    before the others could resubmit: the answers would split into groups taking turns.)"""

    def __init__(self, backend, wait_s: float = DEFAULT_WAIT_S) -> None:
        self.backend = backend
        self.wait_s = wait_s
        self._cond = threading.Condition()
        self._pending: dict[int, object] = {}
        self._results: dict[int, object] = {}
        self._running = False
        self._opened = 0.0  # when the round now gathering began to wait (monotonic)
        self.active: set[int] = set()  # slots whose answers are in progress
        self.last = ForwardStats()
        self.forwards = 0  # forwards run, and the answers they held, since the model was opened
        self.answers_in_forwards = 0
        self.shared_with: dict[int, int] = {}  # slot -> answers in its last forward (itself included)

    def reset_counts(self) -> None:
        """Count forwards from now (after the load-time measurements)."""
        with self._cond:
            self.forwards = self.answers_in_forwards = 0

    @property
    def mean_answers(self) -> float:
        """Answers per forward on average (0.0 before the first)."""
        return self.answers_in_forwards / self.forwards if self.forwards else 0.0

    def run(self, slot: int, item) -> object:
        with self._cond:
            if not self._pending and not self._running:
                self._opened = time.monotonic()
            self._pending[slot] = item
            self._cond.notify_all()
            while slot not in self._results:
                if not self._running:
                    deadline = self._opened + self.wait_s
                    if self.active <= set(self._pending) or time.monotonic() >= deadline:
                        self._lead()
                        continue
                    self._cond.wait(timeout=max(deadline - time.monotonic(), 0.0005))
                else:
                    self._cond.wait()
            result = self._results.pop(slot)
        if isinstance(result, BaseException):
            raise result
        return result

    def _lead(self) -> None:
        """Called holding the lock: run what is pending, the lock released during the forward.
        Whatever happens, every item of the forward gets a result and the waiters are woken."""
        work, self._pending, self._running = self._pending, {}, True
        results: dict[int, object] = {}
        seconds = 0.0
        self._cond.release()
        try:
            started = time.perf_counter()
            out = self.backend.decode_many(work)  # an item that failed has its error as its result
            seconds = time.perf_counter() - started
            results = {slot: out.get(slot) for slot in work}
        except BaseException as exc:  # noqa: BLE001 - each answer in the forward hears of it
            results = {slot: exc for slot in work}
        finally:
            self._cond.acquire()
            self._running = False
            self._opened = time.monotonic()  # items that came during the forward start their wait now
            self._results.update({slot: results.get(slot, RuntimeError("the shared forward ended without a result"))
                                  for slot in work})
            self.shared_with.update({slot: len(work) for slot in work})
            self._cond.notify_all()
        self.forwards += 1
        self.answers_in_forwards += len(work)
        try:  # figures for the step policy: never at the cost of the answers' results
            self.last = ForwardStats(sum(_tokens(w) for w in work.values()), len(work), seconds)
        except Exception:  # noqa: BLE001
            self.last = ForwardStats(0, len(work), seconds)

    def join(self, slot: int) -> None:
        with self._cond:
            self.active.add(slot)

    def leave(self, slot: int) -> None:
        with self._cond:
            self.active.discard(slot)
            self._cond.notify_all()  # a leader may have been waiting for this slot


def _tokens(item) -> int:
    return len(item.tokens) if isinstance(item, Prefill) else 1 + len(item.tree)


class SlotPool:
    """The answers' slots on one backend. ``acquire()`` blocks while every slot is busy.

    A thread holds at most one slot: an answer started on a thread whose previous answer was left
    paused (its generator never closed) takes that slot over, and the paused answer, if resumed,
    stops with an error instead of reading a cache that is no longer its own."""

    def __init__(self, backend: Backend) -> None:
        self.backend = backend
        self.size = int(getattr(backend, "slots", 1))
        self.shared = SharedForward(backend) if self.size > 1 else None
        self._free = list(range(self.size))
        self._owner: dict[int, int] = {}  # slot -> thread id
        self._ticket: dict[int, int] = {}  # slot -> the current holder's ticket
        self._tickets = 0
        self._released = dict.fromkeys(range(self.size), 0)  # slot -> when last released (a count): LRU on ties
        self._cond = threading.Condition()

    @property
    def busy(self) -> int:
        with self._cond:
            return self.size - len(self._free)

    def acquire(self, cancel: threading.Event | None = None, prompt: list[int] | None = None) -> SlotBackend:
        """A slot for an answer to ``prompt``: of the free ones, the one whose cache shares the most
        with it (its conversation's, as llama-server picks), so a follow-up reads only what is new."""
        me = threading.get_ident()
        with self._cond:
            self._tickets += 1
            mine = next((s for s, t in self._owner.items() if t == me), None)
            if mine is None:
                while not self._free:
                    if cancel is not None and cancel.is_set():
                        raise Cancelled("cancelled while waiting for the model")
                    self._cond.wait(timeout=0.1)
                mine = self._best_free(prompt)
                self._free.remove(mine)
            self._owner[mine] = me
            self._ticket[mine] = self._tickets
            view = SlotBackend(self, mine, self._tickets)
        if self.shared is not None:
            self.shared.join(mine)
        return view

    def holds(self, view: SlotBackend) -> bool:
        with self._cond:
            return self._ticket.get(view.slot) == view.ticket

    def release(self, view: SlotBackend) -> None:
        with self._cond:
            if self._ticket.get(view.slot) != view.ticket:
                return  # taken over by a later answer on the same thread (it releases it), or released
            # Being released: neither free nor anyone's until the release is done (the shared forward
            # has let it go); a second release of this view does nothing.
            self._ticket[view.slot] = -1
            self._owner.pop(view.slot, None)
        if self.shared is not None:  # its cache stays: the conversation's next turn reads only what is new
            self.shared.leave(view.slot)
        with self._cond:
            del self._ticket[view.slot]
            self._released[view.slot] = self._tickets
            self._free.append(view.slot)
            self._free.sort()
            self._cond.notify_all()

    def _best_free(self, prompt: list[int] | None) -> int:
        """The free slot whose cache shares the longest prefix with ``prompt``; on a tie the one used
        least recently, so a new conversation does not push out the cache of one just answered."""
        held = getattr(self.backend, "held_tokens", None)
        if prompt is None or held is None or len(self._free) == 1:
            return self._free[0]
        try:
            shared = {slot: common_prefix(held(slot), prompt) for slot in self._free}
        except Exception:  # noqa: BLE001 - a backend that ended (a lost worker): any slot, its start reopens it
            return self._free[0]
        return max(self._free, key=lambda slot: (shared[slot], -self._released[slot], -slot))

    def set_step_cost(self, seconds: float | None) -> None:
        """How long a caller waits for the others: a share of a plain step."""
        if self.shared is not None and seconds:
            self.shared.wait_s = max(0.001, WAIT_SHARE * seconds)


class Cancelled(Exception):
    """The answer was cancelled while it waited for a free slot."""


class SlotBackend(Backend):
    """One answer's view of a shared backend: the loop's calls on its own slot."""

    def __init__(self, pool: SlotPool, slot: int, ticket: int) -> None:
        self.pool, self.slot, self.ticket = pool, slot, ticket
        self._past = 0  # positions this answer has put in its slot's cache
        b = pool.backend
        self.kind, self.name, self.tokenizer, self.vocab = b.kind, b.name, b.tokenizer, b.vocab
        self.max_context, self.eos_ids, self.device = b.max_context, b.eos_ids, b.device
        self.precision, self.precision_reason = b.precision, b.precision_reason
        self.model, self.gives_hidden = b.model, b.gives_hidden
        self.no_hidden_reason = getattr(b, "no_hidden_reason", Backend.no_hidden_reason)
        own = getattr(b, "max_tree", None)
        limits = [n for n in (own, MAX_TREE if pool.shared is not None else None) if n is not None]
        self.max_tree = min(limits) if limits else None

    @property
    def _shared(self) -> SharedForward | None:
        return self.pool.shared

    @property
    def max_leaves(self) -> int | None:
        """Leaves a tree may have in this slot (llama.cpp: a sequence id each; None: no limit), alone
        or shared: a bushy tree under a large --budget is cut to them, not refused."""
        return getattr(self.pool.backend, "leaves", None)

    def forward_stats(self) -> ForwardStats | None:
        """The last shared forward (None when this answer has the model to itself)."""
        return self._shared.last if self._shared is not None else None

    def answers_in_last_forward(self) -> int | None:
        """How many answers this answer's last forward held, itself included (None: not shared)."""
        return self._shared.shared_with.get(self.slot) if self._shared is not None else None

    def start(self, prompt: list[int], *, want_hidden: bool = False):
        if self._shared is None:
            hidden = self.pool.backend.start(prompt, want_hidden=want_hidden)
            self.last_kept = self.pool.backend.last_kept
            return hidden
        b = self.pool.backend
        if hasattr(b, "ensure_open"):  # a child process that ended (a lost worker) opens again
            b.ensure_open()
        self._past = self.last_kept = b.keep_prefix(self.slot, prompt, want_hidden=want_hidden)
        # alone, a long chunk; but another answer may join this forward: room for its tree is kept
        longest = max(SHARED_PREFILL, min(PREFILL_BATCH, b.batch_capacity - (b.slots - 1) * (MAX_TREE + 1)))
        prefix, at, hidden = prompt[:-1], self._past, None
        while at < len(prefix):
            alone = self._shared.active <= {self.slot}
            chunk = prefix[at : at + (longest if alone else SHARED_PREFILL)]
            last = at + len(chunk) == len(prefix)
            hidden = self._shared.run(self.slot, Prefill(chunk, at, want_hidden=want_hidden and last))
            at += len(chunk)
            self._past = at
        return hidden if want_hidden else None

    def verify(self, root: int, tree: DraftTree, *, want_hidden: bool = False) -> Verified:
        if self._shared is None:
            return self.pool.backend.verify(root, tree, want_hidden=want_hidden)
        # the positions this answer put in its cache: a cache lost meanwhile (a reopened model) is an error
        return self._shared.run(self.slot, Verify(root, tree, past=self._past, want_hidden=want_hidden))

    def commit(self, path: list[int]) -> None:
        if self._shared is None:
            return self.pool.backend.commit(path)
        self.pool.backend.commit_slot(self.slot, path)
        self._past += 1 + len(path)

    def truncate(self, length: int) -> None:
        if self._shared is None:
            return self.pool.backend.truncate(length)
        self.pool.backend.truncate_slot(self.slot, length)
        self._past = min(self._past, length)

    @property
    def cached(self) -> int:
        if self._shared is None:
            return self.pool.backend.cached
        return self.pool.backend.slot_cached(self.slot)

    def describe(self) -> str:
        return self.pool.backend.describe()
