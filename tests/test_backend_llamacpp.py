"""The llama.cpp backend on a tiny GGUF written at test time (random llama weights, the test
tokenizer): a tree verified in one llama_decode gives each node the logits of its path decoded as
a chain; commit and truncate leave the cache as a fresh decode would; the engine's answers on it
are the backend's own plain decoding, greedy and seeded, with every drafter; cancel, stop strings
and EOS inside a tree behave as on torch; damaged files give errors, never a dead process."""

from __future__ import annotations

import threading

import numpy as np
import pytest
import torch

from draftscope.draft_tree import DraftSource, DraftTree
from draftscope.engine.backends.base import chain_tree
from draftscope.engine.drafters import ContextDrafter, RetrievalDrafter
from draftscope.engine.engine import Engine, GenerationRequest
from draftscope.engine.sampling import SamplingParams
from draftscope.retrieval import Writer
from engine_fixtures import tiny_llama
from gguf_fixtures import write_tiny_gguf

llama_cpp = pytest.importorskip("llama_cpp")
from draftscope.engine.backends.llamacpp import LlamaCppBackend  # noqa: E402

SAMPLINGS = [SamplingParams(), SamplingParams(temperature=0.8, top_p=0.9, seed=11),
             SamplingParams(temperature=1.0, top_k=20, seed=5)]
PROMPTS = ["def main():\n    print('hello world')", "The quick brown fox jumps over", "Hello there! How can I help"]


@pytest.fixture(scope="module")
def torch_model(tokenizer):
    return tiny_llama(len(tokenizer), seed=3, sharpen=4.0)


@pytest.fixture(scope="module")
def gguf_file(torch_model, tokenizer_dir, tmp_path_factory):
    return write_tiny_gguf(tmp_path_factory.mktemp("gguf") / "tiny-F32.gguf", torch_model, tokenizer_dir)


@pytest.fixture(scope="module")
def backend(gguf_file, tokenizer):
    b = LlamaCppBackend(gguf_file, tokenizer, context=256, threads=1)
    yield b
    b.close()


@pytest.fixture(scope="module")
def engine(backend):
    return Engine(backend=backend)


def prompt_ids(tokenizer, text):
    return tokenizer(text, add_special_tokens=False)["input_ids"]


def a_tree():
    """12 nodes, 5 leaves, depth 4: branches at the root and below."""
    parents = [-1, -1, -1, 0, 0, 1, 3, 3, 4, 6, 6, 7]
    depth = [1, 1, 1, 2, 2, 2, 3, 3, 3, 4, 4, 4]
    tokens = [40 + 7 * i for i in range(12)]
    return DraftTree(np.array(tokens, np.int64), np.array(parents, np.int32), np.array(depth, np.int32),
                     np.ones(12, np.float32), np.full(12, DraftSource.RETRIEVAL, np.int8))


def test_the_gguf_runs_the_same_model_as_torch(backend, torch_model, tokenizer):
    """The fixture is faithful (same weights, same tokenizer): llama.cpp's logits are torch's."""
    ids = prompt_ids(tokenizer, PROMPTS[0])
    assert backend.tokenize(PROMPTS[0]) == ids
    backend.start(ids[:-1] + [ids[-1]])
    got = backend.verify(ids[-1], DraftTree.empty()).logits
    with torch.no_grad():
        want = torch_model(torch.tensor([ids])).logits[0, -1]
    assert got.shape == (1, backend.vocab)
    assert torch.allclose(got[0], want, atol=2e-3), float((got[0] - want).abs().max())


def test_each_tree_node_gets_the_logits_of_its_path_as_a_chain(backend, tokenizer):
    ids = prompt_ids(tokenizer, PROMPTS[1])
    tree = a_tree()
    backend.start(ids)
    rows = backend.verify(ids[-1], tree).logits
    assert rows.shape == (13, backend.vocab)
    for node in [-1, *range(len(tree))]:
        path = tree.token_path(node) if node >= 0 else []
        backend.start(ids + path)  # the path decoded as plain tokens, one forward
        chain = backend.verify((ids + path)[-1], DraftTree.empty()).logits[0]
        assert torch.allclose(rows[node + 1], chain, atol=1e-3), (node, float((rows[node + 1] - chain).abs().max()))
    # and a changed tree changes the rows: the check can fail
    assert not torch.allclose(rows[1], rows[2], atol=1e-3)


