"""The models and drafts of ``draftscope bench gpu``: Qwen2.5- and SmolLM2-shaped models with random weights
(no download: the GPU machines have no network), a stand-in tokenizer for them, the 64-node wide
tree and the oracle that drafts in it."""

from __future__ import annotations

import numpy as np

from draftscope.drafters.interface import Drafter

# Qwen2.5 shapes from the published configs (the instruct and coder models share them); tiny, with
# Qwen's vocabulary and two small layers, is for dry runs and tests. All are built with their own
# head (see shape_model): the same compute as a tied one, 0.3-0.5 GB more for the tied shapes.
SHAPES = {
    "tiny": dict(
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        vocab_size=151936,
        tie_word_embeddings=True,
    ),
    # SmolLM2-135M's published config (a llama; built here as a Qwen2 of its shape, its q/k/v biases
    # the only difference in cost)
    "smollm2-135m": dict(
        hidden_size=576,
        intermediate_size=1536,
        num_hidden_layers=30,
        num_attention_heads=9,
        num_key_value_heads=3,
        vocab_size=49152,
        tie_word_embeddings=True,
    ),
    "qwen2.5-0.5b": dict(
        hidden_size=896,
        intermediate_size=4864,
        num_hidden_layers=24,
        num_attention_heads=14,
        num_key_value_heads=2,
        vocab_size=151936,
        tie_word_embeddings=True,
    ),
    "qwen2.5-1.5b": dict(
        hidden_size=1536,
        intermediate_size=8960,
        num_hidden_layers=28,
        num_attention_heads=12,
        num_key_value_heads=2,
        vocab_size=151936,
        tie_word_embeddings=True,
    ),
    "qwen2.5-7b": dict(
        hidden_size=3584,
        intermediate_size=18944,
        num_hidden_layers=28,
        num_attention_heads=28,
        num_key_value_heads=4,
        vocab_size=152064,
        tie_word_embeddings=False,
    ),
}
SHARPEN = 100.0  # the embeddings' scale in a shape model (see shape_model)


class IdsOnly:
    """A shape model's stand-in tokenizer: token ids go in directly, and the engine's events spell
    each token as its number. No end token: every answer runs to --tokens."""

    eos_token_id = None
    chat_template = None

    def decode(self, ids, skip_special_tokens: bool = True) -> str:
        return "".join(f" {int(i)}" for i in ids)


def shape_model(shape: str, device, dtype):
    """A Qwen2 model of ``shape`` with seeded random weights whose greedy answer walks a fixed
    permutation of the vocabulary with a wide margin at every step.

    Random weights give near-flat logits, whose argmaxes flip between a one-token and a tree
    forward in bf16. Scaled embeddings make each position's last hidden state follow its own
    token, and a head of those embeddings (its own weights) in a seeded shuffled order turns that
    into a large margin for one next token. Measured on random-id positions in fp32 (the gap between
    the two best logits over the best; bf16 resolves 0.004): the 0.5B shape followed the walk at
    17% of positions with x10 (gaps down to 0.003) and at all with x40 (gaps at least 0.56); the
    1.5B shape at all with x40 (0.12) and with x100 (0.70). Scaling a tied head instead (the
    recipe in ../shared/gpu) makes the answer one token repeated."""
    import torch
    from transformers import AutoModelForCausalLM, Qwen2Config

    config = Qwen2Config(
        max_position_embeddings=32768,
        rope_theta=1e6,
        rms_norm_eps=1e-6,
        bos_token_id=None,
        eos_token_id=None,
        **{**SHAPES[shape], "tie_word_embeddings": False},
    )
    torch.manual_seed(0)
    with torch.device(device):  # weights made where they run: a 7B model never passes through the CPU
        model = AutoModelForCausalLM.from_config(config, dtype=dtype)
    with torch.no_grad():
        embeddings = model.get_input_embeddings().weight
        embeddings.mul_(SHARPEN)  # the RMSNorms see no difference; the residual stream follows the token
        order = torch.randperm(embeddings.shape[0], generator=torch.Generator().manual_seed(0))
        model.get_output_embeddings().weight.copy_(embeddings[order.to(embeddings.device)])
    return model.eval()


