"""The seam below the answers: what the stepper (engine/stepper.py) asks of the target model,
whatever runs it.

A backend's face is ``decode_many`` and the slot verbs. It holds ``slots`` answers' caches (one for
most; llama.cpp, its RPC child and torch's padded batch hold several). Between steps a slot's cache
holds every token of its prompt + answer except the last one, the root. ``decode_many`` runs one
forward for several slots' work (engine/backends/work.py): a prompt chunk, or a root and a draft
tree, returning a row of next-token logits for the root and for every node; ``commit_slot`` keeps
the root and the accepted nodes. A one-slot backend (OneSlotBackend) writes one answer's verbs
(prefill, verify, commit, truncate) and gets the face from them.

Whoever drives one answer by hand (the draft model, the cost measurement, the self-test, the graph
capture's check) drives one slot through :class:`SlotView`, the one adapter from the face to one
answer's verbs (``backend.start`` and its kin are slot 0's view). Drafters, verification, the step
policy, events and every face sit above this seam and never ask which backend runs."""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import TYPE_CHECKING

from draftscope.draft_tree import DraftTree
from draftscope.engine.backends.held import CacheOnDisk
from draftscope.engine.backends.work import PREFILL_BATCH, Prefill, Verify
from draftscope.engine.kv_restore import DiskCache

if TYPE_CHECKING:  # rows are NumPy's on llama.cpp, torch's on the torch backends: torch is never loaded here
    import torch

    from draftscope.engine.arrays import Array

__all__ = ["Backend", "OneSlotBackend", "SlotView", "Verified"]


@dataclass
class Verified:
    logits: Array  # float [1 + nodes, vocab]: row 0 after the root, row 1 + i after node i
    hidden: Array | None = None  # [1 + nodes, hidden] last hidden states, when asked for
    best: Array | None = None  # [1 + nodes] each row's most likely token, where the step computed it (graphs)


