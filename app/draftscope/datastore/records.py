"""What sources produce, and the log of what they could not use."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

MAX_LOGGED_SKIPS = 200


@dataclass(frozen=True)
class Document:
    """Plain text that goes into the datastore as one document."""

    text: str
    location: str


@dataclass(frozen=True)
class Conversation:
    """A chat as role/content messages (roles: system, user, assistant), rendered later with
    the model's chat template."""

    messages: tuple[dict, ...]
    location: str


@dataclass
class SkipLog:
    """Records that were skipped: counted by reason, the first few kept with their location."""

    count: int = 0
    by_reason: Counter = field(default_factory=Counter)
    examples: list[dict] = field(default_factory=list)

    def skip(self, location: str, reason: str) -> None:
        self.count += 1
        # Group by the reason's kind (text before the first colon) so counts stay readable.
        self.by_reason[reason.split(":", 1)[0]] += 1
        if len(self.examples) < MAX_LOGGED_SKIPS:
            self.examples.append({"location": location, "reason": reason})

    def to_dict(self) -> dict:
        return {"count": self.count, "by_reason": dict(self.by_reason), "examples": self.examples}
