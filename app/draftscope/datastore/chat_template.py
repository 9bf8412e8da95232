"""Rendering conversations with the target model's chat template, so the datastore holds text in
exactly the form the model will produce it.

- ``assistant`` mode (REST's chat datastore): one document per assistant turn, holding what the
  model emits after its generation prompt: ``render(turns[:i+1])`` minus
  ``render(turns[:i], add_generation_prompt=True)`` — for ChatML that is
  ``"content<|im_end|>\\n"``, end-of-turn marker included.
- ``conversation`` mode: the whole rendered conversation as one document.

A template that cannot render a record (some reject non-alternating roles) skips that record.
"""

from __future__ import annotations

import hashlib

from draftscope.datastore.records import Conversation, SkipLog

MODES = ("assistant", "conversation")


class ChatRenderer:
    def __init__(self, tokenizer, mode: str = "assistant") -> None:
        if mode not in MODES:
            raise ValueError(f"chat mode must be one of {MODES}, got {mode!r}")
        self.tokenizer = tokenizer
        self.mode = mode
        self.template = getattr(tokenizer, "chat_template", None) or None
        # Turns whose text had to be taken without the template's framing (see _assistant_turns).
        self.fallbacks = 0

    @property
    def template_sha256(self) -> str | None:
        return hashlib.sha256(self.template.encode()).hexdigest() if self.template else None

    def describe(self) -> dict:
        return {
            "applied": self.template is not None,
            "mode": self.mode,
            "sha256": self.template_sha256,
            "template": self.template,
            "turns_without_template_framing": self.fallbacks,
        }

    def render(self, conv: Conversation, skips: SkipLog) -> list[str]:
        """Texts (documents) for one conversation; [] when it cannot be rendered."""
        messages = list(conv.messages)
        if self.template is None:
            # No template: the raw text the model would write (assistant) or all turns.
            keep = [m for m in messages if self.mode == "conversation" or m["role"] == "assistant"]
            return (
                [m["content"] for m in keep if m["content"].strip()]
                if self.mode == "assistant"
                else ["\n\n".join(m["content"] for m in keep)]
            )
        try:
            if self.mode == "conversation":
                return [self._apply(messages)]
            return self._assistant_turns(messages)
        except Exception as exc:  # jinja2 TemplateError, or a template's raise_exception()
            skips.skip(conv.location, f"chat template rejected the conversation: {exc}")
            return []

    def _apply(self, messages: list[dict], generation_prompt: bool = False) -> str:
        return self.tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=generation_prompt)

    def _assistant_turns(self, messages: list[dict]) -> list[str]:
        out = []
        for i, m in enumerate(messages):
            if m["role"] != "assistant" or not m["content"].strip():
                continue
            full = self._apply(messages[: i + 1])
            prompt = self._apply(messages[:i], generation_prompt=True) if i else None
            if prompt is not None and full.startswith(prompt):
                out.append(full[len(prompt) :])
            else:
                # The template rewrites earlier turns (or needs a user turn first): keep the
                # content and the end-of-turn token, the part the model certainly emits.
                self.fallbacks += 1
                out.append(m["content"] + (self.tokenizer.eos_token or ""))
        return out