class Backend(ABC):
    kind: str  # "torch" or "llama.cpp": the words the status bar and the stats use
    name: str
    tokenizer: object
    vocab: int
    max_context: int
    eos_ids: set[int]
    device: object  # torch.device for torch; "cpu" (or the GPU it offloads to) for llama.cpp
    precision: str  # "float32", "bfloat16", ... or the GGUF's quantisation ("Q4_K_M")
    precision_reason: str = ""
    dtype: torch.dtype | None = None  # the torch dtype, where torch computes (None: the file's own formats)
    # the torch module, where there is one (the self:N draft model, head training, HF references)
    model: torch.nn.Module | None = None
    gives_hidden: bool = False  # can return last hidden states (the recurrent head needs them)
    no_hidden_reason: str = "does not give the model's hidden state"  # why not, in words (gives_hidden False)
    notice: str | None = None  # what the user should know of how it was opened (kernels turned off, a fallback)
    max_tree: int | None = None  # draft nodes one verify takes at most (None: no limit); the engine cuts trees to it
    last_kept: int = 0  # prompt tokens the last keep_prefix found in the cache and did not read again (held.py)
    slots: int = 1  # answers it holds at once, each in a slot with its own cache
    leaves: int | None = None  # leaves a slot's tree may have (llama.cpp: a sequence id each; None: any)
    batch_capacity: int | None = None  # tokens one forward takes (None: any)
    prefill_batch: int = PREFILL_BATCH  # prompt tokens a chunk holds at most
    # a prompt goes in chunks of at most prefill_batch (slots share forwards); else in one Prefill,
    # or READ_CHUNK parts where its reader asks how far the reading is (engine/answer.py)
    reads_in_chunks: bool = False

    # ------------------------------------------------------------------ the face: one forward, the slot verbs

    @abstractmethod
    def decode_many(self, work: dict) -> dict:
        """One forward for several slots' work: {slot: Prefill | Verify} -> {slot: its result (the
        prompt chunk's last hidden state when asked, else None; a Verified), or the error that item
        met}. A Prefill's tokens join its slot's cache."""

    @abstractmethod
    def commit_slot(self, slot: int, path: list[int]) -> None:
        """After the slot's Verify: keep the root and the accepted nodes ``path`` (a chain of node indices)."""

    @abstractmethod
    def truncate_slot(self, slot: int, length: int) -> None:
        """Keep the slot's first ``length`` cached positions (drop what was verified after them)."""

    @abstractmethod
    def slot_cached(self, slot: int) -> int:
        """How many positions the slot's cache holds now."""

    def clear_slot(self, slot: int) -> None:
        self.truncate_slot(slot, 0)

    # copy_slot gives one slot's cache to another: n answers to one prompt read it once (engine/fork.py)
    copies_slots: bool = False

    def copy_slot(self, source: int, target: int, length: int) -> None:
        """Make ``target``'s cache hold the first ``length`` positions ``source``'s holds (what it held goes)."""
        raise NotImplementedError(f"{self.kind} does not copy one slot's cache to another")

    def held_tokens(self, slot: int) -> list[int]:
        """The token at each position the slot's cache holds, as far as known (held.py)."""
        return []

    def keep_prefix(self, slot: int, prompt: list[int], *, want_hidden: bool = False) -> int:
        """Cut the slot's cache back to what it shares with ``prompt``; the positions kept."""
        self.truncate_slot(slot, 0)
        self.last_kept = 0
        return 0

    # ------------------------------------------------------------------ one answer: slot 0's view

    def start(self, prompt: list[int], *, want_hidden: bool = False) -> Array | None:
        """Slot 0 reads ``prompt`` but its last token (SlotView.start)."""
        return SlotView(self).start(prompt, want_hidden=want_hidden)

    def verify(self, root: int, tree: DraftTree, *, want_hidden: bool = False) -> Verified:
        """One forward of [root] + tree in slot 0: each node attends to the cache, its ancestors and itself."""
        return SlotView(self).verify(root, tree, want_hidden=want_hidden)

    def commit(self, path: list[int]) -> None:
        self.commit_slot(0, path)

    def truncate(self, length: int) -> None:
        self.truncate_slot(0, length)

    @property
    def cached(self) -> int:
        return self.slot_cached(0)

    # ------------------------------------------------------------------ caches kept on disk (engine/kv_disk.py)

    source = None  # the ModelSource it was opened from (open_backend sets it; None: a model built in memory)
    saves_slots: bool = False  # a slot's cache can be written out and read back (export_slot, import_slot)
    # the DiskCache (engine/kv_restore.py) a slot is saved to before it is cut; None: none
    kv_cache: CacheOnDisk | None = None

    def cache_identity(self) -> dict:
        """What a saved cache must have been made under to be loaded here: the model file's
        fingerprint, the backend, its precision and whatever changes what a cache holds."""
        raise NotImplementedError(f"{self.kind} does not save its caches")

    def export_slot(self, slot: int) -> bytes | None:
        """The state of the positions the slot's cache holds (None: it cannot give it now)."""
        return None

    def import_slot(self, slot: int, tokens: list[int], positions: int, state: bytes) -> bool:
        """Make the slot hold ``state`` (``positions`` positions holding ``tokens``, as far as known):
        True, or False with the slot emptied."""
        return False

    def keep_on_disk(self, store) -> None:
        """Save slots to ``store`` (a KvDiskStore; None: stop) before they are cut, and restore
        longer prefixes from it; nothing where the backend cannot save its caches."""
        if store is None or not self.saves_slots:
            self.kv_cache = None
            return
        self.kv_cache = DiskCache.for_backend(self, store)

    def save_slots(self) -> int:
        """Every slot's cache saved to disk (the engine closes): how many were."""
        if self.kv_cache is None:
            return 0
        return sum(self.kv_cache.save(self, slot) for slot in range(self.slots))

    def take_restored(self, slot: int) -> tuple[int, float]:
        """Of the tokens the slot's last prompt set-up kept, how many came back from a cache saved on
        disk, and the seconds that load took; read once (it resets). (0, 0.0): none came from disk."""
        return (0, 0.0)

    def ensure_open(self) -> None:  # noqa: B027 - a hook: only a backend in a child process reopens
        """Open the model again if what ran it ended (a child process that lost a worker)."""

    # ------------------------------------------------------------------ CPU threads (engine/auto_threads.py)

    def cpu_threads(self) -> int | None:
        """The CPU threads its steps compute on, where ``set_threads`` can change them; None where it
        cannot (a graphics card computes, or another process): then there is nothing to choose."""
        return None

    def set_threads(self, threads: int) -> None:
        """Compute on ``threads`` CPU threads from the next step (only where ``cpu_threads`` is not
        None), called on the model's own thread."""
        raise NotImplementedError(f"{self.kind} does not change its threads here")

    def describe(self) -> str:
        """One line for the status bar's tooltip and the terminal: what runs, in what precision."""
        return f"{self.kind} · {self.precision}"

    def brief(self) -> str:
        """What runs in a few words, for the status bar (describe() says the rest on hover)."""
        words = self.describe().split(" · ")
        return " · ".join(words[:3] if self.kind == "torch" else words[:2])  # torch: its device matters most

    def close(self) -> None:  # noqa: B027 - a hook: a backend with native memory frees it
        """Give back native memory now rather than at garbage collection."""


