"""What each slot's cache holds, token by token, so a new answer reads only what the cache lacks.

A follow-up's prompt is the whole conversation again (every OpenAI client resends it; the window
renders it with the chat template). The cache still holds the last answer's prompt and the tokens
it committed, so the new prompt's longest common prefix with them is kept and only the rest is
read, as llama-server's ``cache_prompt``, LM Studio and Ollama do. A template that renders earlier
turns differently simply shares a shorter prefix: the cache is never wrong, only less useful.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol

from draftscope.engine.cache_prefix import positions_to_keep


class HeldTokens:
    """The token ids at each cached position of every slot, kept in step with the cache: prompt
    tokens as they are read, then each step's root and accepted nodes as they are committed (not
    the answer as emitted: a stop string or the length limit may cut that shorter)."""

    def __init__(self, slots: int = 1) -> None:
        self._held: list[list[int]] = [[] for _ in range(slots)]
        self._verifying: list[list[int] | None] = [None] * slots  # the last verify's root + tree tokens

    def tokens(self, slot: int = 0) -> list[int]:
        return list(self._held[slot])

    def read(self, slot: int, start: int, tokens) -> None:
        """``tokens`` now sit at positions ``start``... of the slot's cache."""
        held = self._held[slot]
        del held[start:]
        held.extend(int(t) for t in tokens)

    def verifying(self, slot: int, root: int, tree_tokens) -> None:
        self._verifying[slot] = [int(root), *(int(t) for t in tree_tokens)]

    def committed(self, slot: int, past: int, path: list[int]) -> None:
        """The last verify's root and the nodes ``path`` kept after the ``past`` positions before them."""
        step, self._verifying[slot] = self._verifying[slot], None
        if step is None:  # a commit without a verify we saw: what the cache holds is unknown from here
            del self._held[slot][past:]
            return
        self.read(slot, past, [step[0], *(step[1 + i] for i in path)])

    def copy(self, source: int, target: int, length: int) -> None:
        """``target`` now holds the first ``length`` positions ``source`` holds."""
        self._held[target] = self._held[source][:length]
        self._verifying[target] = None

    def cut(self, slot: int, length: int) -> None:
        del self._held[slot][length:]
        self._verifying[slot] = None

    def clear(self, slot: int) -> None:
        self.cut(slot, 0)


class CacheOnDisk(Protocol):
    """What a backend asks of the cache on disk its slots are saved to (engine/kv_restore.py's DiskCache)."""

    def keep(
        self, backend, slot: int, prompt: list[int], held: list[int], kept: int, *, want_hidden: bool = False
    ) -> tuple[int, tuple[int, float] | None]:
        """The positions the slot keeps for ``prompt`` and (positions, seconds) restored from disk, or None."""

    def save(self, backend, slot: int) -> bool:
        """Save the slot's cache; whether it was saved."""


class KeepsPrefixes:
    """For a backend of answer slots (``held``, ``slot_cached``, ``truncate_slot``): what a slot's
    cache holds, and cutting it back to what a new prompt shares. With a cache on disk
    (``kv_cache``, engine/kv_restore.py) a long tail is saved before it is cut, and a saved cache
    that shares more of the prompt than the slot is loaded instead."""

    held: HeldTokens
    last_kept: int
    kv_cache: CacheOnDisk | None = None
    _restored: dict | None = None  # slot -> (positions restored from disk, seconds) by the last set-up

    if TYPE_CHECKING:  # the backend's own slot verbs (engine/backends/base.py)

        def slot_cached(self, slot: int) -> int: ...

        def truncate_slot(self, slot: int, length: int) -> None: ...

    def held_tokens(self, slot: int) -> list[int]:
        """The token at each position the slot's cache holds (as far as known)."""
        return self.held.tokens(slot)[: self.slot_cached(slot)]

    def keep_prefix(self, slot: int, prompt: list[int], *, want_hidden: bool = False) -> int:
        """Cut the slot's cache back to what it shares with ``prompt``; the positions kept."""
        held = self.held_tokens(slot)
        kept = positions_to_keep(held, prompt, want_hidden=want_hidden)
        restored = None
        if self.kv_cache is not None:
            kept, restored = self.kv_cache.keep(self, slot, prompt, held, kept, want_hidden=want_hidden)
        if self._restored is None:
            self._restored = {}
        self._restored[slot] = restored
        self.truncate_slot(slot, kept)
        self.last_kept = kept
        return kept

    def take_restored(self, slot: int) -> tuple[int, float]:
        """Of the positions the slot's last set-up kept, those loaded from disk and the load's
        seconds, once; counted only while the slot still holds them (reading went on after them)."""
        restored = (self._restored or {}).pop(slot, None)
        if restored is None or self.slot_cached(slot) < restored[0]:
            return (0, 0.0)
        return restored
