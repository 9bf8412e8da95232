"""What read aheads (background answers: ``GenerationRequest.background``) left in each slot's cache,
so the answer that follows can say how much of its prompt was read before it was asked
(``MessageStats.prompt_read_ahead``) and how much came back from disk on the way.

The stepper (engine/stepper.py) keeps one mark a slot: the positions background answers read there
since the slot's last foreground answer, which takes the mark (and so ends it) when it is admitted.
Typing more extends the mark (the next read ahead keeps what the last one read and reads on); an
edit before it cuts it back to where the new read ahead starts."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Span:
    """Cache positions ``start``..``end`` (end excluded)."""

    start: int = 0
    end: int = 0

    def below(self, limit: int) -> int:
        """How many of the span's positions lie below ``limit``."""
        return max(0, min(limit, self.end) - self.start)

    def cut(self, limit: int) -> Span:
        """The span without its positions from ``limit`` on."""
        return Span(self.start, min(self.end, limit)) if self.start < limit else Span()


@dataclass(frozen=True)
class AheadMark:
    read: Span  # positions background answers read in the slot
    restored: Span = Span()  # positions a background answer's set-up loaded from a cache on disk
    restore_seconds: float = 0.0


@dataclass(frozen=True)
class PromptFigures:
    """How an answer's kept prompt came to be in the cache, beyond the turns before."""

    read_ahead: int = 0
    restored: int = 0
    restore_seconds: float = 0.0


def after_background(before: AheadMark | None, kept: int, read_to: int, restored: tuple[int, float]) -> AheadMark:
    """The slot's mark once a background answer that kept ``kept`` positions (``restored[0]`` of them
    loaded from disk, the last ones, in ``restored[1]`` seconds) read on to ``read_to``."""
    tokens, seconds = restored
    if tokens:  # its set-up loaded the slot from disk: what was read there before is not what it holds
        return AheadMark(Span(kept, max(kept, read_to)), Span(kept - tokens, kept), seconds)
    if before is None or not before.read.start <= kept <= before.read.end:
        start = kept  # the first read ahead since a foreground answer, or one cut back before the last one's start
    else:
        start = before.read.start  # typing more: the read goes on from where the last one got to
    if before is None:
        return AheadMark(Span(start, max(start, read_to)))
    return AheadMark(Span(start, max(start, read_to)), before.restored.cut(kept), before.restore_seconds)


def prompt_figures(mark: AheadMark | None, kept: int, restored: tuple[int, float]) -> PromptFigures:
    """For a foreground answer that kept ``kept`` positions (``restored[0]``, the last ones, loaded
    from disk by its own set-up): of those, what read aheads read and what they loaded from disk."""
    tokens, seconds = restored
    before_own = kept - tokens  # positions the slot held before this answer's own load
    if mark is None:
        return PromptFigures(0, tokens, seconds)
    loaded_ahead = mark.restored.below(before_own)
    return PromptFigures(
        read_ahead=mark.read.below(before_own),
        restored=tokens + loaded_ahead,
        restore_seconds=seconds + (mark.restore_seconds if loaded_ahead else 0.0),
    )


class SlotMarks:
    """One :class:`AheadMark` a slot at most. The stepper calls these holding its lock."""

    def __init__(self) -> None:
        self._marks: dict[int, AheadMark] = {}

    def take(self, slot: int) -> AheadMark | None:
        """A foreground answer reads in the slot: its mark, which ends here."""
        return self._marks.pop(slot, None)

    def drop(self, slot: int) -> None:
        """Something else uses the slot (a lease): what it holds is no read ahead's any more."""
        self._marks.pop(slot, None)

    def background_ended(self, slot: int, kept: int, read_to: int, restored: tuple[int, float]) -> None:
        self._marks[slot] = after_background(self._marks.get(slot), kept, read_to, restored)