@pytest.mark.parametrize("accepted", [[], [0], [1, 5], [0, 3, 6, 9], [2]])
def test_commit_keeps_the_accepted_path_only(backend, tokenizer, accepted):
    ids = prompt_ids(tokenizer, PROMPTS[2])
    tree = a_tree()
    backend.start(ids)
    backend.verify(ids[-1], tree)
    backend.commit(accepted)
    assert backend.cached == len(ids) + len(accepted)
    follow = 99
    after = backend.verify(follow, chain_tree([101, 102])).logits
    fresh_ids = ids + [int(tree.tokens[i]) for i in accepted] + [follow, 101, 102]
    backend.start(fresh_ids)
    fresh = backend.verify(fresh_ids[-1], DraftTree.empty()).logits[0]
    assert torch.allclose(after[-1], fresh, atol=1e-3)
    backend.start(fresh_ids[:-2])
    assert torch.allclose(after[0], backend.verify(follow, DraftTree.empty()).logits[0], atol=1e-3)


def test_truncate_forgets_what_came_after(backend, tokenizer):
    ids = prompt_ids(tokenizer, PROMPTS[0])
    backend.start(ids)
    backend.verify(ids[-1], chain_tree([50, 51, 52]))
    backend.commit([0, 1, 2])
    backend.truncate(len(ids) - 1)
    assert backend.cached == len(ids) - 1
    again = backend.verify(ids[-1], DraftTree.empty()).logits[0]
    backend.start(ids)
    assert torch.allclose(again, backend.verify(ids[-1], DraftTree.empty()).logits[0], atol=1e-4)


# ---------------------------------------------------------------- the engine on this backend


def answer(engine, ids, drafters=(), n=40, **kw):
    events = list(engine.generate(GenerationRequest(prompt_ids=ids, max_new_tokens=n, drafters=list(drafters), **kw)))
    return events[-1]


@pytest.fixture(scope="module")
def datastore(engine, tokenizer, tmp_path_factory):
    """The model's own continuations (plain decoding on this backend) among other text."""
    path = tmp_path_factory.mktemp("ds") / "store.idx"
    w = Writer(path, engine.vocab)
    for text in PROMPTS:
        ids = prompt_ids(tokenizer, text)
        for params in SAMPLINGS:  # seeded answers are fixed by their seed: retrieval can know them too
            w.add_entry(ids + answer(engine, ids, sampling=params).token_ids[:25])
        w.add_entry(prompt_ids(tokenizer, "import os\nimport sys\n\nclass Thing:\n    pass\n"))
    w.finalize()
    return path


def drafter_mixes(engine, datastore):
    return {
        "retrieval": lambda: [RetrievalDrafter(datastore)],
        "context": lambda: [ContextDrafter()],
        "retrieval+context": lambda: [RetrievalDrafter(datastore), ContextDrafter()],
    }


def first_divergence(a, b):
    return next((k for k, (x, y) in enumerate(zip(a, b)) if x != y), None if len(a) == len(b) else min(len(a), len(b)))


def near_tie(backend, ids, k, params):
    """The top-two gap of the processed scores plain decoding saw at answer position ``k``."""
    backend.start(ids)
    row = backend.verify(ids[-1], DraftTree.empty()).logits[0]
    top = torch.topk(row.float() / (params.temperature or 1.0), 2).values
    return float(top[0] - top[1])


