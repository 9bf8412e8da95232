"""Tiny random Llamas for engine tests (built from a config: no download)."""

import torch
from transformers import LlamaConfig, LlamaForCausalLM


def tiny_llama(
    vocab_size: int,
    *,
    seed: int = 0,
    layers: int = 2,
    hidden: int = 64,
    sharpen: float = 1.0,
    eos_token_id: int | None = None,
    max_positions: int = 256,
) -> LlamaForCausalLM:
    torch.manual_seed(seed)
    cfg = LlamaConfig(
        vocab_size=vocab_size,
        hidden_size=hidden,
        intermediate_size=2 * hidden,
        num_hidden_layers=layers,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=max_positions,
        eos_token_id=eos_token_id,
        bos_token_id=None,
        pad_token_id=None,
        tie_word_embeddings=False,
    )
    model = LlamaForCausalLM(cfg).eval()
    if sharpen != 1.0:  # a peakier next-token distribution, so sampling tests have structure to check
        with torch.no_grad():
            model.lm_head.weight.mul_(sharpen)
    return model


class IdTokenizer:
    """Decodes ids as space-separated numbers: enough for engine tests on models without a vocabulary."""

    eos_token_id = None
    chat_template = None

    def decode(self, ids, skip_special_tokens=True):
        return "".join(f" {i}" for i in ids)


def pin_budget(engine, nodes: int = 16):
    """Verify a fixed number of draft nodes per step in every answer that does not ask for one.
    For tests of what drafts *show* (panels, colours, learned answers): the adaptive policy decides
    from timings, and on a loaded machine it may rightly decode plainly, which is not under test."""
    from dataclasses import replace

    generate = engine.generate

    def pinned(request, **kwargs):
        if request.budget is None and request.drafters:
            request = replace(request, budget=nodes)
        return generate(request, **kwargs)

    engine.generate = pinned
    return engine
