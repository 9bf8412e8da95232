"""Answers held to a JSON schema (engine/grammar.py): the grammar is part of the sampling rule, so at
T > 0 an answer drafted by any mix of drafters is token for token the one plain decoding under the
same grammar writes, and every finished answer is JSON the schema accepts. A verifier that masks only
the first row (drafted rows sampled free) is rejected by the same test.

The model is a tiny random Llama over a real byte-level BPE vocabulary (trained here on a few JSON
lines, ~300 tokens), so llguidance sees a real tokenizer and the random model writes anything the
grammar lets it."""

from __future__ import annotations

import json

import numpy as np
import pytest
from engine_fixtures import tiny_llama
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
from transformers import PreTrainedTokenizerFast

import draftscope.engine.answer as answer_mod
from draftscope.draft_tree import DraftSource, DraftTree
from draftscope.drafters import ContextDrafter, Drafter
from draftscope.drafters.oracle import OracleDrafter
from draftscope.engine.engine import Engine, GenerationRequest
from draftscope.engine.grammar import Constraint, GrammarError, json_grammar, vocabulary_of
from draftscope.engine.sampling import SamplingParams

SCHEMA = {
    "type": "object",
    "properties": {"colour": {"enum": ["red", "green", "blue"]}, "ok": {"type": "boolean"}},
    "required": ["colour", "ok"],
    "additionalProperties": False,
}
PROMPT = [1, 5, 9]
CORPUS = ['{"colour": "red", "ok": true}', '{"colour": "blue", "ok": false}', '{"colour": "green"}'] * 20

pytestmark = pytest.mark.usefixtures("one_thread")


@pytest.fixture(scope="module")
def tokenizer():
    bpe = Tokenizer(models.BPE())
    bpe.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    bpe.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=300, initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), special_tokens=["<eos>"]
    )
    bpe.train_from_iterator(CORPUS, trainer)
    return PreTrainedTokenizerFast(tokenizer_object=bpe, eos_token="<eos>")


@pytest.fixture(scope="module")
def engine(tokenizer):
    eos = tokenizer.eos_token_id
    model = tiny_llama(len(tokenizer), seed=7, layers=1, hidden=32, sharpen=4.0, eos_token_id=eos)
    engine = Engine(model, tokenizer)
    engine.eos_ids = {eos}
    return engine


class RandomTree(Drafter):
    """Random drafts, most of them ones the grammar forbids: what cutting and masking must survive."""

    name = "retrieval"
    source = DraftSource.RETRIEVAL

    def __init__(self, vocab: int, seed: int) -> None:
        self.vocab, self.rng = vocab, np.random.default_rng(seed)

    def reset(self, context_ids):
        pass

    def observe(self, ids):
        pass

    def propose(self, context_ids, budget):
        n = 6
        parents = np.array([-1, -1, 0, 0, 2, 4], np.int32)
        return DraftTree(
            self.rng.integers(0, self.vocab, n).astype(np.int64),
            parents,
            np.array([1, 1, 2, 2, 3, 4], np.int32),
            np.ones(n, np.float32),
            np.full(n, DraftSource.RETRIEVAL, np.int8),
        )


def drafters(plain, vocab: int, seed: int) -> list:
    """Random drafts (mostly forbidden), the conversation's, and the plain answer itself (so drafted
    rows are accepted and their masks decide tokens)."""
    return [RandomTree(vocab, seed), ContextDrafter(min_suffix=1), OracleDrafter(plain[1], len(PROMPT), max_depth=4)]


def answer(engine, seed: int, drafters) -> tuple[str, list[int], str]:
    request = GenerationRequest(
        prompt_ids=PROMPT,
        max_new_tokens=48,
        sampling=SamplingParams(temperature=1.0, top_k=40, seed=seed),
        drafters=drafters,
        budget=6 if drafters else None,
        grammar=json_grammar(SCHEMA),
    )
    final = list(engine.generate(request))[-1]
    return final.finish_reason, final.token_ids, final.text


def test_a_schema_that_cannot_be_used_is_refused_in_words():
    with pytest.raises(GrammarError, match="nonsense"):
        json_grammar({"type": "nonsense"})
    with pytest.raises(GrammarError, match="does not exist"):
        json_grammar({"type": "object", "properties": {"a": {"$ref": "#/nowhere"}}})


def test_drafts_the_grammar_forbids_are_cut_before_the_forward(tokenizer):
    vocabulary = vocabulary_of(tokenizer, len(tokenizer), {tokenizer.eos_token_id})
    assert vocabulary_of(tokenizer, len(tokenizer), {tokenizer.eos_token_id}) is vocabulary, "built once a model"
    constraint = Constraint(json_grammar(SCHEMA), vocabulary)
    opening = tokenizer('{"')["input_ids"][0]
    word = tokenizer("hello")["input_ids"][0]
    tree = DraftTree(
        np.array([word, opening, word], np.int64),  # "hello" cannot start the object; '{' can, "hello" not after it
        np.array([-1, -1, 1], np.int32),
        np.array([1, 1, 2], np.int32),
        np.ones(3, np.float32),
        np.ones(3, np.int8),
    )
    kept, masks = constraint.plan(tree)
    assert kept.tokens.tolist() == [opening] and masks.shape[0] == 2


@pytest.mark.parametrize("seed", range(6))
def test_drafted_answers_under_a_schema_are_plain_decodings_token_for_token(engine, seed):
    vocab = len(engine.tokenizer)
    plain = answer(engine, seed, [])
    drafted = answer(engine, seed, drafters(plain, vocab, seed))
    assert drafted == plain
    finish, _, text = plain
    assert finish == "eos"  # the schema's language is finite: every answer completes it, as JSON it accepts
    value = json.loads(text)
    assert set(value) == {"colour", "ok"} and value["colour"] in {"red", "green", "blue"}


def test_the_tokens_the_grammar_forces_are_drafted_and_accepted(engine):
    """A key, its quotes and colon: the grammar alone knows them, so they are drafted (source
    "grammar") beside the request's drafters, and the model, held to the grammar, takes them."""
    request = GenerationRequest(
        prompt_ids=PROMPT,
        max_new_tokens=48,
        sampling=SamplingParams(temperature=1.0, top_k=40, seed=11),
        drafters=[ContextDrafter(min_suffix=1)],
        budget=8,
        grammar=json_grammar(SCHEMA),
    )
    events = list(engine.generate(request))
    said = [p for ev in events[:-1] for p in ev.provenance]
    assert said.count("grammar") >= 4, said
    assert events[-1].token_ids == answer(engine, 11, [])[1], "the same answer as plain decoding's"


def test_a_verifier_that_masks_only_the_first_row_is_caught(engine, monkeypatch):
    vocab = len(engine.tokenizer)
    plain = {seed: answer(engine, seed, []) for seed in range(6)}
    real = answer_mod.masked
    monkeypatch.setattr(answer_mod, "masked", lambda logits, masks: _first_row_only(real, logits, masks))
    caught = 0
    for seed in range(6):
        drafted = answer(engine, seed, drafters(plain[seed], vocab, seed))
        caught += drafted != plain[seed]
    assert caught > 0


def _first_row_only(real, logits, masks):
    out = logits.clone()
    out[:1] = real(logits[:1], masks[:1])
    return out
