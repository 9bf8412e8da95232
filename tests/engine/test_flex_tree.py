"""Tree attention on FlexAttention for the graphed static-cache steps (issue 42, item 2), on the CPU
(FlexAttention's reference code here; its kernels on a card): the block mask filled in place equals
the reference mask at every cache length, padded query heads give the unpadded attention, fp32
answers with drafts through branches, padding and a context past 1,024 tokens are plain decoding's
(greedy and seeded), and a mask that ignores the tree is refused by the capture check and, forced
into use, changes the answers."""

import pytest
import torch
import torch.nn.functional as F

from draftscope.draft_tree import DraftTree
from draftscope.drafters import ContextDrafter
from draftscope.drafters.oracle import OracleDrafter
from draftscope.engine.backends.pytorch import step_graphs
from draftscope.engine.backends.pytorch.flex_tree import BLOCK, TreeMask, padded_flex, padded_group
from draftscope.engine.backends.pytorch.static_cache import additive_mask
from draftscope.engine.backends.pytorch.torch_backend import TorchBackend
from draftscope.engine.backends.pytorch.torch_static import StaticTorchBackend
from draftscope.engine.engine import Engine, GenerationRequest
from draftscope.engine.sampling import SamplingParams

SAMPLINGS = [SamplingParams(), SamplingParams(temperature=0.9, top_p=0.95, seed=8)]


def tree_mask_of(q: int) -> torch.Tensor:
    """[q, q]: a branching tree's own slots (siblings under the root and under a node), the rest padding."""
    own = torch.eye(q, dtype=torch.bool)
    own[:, 0] = True
    for node, parent in ((3, 1), (4, 1), (5, 3), (6, 2)):
        if node < q:
            own[node, parent] = True
            own[node] |= own[parent]
    return own


@pytest.fixture(scope="module")
def model(tokenizer):
    """Six query heads over two key/value heads (a group of 3, padded to 4), 2,048 positions."""
    torch.manual_seed(3)
    from transformers import LlamaConfig, LlamaForCausalLM

    cfg = LlamaConfig(
        vocab_size=len(tokenizer),
        hidden_size=96,
        intermediate_size=192,
        num_hidden_layers=2,
        num_attention_heads=6,
        num_key_value_heads=2,
        max_position_embeddings=2048,
        bos_token_id=None,
        eos_token_id=None,
        pad_token_id=None,
        tie_word_embeddings=False,
    )
    model = LlamaForCausalLM(cfg).eval()
    with torch.no_grad():
        model.lm_head.weight.mul_(4.0)
    return model


