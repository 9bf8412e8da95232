"""Tiny random Llamas for engine tests (built from a config: no download), and models of NumPy rows."""

import numpy as np
import torch
from transformers import LlamaConfig, LlamaForCausalLM

from draftscope.draft_tree import DraftSource, DraftTree
from draftscope.drafters import Drafter
from draftscope.engine.backends.base import Backend, OneSlotBackend, Verified
from draftscope.engine.backends.work import Prefill
from draftscope.engine.verify import token_positions


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


class Scripted(Backend):
    """A model that writes ``script`` after a ``prompt_len``-token prompt (then ``eos``), whatever the
    drafts: each verify row's token is the script's at that row's position."""

    kind, name, device, precision = "scripted", "scripted", "cpu", "float32"
    reads_in_chunks = True
    batch_capacity = 512
    slots = 1
    commit = truncate = None

    def __init__(self, tokenizer, prompt_len: int, script: list[int], *, eos: int, vocab: int) -> None:
        self.tokenizer, self.prompt_len, self.script = tokenizer, prompt_len, script
        self.vocab, self.max_context, self.eos_ids, self.eos = vocab, 8192, {eos}, eos
        self._cached = 0

    def _says(self, position: int) -> int:
        at = position - self.prompt_len
        return self.script[at] if at < len(self.script) else self.eos

    def decode_many(self, work):
        out = {}
        for slot, item in work.items():
            if isinstance(item, Prefill):
                self._cached += len(item.tokens)
                continue
            logits = torch.zeros(1 + len(item.tree), self.vocab)
            for row, position in enumerate(token_positions(item.tree, self._cached + 1)):
                logits[row, self._says(position)] = 1.0
            out[slot] = Verified(logits)
        return out

    def start(self, prompt, *, want_hidden=False):
        raise AssertionError("read in chunks")

    def verify(self, root, tree, *, want_hidden=False):
        raise AssertionError("verified through decode_many")

    def commit_slot(self, slot, path):
        self._cached += 1 + len(path)

    def truncate_slot(self, slot, length):
        self._cached = min(self._cached, length)

    def slot_cached(self, slot):
        return self._cached

    @property
    def cached(self):
        return self._cached


class NumpyModel(OneSlotBackend):
    """A model whose rows are NumPy's, as llama.cpp's are: float32 logits that are a function of the
    prefix alone (each of the last two tokens adds its random row, scaled by ``sharpen``), the same
    whatever the batch, so answers with drafts must equal plain decoding's token for token. No torch
    runs in its steps: what samples them is the NumPy path of the one rule."""

    kind, device, precision = "numpy", "cpu", "float32"

    def __init__(self, vocab: int, *, seed: int = 0, sharpen: float = 3.0, name: str = "numpy model") -> None:
        rng = np.random.default_rng(seed)
        self.last = (rng.standard_normal((vocab, vocab)) * sharpen).astype(np.float32)
        self.before = (rng.standard_normal((vocab, vocab)) * sharpen / 2).astype(np.float32)
        self.tokenizer, self.name, self.vocab = IdTokenizer(), name, vocab
        self.max_context, self.eos_ids = 4096, set()
        self.ids: list[int] = []  # what the cache holds
        self._verified: tuple[int, DraftTree] | None = None

    def row(self, prefix: list[int]) -> np.ndarray:
        out = self.last[prefix[-1]].copy()
        if len(prefix) > 1:
            out += self.before[prefix[-2]]
        return out

    def prefill(self, tokens, start, *, want_hidden=False):
        self.ids = self.ids[:start] + list(tokens)
        return None

    def verify(self, root, tree, *, want_hidden=False):
        context = self.ids + [int(root)]
        rows = [self.row(context)] + [self.row(context + tree.token_path(i)) for i in range(len(tree))]
        self._verified = (int(root), tree)
        return Verified(np.stack(rows))

    def commit(self, path):
        root, tree = self._verified
        self.ids = self.ids + [root] + [int(tree.tokens[p]) for p in path]
        self._verified = None

    def truncate(self, length):
        self.ids = self.ids[:length]

    @property
    def cached(self):
        return len(self.ids)


class FixedTree(Drafter):
    """A deterministic drafter: the same tree every step, siblings at both levels (a verify holds rows
    that miss)."""

    name = "retrieval"
    source = DraftSource.RETRIEVAL

    def reset(self, context_ids):
        pass

    def observe(self, ids):
        pass

    def propose(self, context_ids, budget):
        return DraftTree(
            tokens=np.array([3, 5, 1, 2, 7, 0, 4, 6], dtype=np.int64),
            parents=np.array([-1, -1, -1, 0, 0, 1, 1, 2], dtype=np.int32),
            depth=np.array([1, 1, 1, 2, 2, 2, 2, 2], dtype=np.int32),
            support=np.array([8, 6, 4, 5, 3, 4, 2, 3], np.float32),
            source=np.full(8, DraftSource.RETRIEVAL, np.int8),
        )
