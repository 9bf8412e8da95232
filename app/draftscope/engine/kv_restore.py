"""A backend's slots and the caches saved on disk (engine/kv_disk.py): a slot's conversation is
saved before a new prompt cuts a long tail of it away (held.py ``KeepsPrefixes.keep_prefix``, the
one place a slot is cut back), and a saved cache that shares more of a new prompt than the slot
does is loaded, cut to the common prefix, so only the rest is read.

Never a wrong answer: the saved tokens are compared with the prompt's, the cache is cut to what
they share (never the prompt's last token: the first step feeds it), and a file or a load that
fails leaves the slot to read the prompt as without it."""

from __future__ import annotations

import logging
import time
from pathlib import Path
from typing import Protocol

from draftscope.engine.cache_prefix import positions_to_keep
from draftscope.engine.kv_disk import Found, KvDiskStore, Saved, identity_key

log = logging.getLogger(__name__)


class SavesSlots(Protocol):
    """What a DiskCache asks of the backend whose slots it saves and restores (engine/backends/base.py's
    Backend; not imported here: base.py imports this module)."""

    @property
    def kind(self) -> str: ...

    def cache_identity(self) -> dict: ...

    def held_tokens(self, slot: int) -> list[int]: ...

    def slot_cached(self, slot: int) -> int: ...

    def export_slot(self, slot: int) -> bytes | None: ...

    def import_slot(self, slot: int, tokens: list[int], positions: int, state: bytes) -> bool: ...

    def truncate_slot(self, slot: int, length: int) -> None: ...

    def clear_slot(self, slot: int) -> None: ...


class DiskCache:
    """One backend's view of a KvDiskStore: its key, saving its slots, restoring them."""

    def __init__(self, store: KvDiskStore, key: str) -> None:
        self.store, self.key = store, key
        self._last: tuple[Path, Saved] | None = None  # the cache loaded last: a prompt read in parts asks again

    @classmethod
    def for_backend(cls, backend: SavesSlots, store: KvDiskStore) -> DiskCache:
        return cls(store, identity_key(backend.cache_identity()))

    def keep(
        self,
        backend: SavesSlots,
        slot: int,
        prompt: list[int],
        held: list[int],
        kept: int,
        *,
        want_hidden: bool = False,
    ) -> tuple[int, tuple[int, float] | None]:
        """(positions to keep, (restored, seconds) or None): the slot saved first when the prompt
        cuts away a long tail of it, then a longer saved prefix loaded when there is one."""
        if len(held) - kept >= self.store.min_save:
            self.save(backend, slot)
        try:
            return self._restore(backend, slot, prompt, kept, want_hidden)
        except Exception as exc:  # a saved cache never keeps a prompt from being read
            log.warning("a saved KV cache could not be restored, the prompt is read instead: %s", exc)
            backend.clear_slot(slot)
            return 0, None

    def save(self, backend: SavesSlots, slot: int) -> bool:
        """The slot's cache written to disk, unless it holds too little; False where it was not."""
        held = backend.held_tokens(slot)
        if len(held) < self.store.min_save:
            return False
        self._last = None  # another conversation comes: the one loaded last is not asked for again
        try:
            state = backend.export_slot(slot)
            if state is None:
                return False
            return self.store.save(self.key, held, backend.slot_cached(slot), state) is not None
        except Exception as exc:  # not saved is only slower later, never an error now
            log.warning("the conversation's KV cache could not be saved: %s", exc)
            return False

    def _restore(
        self, backend: SavesSlots, slot: int, prompt: list[int], kept: int, want_hidden: bool
    ) -> tuple[int, tuple[int, float] | None]:
        found = self.store.find(self.key, prompt, kept)
        if found is None:
            return kept, None
        began = time.perf_counter()
        saved = self._load(found, prompt)
        if saved is None:
            return kept, None
        keep = positions_to_keep(saved.tokens, prompt, want_hidden=want_hidden)
        if keep < kept + self.store.min_gain:
            return kept, None
        if not backend.import_slot(slot, saved.tokens, saved.positions, saved.state):
            log.warning(
                "%s could not take the saved cache %s: the prompt is read instead", backend.kind, found.path.name
            )
            return 0, None  # the slot was emptied
        backend.truncate_slot(slot, keep)
        return keep, (keep, time.perf_counter() - began)

    def _load(self, found: Found, prompt: list[int]) -> Saved | None:
        if self._last is not None and self._last[0] == found.path and found.path.exists():
            last = self._last[1]
            if last.tokens[: found.shares] == list(prompt[: found.shares]):
                return last
        saved = self.store.load(found, self.key, prompt)
        self._last = (found.path, saved) if saved is not None else None
        return saved
