"""Greedy speculative decoding is token-identical to Hugging Face generate, for every drafter."""

import numpy as np
import pytest
import torch
from engine_fixtures import IdTokenizer, tiny_llama

from draftscope.draft_tree import DraftSource, DraftTree
from draftscope.drafters import (
    ContextDrafter,
    Drafter,
    RetrievalDrafter,
)
from draftscope.drafters.model_drafter import ModelDrafter, draft
from draftscope.engine.engine import Engine, GenerationRequest, PromptTooLongError
from draftscope.engine.sampling import SamplingParams
from draftscope.retrieval import Writer

VOCAB = 300
PROMPTS = [[5 + i, 17, 33 + i, 90, 91 + i, 7] for i in range(4)]


@pytest.fixture(scope="module")
def model():
    return tiny_llama(VOCAB, seed=1)


def noisy_copy(model, scale=0.6, seed=0):
    """The target with noise on its head: a draft model that agrees with it most of the time."""
    import copy

    draft = copy.deepcopy(model)
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        w = draft.lm_head.weight
        w.add_(torch.randn(w.shape, generator=gen) * w.std() * scale)
    return draft


def hf_greedy(model, prompt, n, eos=None):
    out = model.generate(torch.tensor([prompt]), max_new_tokens=n, do_sample=False, eos_token_id=eos, pad_token_id=0)
    return out[0, len(prompt) :].tolist()


@pytest.fixture(scope="module")
def references(model):
    return [hf_greedy(model, p, 48) for p in PROMPTS]


@pytest.fixture(scope="module")
def datastore(model, references, tmp_path_factory):
    """The model's own continuations (so drafts get accepted) among random noise."""
    path = tmp_path_factory.mktemp("ds") / "store.idx"
    w = Writer(path, VOCAB)
    rng = np.random.default_rng(0)
    for p, r in zip(PROMPTS, references):
        w.add_entry(rng.integers(0, VOCAB, 40))
        w.add_entry(p + r[:30])  # part of each answer: later tokens must come from the target
    w.finalize()
    return path


def run(engine, prompt, drafters, n=48, budget=16, **kw):
    events = list(
        engine.generate(GenerationRequest(prompt_ids=prompt, max_new_tokens=n, drafters=drafters, budget=budget, **kw))
    )
    return events[:-1], events[-1]


@pytest.mark.parametrize("which", ["plain", "retrieval", "context", "model", "composite", "adaptive"])
def test_identical_to_hf_generate(model, references, datastore, which, monkeypatch):
    engine = Engine(model, IdTokenizer())
    if which == "adaptive":  # a flat curve, not this machine's timings: the policy's trees are under test
        from draftscope.engine.policy import StepPolicy

        engine.verify_costs = {0: 0.010, 1: 0.0105, 2: 0.011, 4: 0.012, 8: 0.013, 16: 0.015, 32: 0.02, 64: 0.03}
        monkeypatch.setattr(StepPolicy, "_learn_cost", lambda self, n, seconds: None)
    draft_model = noisy_copy(model)  # right often, wrong sometimes: both paths of verification run
    make = {
        "plain": lambda: [],
        "retrieval": lambda: [RetrievalDrafter(str(datastore))],
        "context": lambda: [ContextDrafter()],
        "model": lambda: [ModelDrafter(draft_model, max_tokens=4)],
        "composite": lambda: [
            RetrievalDrafter(str(datastore)),
            ContextDrafter(),
            ModelDrafter(draft_model, max_tokens=4),
        ],
        "adaptive": lambda: [RetrievalDrafter(str(datastore)), ContextDrafter()],
    }[which]
    accepted = 0
    for prompt, ref in zip(PROMPTS, references):
        steps, final = run(engine, prompt, make(), budget=None if which == "adaptive" else 16)
        assert final.finish_reason == "length"
        assert final.token_ids == ref
        assert [t for s in steps for t in s.token_ids] == ref
        assert final.stats.tokens == 48 and final.stats.steps == len(steps)
        accepted += sum(s.accepted for s in steps)
    # A drafter that never gets a token accepted would prove nothing about verification.
    assert which == "plain" or accepted > 20, f"only {accepted} draft tokens accepted"


def test_self_drafting_accepts_every_draft_token(model, references):
    engine = Engine(model, IdTokenizer())
    steps, final = run(engine, PROMPTS[0], [ModelDrafter(model, max_tokens=5)])
    assert final.token_ids == references[0]
    for s in steps[:-1]:
        assert s.proposed == 5 and s.accepted == 5, s
    assert final.stats.accepted_by_source == {"model": sum(s.accepted for s in steps)}


def test_draft_function_api(model):
    """naive_speculate's draft(): query ids, a KV cache, n tokens, a strategy -> ids and logits."""
    from transformers import DynamicCache

    cache = DynamicCache()
    out = draft(model, torch.tensor([PROMPTS[0]]), cache, 5, SamplingParams())
    assert out.token_ids.shape == (1, 5) and out.token_logits.shape == (1, 5, VOCAB)
    assert out.token_ids[0].tolist() == hf_greedy(model, PROMPTS[0], 5)
    assert cache.get_seq_length() == len(PROMPTS[0]) + 4  # the last draft token is not fed yet
    eos = out.token_ids[0, 2].item()
    cache2 = DynamicCache()
    short = draft(model, torch.tensor([PROMPTS[0]]), cache2, 5, SamplingParams(), eos_token_id=eos)
    assert short.token_ids.shape[1] == 3, "drafting stops at EOS"


