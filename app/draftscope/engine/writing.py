"""What an answer has said so far, and the rules that end it: the length limit, an end-of-sequence
token, a stop string, a verbatim loop. Each step's accepted tokens come in (``say``); the tokens,
their provenance and their pieces of text as the faces are told them come out, cut where a rule ends
the answer."""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field

from draftscope.draft_tree import DraftTree
from draftscope.engine.detokenizer import Detokenizer, Tokenizer
from draftscope.engine.events import SOURCE_NAMES
from draftscope.engine.loop_guard import LoopGuard
from draftscope.engine.stop_strings import cut_before_stop, cut_pieces, stop_at


@dataclass
class Said:
    """One step's share of the answer, as said."""

    tokens: list[int]
    provenance: list[str]  # each token's drafter, or "target"
    pieces: list[str]  # each token's text
    stop: bool  # a rule ended the answer here


@dataclass
class Writing:
    """The answer's text so far, for its next steps, its events and its final statistics."""

    ids: list[int]  # the prompt and every token said: the drafters' context; its last is the next root
    limit: int  # tokens it may say
    detok: Detokenizer
    stops: Sequence[str] = ()  # stop strings
    eos_ids: set[int] = field(default_factory=set)  # tokens that end it (none where EOS is ignored)
    loops: LoopGuard | None = None  # a verbatim repetition ends it (None: not asked)
    finish: str = "length"
    error: str | None = None
    generated: list[int] = field(default_factory=list)
    by_source: Counter[str] = field(default_factory=Counter)
    steps: int = 0
    first_token_at: float | None = None
    forward_answers: list[int] = field(default_factory=list)  # answers in each of its forwards (shared models)

    @property
    def left(self) -> int:
        """Tokens it may still say."""
        return self.limit - len(self.generated)

    def say(self, tree: DraftTree, path: list[int], bonus: int) -> Said:
        """The accepted nodes ``path`` of ``tree`` and the target's ``bonus`` token, as said: cut at
        the length limit, at an end-of-sequence token, at a stop string, at a loop."""
        tokens = ([int(tree.tokens[i]) for i in path] + [bonus])[: self.left]
        provenance = [SOURCE_NAMES[int(tree.source[i])] for i in path] + ["target"]
        stop = False
        for k, tok in enumerate(tokens):
            if tok in self.eos_ids:
                tokens, stop, self.finish = tokens[: k + 1], True, "eos"
                break
        pieces, ended = self._pieces(tokens)
        tokens, provenance = tokens[: len(pieces)], provenance[: len(pieces)]
        self.by_source.update(src for src in provenance if src != "target")
        self.ids.extend(tokens)
        return Said(tokens, provenance, pieces, stop or ended)

    def _pieces(self, tokens: list[int]) -> tuple[list[str], bool]:
        """Each token's text, said until a stop string or a loop ends the answer (and whether one did)."""
        detok, longest = self.detok, max((len(s) for s in self.stops), default=0)
        pieces: list[str] = []
        step_start = len(detok.text)
        for tok in tokens:
            searched_from = max(0, len(detok.text) - longest + 1)  # a stop may begin in earlier text
            pieces.append(detok.push(tok))
            self.generated.append(tok)
            at = stop_at(detok.text, self.stops, searched_from) if longest else None
            if at is not None:
                self.finish = "stop"
                return cut_pieces(pieces, at - step_start), True
            if self.loops is not None and self.loops.repeats(tok):
                self.finish = "loop"
                return pieces, True
        return pieces, False

    def final_text(self, tokenizer: Tokenizer) -> str:
        """The whole answer's text (before its stop string, where one ended it)."""
        text = tokenizer.decode(self.generated, skip_special_tokens=True)
        return cut_before_stop(text, self.stops) if self.finish == "stop" else text