@pytest.mark.parametrize("mix", ["retrieval", "context", "retrieval+context"])
@pytest.mark.parametrize("params", SAMPLINGS, ids=["greedy", "T0.8", "T1"])
def test_answers_are_the_backends_own_plain_decoding(engine, backend, tokenizer, datastore, mix, params):
    """Token for token, unless batch shape moved a near-tie: then the first divergence must sit
    where plain decoding's top two scores were within float noise."""
    makers = drafter_mixes(engine, datastore)
    accepted = 0
    for text in PROMPTS:
        ids = prompt_ids(tokenizer, text)
        plain = answer(engine, ids, sampling=params)
        spec = answer(engine, ids, makers[mix](), sampling=params, budget=12)
        assert spec.finish_reason == plain.finish_reason or first_divergence(plain.token_ids, spec.token_ids) is not None
        k = first_divergence(plain.token_ids, spec.token_ids)
        if k is not None:
            gap = near_tie(backend, ids + plain.token_ids[:k], k, params)
            assert gap < 1e-3, f"{mix}: diverged at {k} where the top two were {gap:.4f} apart"
        accepted += sum(spec.stats.accepted_by_source.values())
    if "retrieval" in mix:  # the datastore holds these answers: drafts must have been accepted
        assert accepted > 0, "drafts were never accepted: the check proved nothing"


def test_a_wrong_verifier_is_caught(engine, tokenizer, datastore, monkeypatch):
    """The identity check above can fail: a verifier that accepts each tree's first draft does."""
    import draftscope.engine.engine as engine_module

    ids = prompt_ids(tokenizer, PROMPTS[1])
    plain = answer(engine, ids)
    monkeypatch.setattr(engine_module, "verify_tree",
                        lambda tree, chosen: ([0], int(chosen[1])) if len(tree) else ([], int(chosen[0])))
    broken = answer(engine, ids, [RetrievalDrafter(datastore), ContextDrafter()], budget=12)
    assert broken.token_ids != plain.token_ids


def test_seeded_answer_repeats_and_another_seed_differs(engine, tokenizer):
    ids = prompt_ids(tokenizer, PROMPTS[0])
    a = answer(engine, ids, sampling=SamplingParams(temperature=1.0, seed=3))
    b = answer(engine, ids, [ContextDrafter()], sampling=SamplingParams(temperature=1.0, seed=3), budget=8)
    c = answer(engine, ids, sampling=SamplingParams(temperature=1.0, seed=4))
    assert a.token_ids == b.token_ids and a.stats.seed == 3
    assert c.token_ids != a.token_ids


def test_eos_inside_a_tree_ends_the_answer_there(gguf_file, tokenizer, backend):
    ids = prompt_ids(tokenizer, PROMPTS[1])
    engine = Engine(backend=backend)
    plain = answer(engine, ids, n=30)
    eos = plain.token_ids[6]
    backend.eos_ids.add(eos)
    try:
        cut = answer(engine, ids, n=30)
        oracle = answer(engine, ids, [Oracle(plain.token_ids)], n=30, budget=12)
    finally:
        backend.eos_ids.discard(eos)
    assert cut.finish_reason == "eos" and cut.token_ids == plain.token_ids[: plain.token_ids.index(eos) + 1]
    assert oracle.token_ids == cut.token_ids and oracle.finish_reason == "eos"


class Oracle:
    """Drafts the known answer (a chain), so EOS sits inside an accepted tree."""

    name = "oracle"
    source = DraftSource.ORACLE

    def __init__(self, answer_ids):
        self.answer = list(answer_ids)
        self.start = 0

    def reset(self, context):
        self.start = len(context)

    def observe(self, accepted):
        pass

    def propose(self, context, budget):
        done = len(context) - self.start
        return chain_tree(self.answer[done : done + budget])


def test_stop_strings_and_cancel(engine, tokenizer):
    ids = prompt_ids(tokenizer, PROMPTS[2])
    plain = answer(engine, ids, n=30)
    clean = [k for k in range(3, len(plain.text) - 2) if "\ufffd" not in plain.text[k : k + 2]]
    stop = plain.text[clean[0] : clean[0] + 2]  # two characters from inside the answer
    stopped = answer(engine, ids, [ContextDrafter()], n=30, stop_strings=[stop], budget=8)
    assert stopped.finish_reason == "stop" and stopped.text == plain.text[: plain.text.find(stop)]
    cancel = threading.Event()
    events = []
    for ev in engine.generate(GenerationRequest(prompt_ids=ids, max_new_tokens=30, cancel=cancel)):
        events.append(ev)
        if len(events) == 2:
            cancel.set()
    assert events[-1].finish_reason == "cancel" and len(events[-1].token_ids) <= 3


