"""Greedy answers of a transformers model to a batch of prompts, for ``datastore/distill.py``.

Apart from distill's bookkeeping (the answers file, resume, indexing) because this is the one part
that drives the model: encoding a prompt as the engine would, the end tokens, left padding by hand
and a stop at the next token when the user cancels.
"""

from __future__ import annotations

from dataclasses import dataclass

from draftscope.datastore.progress import CancelToken


@dataclass(frozen=True)
class Generated:
    text: str  # the answer, up to (not including) its end token
    tokens: int  # tokens the model generated, its end token included when it stopped
    finished: bool  # False when max_new_tokens cut the answer off


def stop_token_ids(model, tokenizer) -> list[int]:
    """The tokens that end an answer: the tokenizer's and the model's end tokens (as the engine stops)."""
    ids: set[int] = set()
    for value in (getattr(tokenizer, "eos_token_id", None), getattr(model.generation_config, "eos_token_id", None)):
        if isinstance(value, int):
            ids.add(value)
        elif isinstance(value, (list, tuple)):
            ids.update(int(x) for x in value)
    return sorted(ids)


def encode_prompt(tokenizer, prompt: str) -> list[int]:
    """The prompt's tokens as the engine feeds a one-message chat: the chat template with the
    generation prompt, tokenised without extra special tokens (the template has its own)."""
    if getattr(tokenizer, "chat_template", None):
        text = tokenizer.apply_chat_template(
            [{"role": "user", "content": prompt}], tokenize=False, add_generation_prompt=True
        )
        return tokenizer(text, add_special_tokens=False)["input_ids"]
    return tokenizer(prompt)["input_ids"]


class _StopOnCancel:
    """A stopping criterion that ends ``generate`` at the next token once cancel fires, so a
    cancel does not wait for a whole batch (the batch is then thrown away)."""

    def __init__(self, cancel: CancelToken) -> None:
        self.cancel = cancel

    def __call__(self, input_ids, scores, **kwargs):
        import torch

        return torch.full((input_ids.shape[0],), self.cancel.cancelled, dtype=torch.bool, device=input_ids.device)


def generate_batch(
    model, tokenizer, prompt_ids: list[list[int]], *, max_new_tokens: int, cancel: CancelToken | None = None
) -> list[Generated]:
    """Greedy answers of one batch, in the prompts' order.

    The batch is left padded by hand (pad = the pad token, else the first end token) rather than
    by the tokenizer, so a tokenizer shared with the app keeps its padding side and pad token.
    """
    import torch
    from transformers import StoppingCriteriaList

    stops = stop_token_ids(model, tokenizer)
    pad = getattr(tokenizer, "pad_token_id", None)
    pad = pad if pad is not None else (stops[0] if stops else 0)
    width = max(len(ids) for ids in prompt_ids)
    device = next(model.parameters()).device
    input_ids = torch.tensor([[pad] * (width - len(ids)) + list(ids) for ids in prompt_ids], device=device)
    mask = torch.tensor([[0] * (width - len(ids)) + [1] * len(ids) for ids in prompt_ids], device=device)
    extra = {"stopping_criteria": StoppingCriteriaList([_StopOnCancel(cancel)])} if cancel is not None else {}
    with torch.inference_mode():
        out = model.generate(
            input_ids=input_ids,
            attention_mask=mask,
            max_new_tokens=max_new_tokens,
            do_sample=False,
            temperature=None,
            top_p=None,
            top_k=None,
            eos_token_id=stops or None,
            pad_token_id=pad,
            **extra,
        )
    return [_answer_of(row.tolist(), stops, tokenizer) for row in out[:, width:]]


def _answer_of(generated: list[int], stops: list[int], tokenizer) -> Generated:
    """Text before the first end token, and the tokens generated up to and including it."""
    end = next((i for i, t in enumerate(generated) if t in stops), None)
    if end is None:
        return Generated(tokenizer.decode(generated, skip_special_tokens=True), len(generated), False)
    return Generated(tokenizer.decode(generated[:end], skip_special_tokens=True), end + 1, True)