class SlotView:
    """One slot of a backend as one answer's verbs (start, verify, commit, truncate, cached): the
    draft model, the cost measurement, the self-test and the graph capture's check drive a model
    through it, whichever backend runs and however many slots it holds. Every call is the face's:
    ``decode_many`` and the slot verbs, so an answer measures in its own slot while others answer."""

    def __init__(self, backend: Backend, slot: int = 0) -> None:
        self.backend, self.slot = backend, slot
        self.max_context, self.vocab = backend.max_context, backend.vocab

    def start(self, prompt: list[int], *, want_hidden: bool = False) -> Array | None:
        """Feed every prompt token but the last (the first root), keeping what the slot's cache
        already holds of them (held.py; ``last_kept`` says how many) and forgetting the rest. Returns
        the last hidden state of that reading when asked and there was something to read."""
        backend = self.backend
        kept = backend.keep_prefix(self.slot, prompt, want_hidden=want_hidden)
        prefix, hidden = prompt[:-1], None
        step = backend.prefill_batch if backend.reads_in_chunks else max(len(prefix), 1)
        for at in range(kept, len(prefix), step):
            chunk = prefix[at : at + step]
            last = at + len(chunk) == len(prefix)
            hidden = self._run(Prefill(chunk, at, want_hidden=want_hidden and last))
        return hidden if want_hidden else None

    def verify(self, root: int, tree: DraftTree, *, want_hidden: bool = False) -> Verified:
        return self._run(Verify(root, tree, want_hidden=want_hidden))

    def commit(self, path: list[int]) -> None:
        self.backend.commit_slot(self.slot, path)

    def truncate(self, length: int) -> None:
        self.backend.truncate_slot(self.slot, length)

    @property
    def cached(self) -> int:
        return self.backend.slot_cached(self.slot)

    def _run(self, item):
        out = self.backend.decode_many({self.slot: item}).get(self.slot)
        if isinstance(out, BaseException):
            raise out
        return out


class OneSlotBackend(Backend):
    """A backend that holds one answer writes its verbs (prefill, verify, commit, truncate, cached)
    and gets the face from them: one item a forward, slot 0's."""

    @abstractmethod
    def prefill(self, tokens: list[int], start: int, *, want_hidden: bool = False) -> Array | None:
        """Read ``tokens`` into the cache from position ``start`` (what it holds past it is dropped);
        the last one's hidden state when asked."""

    @abstractmethod
    def verify(self, root: int, tree: DraftTree, *, want_hidden: bool = False) -> Verified:
        """One forward of [root] + tree: each node attends to the cache, its ancestors and itself."""

    @abstractmethod
    def commit(self, path: list[int]) -> None:
        """After ``verify``: keep the root and the accepted nodes ``path`` (a chain of node indices)."""

    @abstractmethod
    def truncate(self, length: int) -> None:
        """Keep the first ``length`` cached positions (drop what was verified after them)."""

    def decode_many(self, work: dict) -> dict:
        out: dict[int, Array | Verified | Exception | None] = {}
        for slot, item in work.items():  # one slot: one item
            try:
                if isinstance(item, Prefill):
                    out[slot] = self.prefill(item.tokens, item.start, want_hidden=item.want_hidden)
                else:
                    out[slot] = self.verify(item.root, item.tree, want_hidden=item.want_hidden)
            except Exception as exc:  # the answer that asked hears of it
                out[slot] = exc
        return out

    def commit_slot(self, slot: int, path: list[int]) -> None:
        self.commit(path)

    def truncate_slot(self, slot: int, length: int) -> None:
        self.truncate(length)

    def slot_cached(self, slot: int) -> int:
        return self.cached

    @property
    @abstractmethod
    def cached(self) -> int:
        """How many positions the cache holds now."""