def test_the_block_mask_filled_in_place_equals_the_reference_mask(monkeypatch):
    """At cache lengths inside, at and across block edges, the BlockMask (the same tensors each
    time, never rebuilt) sees what the SDPA steps' additive mask allows; key blocks past the step
    are not visited."""
    import torch.nn.attention.flex_attention as flex

    monkeypatch.setattr(flex, "create_block_mask", lambda *a, **k: pytest.fail("a block mask made per step"))
    q, span = 9, 3 * BLOCK
    mask = TreeMask(q, span, "cpu")
    buffers = [t.data_ptr() for t in (mask.partial_count, mask.partial, mask.full_count, mask.full)]
    own = tree_mask_of(q)
    for past in (0, 5, BLOCK - 5, BLOCK - 1, BLOCK, 200, 2 * BLOCK - q, span - q):
        mask.fill(past, own)
        reference = additive_mask(own, past, span, torch.float32)[0, 0] == 0
        assert torch.equal(mask.dense(), reference), past
        assert int(mask.full_count[0, 0, 0]) == past // BLOCK
        assert int(mask.full_count[0, 0, 0] + mask.partial_count[0, 0, 0]) == -(-(past + q) // BLOCK)
    assert [t.data_ptr() for t in (mask.partial_count, mask.partial, mask.full_count, mask.full)] == buffers
    with pytest.raises(ValueError, match="does not fit"):
        mask.fill(span - q + 1, own)


@pytest.mark.parametrize("heads,kv_heads", [(6, 2), (12, 2), (7, 1), (4, 2)], ids=["group 3", "6", "7", "2"])
def test_padded_query_heads_give_the_unpadded_attention(heads, kv_heads):
    torch.manual_seed(heads)
    q, span, past = 9, 2 * BLOCK, 140
    mask = TreeMask(q, span, "cpu")
    own = tree_mask_of(q)
    mask.fill(past, own)
    query, key, value = (
        torch.randn(1, heads, q, 16),
        torch.randn(1, kv_heads, span, 16),
        torch.randn(1, kv_heads, span, 16),
    )
    out = padded_flex(query, key, value, mask.block_mask, None)
    expected = F.scaled_dot_product_attention(
        query, key, value, attn_mask=additive_mask(own, past, span, torch.float32), enable_gqa=True
    )
    assert out.shape == expected.shape and torch.allclose(out, expected, atol=1e-5)
    assert padded_group(heads // kv_heads) in (2, 4, 8) and padded_group(heads // kv_heads) >= heads // kv_heads


def long_prompt(tokenizer) -> list[int]:
    ids = tokenizer("def main():\n    print('hello world')\n" * 120, add_special_tokens=False)["input_ids"]
    assert len(ids) > 1024
    return ids[:1100]


@pytest.mark.parametrize("params", SAMPLINGS, ids=["greedy", "T0.9"])
def test_flex_steps_answer_as_plain_decoding_past_1024_cached_tokens(model, tokenizer, params):
    static = StaticTorchBackend(model, tokenizer, graphs="eager", attention="flex")
    try:
        assert static.graphs is not None and static.graphs.flex and "FlexAttention" in static.graphs_note, (
            static.graphs_note
        )
        # one graph a tree size, over the whole buffer: a step in a shorter span replays it too
        assert len(static.spans) > 1 and {span for _, span in static.graphs.buckets} == {static.spans[-1]}
        static.start(list(range(5, 45)))
        static.verify(44, DraftTree.empty())
        assert static.graphs.replays == 1
        static.graphs.replays = 0
        ids = long_prompt(tokenizer)
        plain = list(
            Engine(backend=TorchBackend(model, tokenizer)).generate(
                GenerationRequest(prompt_ids=ids, max_new_tokens=32, sampling=params)
            )
        )[-1]
        events = list(
            Engine(backend=static).generate(
                GenerationRequest(
                    prompt_ids=ids,
                    max_new_tokens=32,
                    sampling=params,
                    drafters=[ContextDrafter(), OracleDrafter(plain.token_ids, len(ids), max_depth=3)],
                    budget=10,
                )
            )
        )
        assert events[-1].token_ids == plain.token_ids
        steps = events[:-1]
        assert static.graphs.replays == len(steps) > 0  # every step on the FlexAttention buffers
        assert any(e.proposed > 1 for e in steps)  # trees, not only chains of one
        assert sum(e.accepted for e in steps) > 0  # sampled too (the oracle)
    finally:
        model.set_attn_implementation("sdpa")


def ignore_the_tree(monkeypatch):
    """A biased FlexAttention mask: every slot of the step seen by every node (siblings, later nodes
    and the padding), whatever the tree says."""
    fill = TreeMask.fill
    monkeypatch.setattr(TreeMask, "fill", lambda self, past, own: fill(self, past, torch.ones_like(own)))


def test_a_block_mask_that_ignores_the_tree_is_refused_at_capture(model, tokenizer, monkeypatch):
    ignore_the_tree(monkeypatch)
    backend = StaticTorchBackend(model, tokenizer, graphs="off")
    graphs, note = step_graphs.capture(backend, replay="eager", attention="flex", buckets=(0, 4, 8))
    assert graphs is not None and not graphs.flex, note  # SDPA's graphs instead, and the note says why
    assert "FlexAttention: RuntimeError: a replayed step" in note and "differs" in note, note
    assert model.config._attn_implementation == "sdpa"


@pytest.mark.parametrize("params", SAMPLINGS, ids=["greedy", "T0.9"])
def test_the_identity_test_rejects_a_biased_flex_mask(model, tokenizer, monkeypatch, params):
    """The answer check above can fail: the mask that ignores the tree, let past the capture check,
    makes drafted answers differ from plain decoding."""
    ignore_the_tree(monkeypatch)
    monkeypatch.setattr(step_graphs, "_check", lambda backend, graphs: None)
    static = StaticTorchBackend(model, tokenizer, graphs="eager", attention="flex")
    try:
        ids = tokenizer("def main():\n    print('hello world')\n" * 3, add_special_tokens=False)["input_ids"]
        plain = list(
            Engine(backend=TorchBackend(model, tokenizer)).generate(
                GenerationRequest(prompt_ids=ids, max_new_tokens=48, sampling=params)
            )
        )[-1]
        # drafts of the plain answer itself (an oracle), so every step verifies a tree
        oracle = OracleDrafter(plain.token_ids, len(ids))
        biased = list(
            Engine(backend=static).generate(
                GenerationRequest(prompt_ids=ids, max_new_tokens=48, sampling=params, drafters=[oracle], budget=10)
            )
        )[-1]
        assert biased.token_ids != plain.token_ids
    finally:
        model.set_attn_implementation("sdpa")


@pytest.mark.parametrize("faster", ["FlexAttention", "SDPA"])
def test_auto_keeps_the_attention_that_replays_faster_and_says_both_times(model, tokenizer, monkeypatch, faster):
    monkeypatch.setattr(
        step_graphs, "_replay_ms", lambda g, context: 1.0 if g.flex == (faster == "FlexAttention") else 3.0
    )
    backend = StaticTorchBackend(model, tokenizer, graphs="off")
    try:
        graphs, note = step_graphs.capture(backend, replay="eager", attention="auto", buckets=(0, 4))
        assert graphs is not None and graphs.flex == (faster == "FlexAttention"), note
        times = (
            "1.00 ms on FlexAttention, 3.00 ms on SDPA"
            if faster == "FlexAttention"
            else "3.00 ms on FlexAttention, 1.00 ms on SDPA"
        )
        assert times in note, note
        expected = "draftscope_flex_tree" if faster == "FlexAttention" else "sdpa"
        assert model.config._attn_implementation == expected
    finally:
        model.set_attn_implementation("sdpa")


def test_auto_times_both_attentions_at_one_context_on_this_machine(model, tokenizer):
    import re

    backend = StaticTorchBackend(model, tokenizer, graphs="off")
    try:
        graphs, note = step_graphs.capture(backend, replay="eager", attention="auto", buckets=(0, 4))
        times = re.search(r"a step ([\d.]+) ms on FlexAttention, ([\d.]+) ms on SDPA", note)
        assert graphs is not None and times, note
        flex_ms, sdpa_ms = map(float, times.groups())
        assert graphs.replays == 0  # the timing's replays are not answers'
        if flex_ms != sdpa_ms:  # (equal as printed: either may have been the faster)
            assert graphs.flex == (flex_ms < sdpa_ms)
    finally:
        model.set_attn_implementation("sdpa")


def test_compiled_flex_steps_answer_as_plain_decoding(model, tokenizer):
    """torch.compile over the step with FlexAttention inside (inductor's C++ backend here): fp32
    answers with drafts past 1,024 cached tokens are plain decoding's, greedy and seeded, every step
    replayed. One span and two buckets keep the compiles to two."""
    import torch._dynamo

    backend = StaticTorchBackend(model, tokenizer, graphs="off", first_span=64)
    backend.spans = (backend.spans[-1],)
    torch._dynamo.reset()
    try:
        graphs, note = step_graphs.capture(backend, replay="eager", buckets=(0, 4), compiled=True, attention="flex")
        assert graphs is not None and graphs.flex and graphs.compiled, note
        assert note.startswith("replayed buffers of compiled steps on FlexAttention"), note
        backend.graphs, backend.graphs_note = graphs, note
        ids = long_prompt(tokenizer)
        for params in SAMPLINGS:
            plain = list(
                Engine(backend=TorchBackend(model, tokenizer)).generate(
                    GenerationRequest(prompt_ids=ids, max_new_tokens=24, sampling=params)
                )
            )[-1]
            graphs.replays = 0
            events = list(
                Engine(backend=backend).generate(
                    GenerationRequest(
                        prompt_ids=ids, max_new_tokens=24, sampling=params, drafters=[ContextDrafter()], budget=4
                    )
                )
            )
            assert events[-1].token_ids == plain.token_ids, params
            assert graphs.replays == len(events) - 1
    finally:
        model.set_attn_implementation("sdpa")
