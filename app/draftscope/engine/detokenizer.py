"""Each new token's text, as the whole answer's decode would say it."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Protocol


class Tokenizer(Protocol):
    """What the engine asks of a model's tokenizer (a Hugging Face one, on every backend): text to
    ids, ids to text, and the chat template where the model has one (``chat_template`` set)."""

    def __call__(self, text: str, /, *, add_special_tokens: bool = ...) -> Mapping[str, Any]: ...

    def decode(self, ids: Sequence[int], /, *, skip_special_tokens: bool = ...) -> str: ...

    def apply_chat_template(
        self,
        conversation: list[dict],
        /,
        *,
        tokenize: bool = ...,
        add_generation_prompt: bool = ...,
        tools: list[dict] | None = ...,
    ) -> Any: ...


class Detokenizer:
    """Text of each new token. The tokens since the last piece are decoded together with the few
    before them (so a leading space or a multi-byte character comes out as in the whole text); a
    piece that ends inside a UTF-8 sequence waits for the next token, and bytes that never make a
    character come out as U+FFFD once a later token is readable, as in the whole text's decode."""

    CONTEXT = 4  # tokens decoded before the new ones, for the tokenizer's spacing rules
    MAX_PENDING = 8  # tokens held back at most, then the text goes out as it decodes

    def __init__(self, tokenizer: Tokenizer) -> None:
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
        piece = after[len(before) :] if after.startswith(before) else ""
        self._read = len(self.ids)
        self.text += piece
        return piece