# ---------------------------------------------------------------- the faces on this backend


def test_the_terminal_answers_on_llama_cpp_and_names_it(gguf_file, capsys):
    from draftscope.cli import main

    assert main(["generate", "def main():", "--model", str(gguf_file), "--backend", "llama.cpp",
                 "--max-new-tokens", "8", "--drafters", "context"]) == 0
    captured = capsys.readouterr()
    assert captured.out.strip() and "llama.cpp" in captured.err


def test_asking_llama_cpp_for_a_folder_model_is_refused_in_words(tokenizer_dir, capsys):
    from draftscope.cli import main

    assert main(["generate", "hi", "--model", str(tokenizer_dir), "--backend", "llama.cpp"]) == 2
    assert "not a GGUF file" in capsys.readouterr().err


def test_the_lossless_audit_runs_on_llama_cpp(gguf_file, tmp_path, capsys):
    """Greedy answers against the backend's plain decoding, seeded identity, the sampler's tests
    with llama.cpp's own logits."""
    from draftscope.cli import main

    code = main(["bench", "lossless", "--model", str(gguf_file), "--backend", "llama.cpp", "--draft-model", "self",
                 "--configs", "context,model", "--temperature", "0,1", "--prompts", "2", "--seeds", "2",
                 "--max-new-tokens", "12", "--runs", "60", "--pit-tokens", "150", "--budget", "6", "--quiet",
                 "--json", str(tmp_path / "r.json")])
    out = capsys.readouterr().out
    assert code == 0, out
    assert "llama.cpp's plain decoding" in out and "plain decoding with the same seed" in out


def test_a_prompt_longer_than_the_context_is_refused_in_words(gguf_file, tokenizer):
    from draftscope.engine.engine import PromptTooLongError

    small = LlamaCppBackend(gguf_file, tokenizer, context=32, threads=1)
    try:
        engine = Engine(backend=small)
        long = prompt_ids(tokenizer, " ".join(["hello world"] * 40))
        with pytest.raises(PromptTooLongError, match=r"reads at most 32"):
            list(engine.generate(GenerationRequest(prompt_ids=long, max_new_tokens=4)))
        # the same engine still answers, and an answer that reaches the context's end stops there
        short = prompt_ids(tokenizer, PROMPTS[1])
        final = list(engine.generate(GenerationRequest(prompt_ids=short, max_new_tokens=100,
                                                       drafters=[ContextDrafter()])))[-1]
        assert final.error is None and len(short) + len(final.token_ids) <= 32
    finally:
        small.close()


def test_the_server_answers_on_llama_cpp(engine, tokenizer, tmp_path):
    """The OpenAI-compatible server over this backend through the official client: greedy text
    equals the engine's own plain decoding, streamed and not, with the drafts in the extension."""
    import openai

    from draftscope.server import ServerConfig, ServerThread, create_app
    from runtime_helpers import runtime_for

    app = create_app(runtime_for(engine, max_new_tokens=24), history=None, config=ServerConfig())
    server = ServerThread(app, port=0).start()
    try:
        client = openai.OpenAI(base_url=server.url, api_key="unused")
        messages = [{"role": "user", "content": PROMPTS[0] + " " + PROMPTS[0]}]
        expected = list(engine.generate(GenerationRequest(messages=messages, max_new_tokens=24)))[-1]
        reply = client.chat.completions.create(model="tiny", messages=messages, temperature=0, max_tokens=24)
        assert reply.choices[0].message.content == expected.text
        chunks = list(client.chat.completions.create(model="tiny", messages=messages, temperature=0,
                                                     max_tokens=24, stream=True))
        assert "".join(c.choices[0].delta.content or "" for c in chunks) == expected.text
        assert chunks[-1].model_extra["draftscope"]["stats"]["tokens"] == len(expected.token_ids)
    finally:
        server.stop()