def wide_tree(rng, vocab: int):
    """64 nodes: 8 children of the root, each heading a chain of 7 (branch b holds nodes 8b..8b+7)."""
    from draftscope.draft_tree import DraftTree

    parents = np.array([-1 if k == 0 else 8 * b + k - 1 for b in range(8) for k in range(8)], np.int32)
    depth = np.array([k + 1 for _ in range(8) for k in range(8)], np.int32)
    return DraftTree(
        rng.integers(0, vocab, 64).astype(np.int64), parents, depth, np.ones(64, np.float32), np.ones(64, np.int8)
    )


class WideOracle(Drafter):
    """The oracle's next 8 tokens as the first branch of :func:`wide_tree`'s 64-node shape, the other
    7 branches seeded random tokens: a step verifies 64 nodes and keeps 9 tokens, so the work outside
    the forward (drafting, tree building, the verification walk, events) is measured at 64 nodes."""

    name = "oracle"

    def __init__(self, answer_ids, prompt_len: int, vocab: int) -> None:
        from draftscope.draft_tree import DraftSource

        self.answer, self.prompt_len, self.vocab = list(answer_ids), prompt_len, vocab
        self.source = DraftSource.ORACLE
        self.rng = np.random.default_rng(3)

    def reset(self, context_ids) -> None:
        pass

    def observe(self, accepted_ids) -> None:
        pass

    def propose(self, context_ids, budget: int):
        tree = wide_tree(self.rng, self.vocab)
        done = len(context_ids) - self.prompt_len
        chain = self.answer[done : done + 8]
        tree.tokens[: len(chain)] = chain
        tree.source[:] = self.source
        return tree


# Memory bandwidth of cards by the name torch gives them (GB/s, the makers' spec sheets): a step that
# reads its weights and KV cache once cannot beat bytes / bandwidth. Longest names first when matching.
BANDWIDTH_GB_S = {
    "H200": 4800.0,
    "H100 NVL": 3900.0,
    "H100 SXM": 3350.0,
    "H100 80GB HBM3": 3350.0,
    "H100 PCIe": 2000.0,
    "H100": 3350.0,
    "GH200": 4000.0,
    "B200": 8000.0,
    "A100-SXM4-80GB": 2039.0,
    "A100 80GB PCIe": 1935.0,
    "A100-SXM4-40GB": 1555.0,
    "A100-PCIE-40GB": 1555.0,
    "A100": 1555.0,
    "L40S": 864.0,
    "L40": 864.0,
    "L4": 300.0,
    "A10G": 600.0,
    "A10": 600.0,
    "T4": 320.0,
    "RTX 4090": 1008.0,
    "RTX 3090": 936.0,
}


def card_bandwidth(name: str) -> float | None:
    """GB/s of the card named ``name`` (torch.cuda.get_device_name), None when it is not in the table."""
    for key in sorted(BANDWIDTH_GB_S, key=len, reverse=True):
        if key.lower() in name.lower():
            return BANDWIDTH_GB_S[key]
    return None


def step_bytes(model, context: int, queries: int = 1) -> dict[str, int]:
    """Bytes a decoding step must read at least: every weight matrix once (the embedding table only
    for its ``queries`` rows; a tied output head counts the table once) and the KV cache of
    ``context`` positions, each at the size it is stored in."""
    config = model.config
    embeddings = model.get_input_embeddings().weight
    head = model.get_output_embeddings().weight
    weights = 0
    for _name, p in model.named_parameters():
        if p is embeddings and p is not head:
            weights += queries * p.shape[1] * p.element_size()  # looked up, not read whole
        else:
            weights += p.numel() * p.element_size()
    if head is not embeddings and all(head is not p for _, p in model.named_parameters()):
        weights += head.numel() * head.element_size()
    heads = config.num_attention_heads
    head_dim = getattr(config, "head_dim", None) or config.hidden_size // heads
    kv = 2 * config.num_hidden_layers * getattr(config, "num_key_value_heads", heads) * head_dim * context
    return {"weights": int(weights), "kv": int(kv * embeddings.element_size())}