def test_eos_inside_an_accepted_draft_stops_there(model, references, datastore):
    ref = references[0]
    eos = ref[5]
    expected = hf_greedy(model, PROMPTS[0], 48, eos=eos)
    assert expected == ref[:6]
    engine = Engine(model, IdTokenizer())
    engine.eos_ids = {eos}
    steps, final = run(engine, PROMPTS[0], [RetrievalDrafter(str(datastore))])
    assert final.finish_reason == "eos"
    assert final.token_ids == expected
    assert len(steps) == 1, "the whole answer came from one accepted draft"
    # EOS itself was a draft token: six accepted nodes, and nothing of the draft after it.
    assert steps[0].accepted == 6 and steps[0].token_ids == expected
    assert steps[0].provenance == ["retrieval"] * 6


def test_stop_strings_cancel_and_limits(model, references):
    engine = Engine(model, IdTokenizer())
    ref = references[1]
    stop = f" {ref[3]} {ref[4]}"
    _, final = run(engine, PROMPTS[1], [ContextDrafter()], stop_strings=[stop])
    assert final.finish_reason == "stop"
    assert final.token_ids[: len(final.token_ids)] == ref[: len(final.token_ids)]
    assert stop not in final.text and final.text == "".join(f" {t}" for t in ref[:3])

    import threading

    cancel = threading.Event()
    gen = engine.generate(GenerationRequest(prompt_ids=PROMPTS[1], max_new_tokens=48, cancel=cancel))
    first = next(gen)
    cancel.set()
    rest = list(gen)
    # the answer stops within the steps already under way (it runs at most MAX_LEAD steps ahead of its reader)
    from draftscope.engine.stepper import MAX_LEAD

    assert len(rest) <= MAX_LEAD + 1 and rest[-1].finish_reason == "cancel"
    assert rest[-1].token_ids == first.token_ids + [t for ev in rest[:-1] for t in ev.token_ids]
    assert len(rest[-1].token_ids) < 48

    _, final = run(engine, PROMPTS[1], [], n=3)
    assert final.finish_reason == "length" and final.token_ids == ref[:3]


def test_prompt_longer_than_the_context_is_a_clear_error(model):
    engine = Engine(model, IdTokenizer())
    with pytest.raises(PromptTooLongError, match="300 tokens.*at most 256"):
        list(engine.generate(GenerationRequest(prompt_ids=[1] * 300)))
    # Near the limit the answer is cut at the context size.
    _, final = run(engine, [1] * 250, [], n=40)
    assert final.finish_reason == "length" and len(final.token_ids) == 6


def test_step_events_describe_the_tree(model, datastore):
    engine = Engine(model, IdTokenizer())
    steps, final = run(engine, PROMPTS[2], [RetrievalDrafter(str(datastore))])
    s = steps[0]
    assert s.proposed == len(s.tree.tokens) > 0
    assert s.accepted == len(s.accepted_path)
    path_tokens = [s.tree.tokens[i] for i in s.accepted_path]
    assert s.token_ids[: s.accepted] == path_tokens
    assert s.provenance == ["retrieval"] * s.accepted + ["target"]
    assert s.tau == s.tokens_total / s.steps_total
    assert isinstance(s.tree.source[0], str) and s.pieces == [f" {t}" for t in s.token_ids]


def test_missing_model_is_a_clear_error(tmp_path):
    from draftscope.models.resolve import ModelNotFoundError

    with pytest.raises(ModelNotFoundError, match="model not found"):
        Engine.load(str(tmp_path / "nope"), measure=False)
    bad = tmp_path / "broken.gguf"
    bad.write_bytes(b"not a gguf")
    with pytest.raises(ModelNotFoundError, match="could not|not a GGUF file"):  # torch's words, or the GGUF check's
        Engine.load(str(bad), measure=False)


def test_composite_moves_budget_to_the_drafter_that_gets_accepted():
    from draftscope.drafters.composite import CompositeDrafter

    def fixed(tokens, source):
        class D(Drafter):
            def __init__(self):
                self.source, self.name = source, source.name.lower()

            def reset(self, ids):
                pass

            def observe(self, ids):
                pass

            def propose(self, ids, budget):
                k = len(tokens)
                return DraftTree(
                    np.array(tokens),
                    np.arange(-1, k - 1, dtype=np.int32),
                    np.arange(1, k + 1, dtype=np.int32),
                    np.full(k, 10.0, np.float32),
                    np.full(k, source, np.int8),
                )

        return D()

    comp = CompositeDrafter([fixed([1, 2, 3], DraftSource.RETRIEVAL), fixed([4, 5, 6], DraftSource.CONTEXT)])
    first = comp.propose([0], 3)
    assert sorted(first.tokens.tolist()) == [1, 2, 4]  # equal weights: both first levels, then a tie
    for _ in range(10):  # context drafts keep being accepted, retrieval drafts never
        tree = comp.propose([0], 6)
        accepted = [i for i in range(len(tree)) if tree.source[i] == DraftSource.CONTEXT]
        comp.feedback(tree, accepted)
    assert comp.acceptance[int(DraftSource.CONTEXT)] > 0.9 > 0.1 > comp.acceptance[int(DraftSource.RETRIEVAL)]
    assert comp.propose([0], 3).tokens.tolist() == [4, 5, 6]
