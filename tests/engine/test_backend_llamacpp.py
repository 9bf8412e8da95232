"""The llama.cpp backend on a tiny GGUF written at test time (random llama weights, the test
tokenizer): its logits are torch's for the same weights (the slot verbs and tree rows every
backend shares are test_backend_contract.py's); the engine's answers on it
are the backend's own plain decoding, greedy and seeded, with every drafter; cancel, stop strings
and EOS inside a tree behave as on torch; damaged files give errors, never a dead process."""

from __future__ import annotations

import threading

import numpy as np
import pytest
import torch
from engine_fixtures import tiny_llama
from gguf_fixtures import write_tiny_gguf
from llama_helpers import assert_plain_or_near_tie, need_llama_cpp

from draftscope.draft_tree import DraftSource, DraftTree, chain_tree
from draftscope.drafters import (
    ContextDrafter,
    Drafter,
    RetrievalDrafter,
)
from draftscope.engine.engine import Engine, GenerationRequest
from draftscope.engine.sampling import SamplingParams
from draftscope.retrieval import Writer

need_llama_cpp()
from draftscope.engine.backends.llama.llama_batching import MAX_LEAVES
from draftscope.engine.backends.llama.llamacpp import LlamaCppBackend
from draftscope.engine.backends.work import PREFILL_BATCH

SAMPLINGS = [
    SamplingParams(),
    SamplingParams(temperature=0.8, top_p=0.9, seed=11),
    SamplingParams(temperature=1.0, top_k=20, seed=5),
]
PROMPTS = ["def main():\n    print('hello world')", "The quick brown fox jumps over", "Hello there! How can I help"]
# Prompts that repeat themselves, so the conversation has something to draft from: with the peaked
# model below, sampled answers take up what came before too (context drafts accepted at T > 0).
REPEATING = [
    "def main():\n    print('hello world')\n" * 3,
    "The quick brown fox jumps over the lazy dog. " * 3,
    "import os\nimport sys\n" * 4,
]


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


@pytest.fixture(scope="module")
def peaked(tokenizer, tokenizer_dir, tmp_path_factory):
    """An engine on a peaked model (a large lm_head), for the answers drafts are checked against:
    sampled at T = 0.8 or 1 it still leaves the argmax at about a third of the positions, and its
    answers repeat what came before as real models' do, so drafts from the conversation are
    accepted at T > 0 too (with the model above they are not even proposed)."""
    model = tiny_llama(len(tokenizer), seed=3, sharpen=32.0)
    path = write_tiny_gguf(tmp_path_factory.mktemp("gguf-peaked") / "peaked-F32.gguf", model, tokenizer_dir)
    opened = LlamaCppBackend(path, tokenizer, context=256, threads=1)
    yield Engine(backend=opened)
    opened.close()


def prompt_ids(tokenizer, text):
    return tokenizer(text, add_special_tokens=False)["input_ids"]


def a_tree():
    """12 nodes, 5 leaves, depth 4: branches at the root and below."""
    parents = [-1, -1, -1, 0, 0, 1, 3, 3, 4, 6, 6, 7]
    depth = [1, 1, 1, 2, 2, 2, 3, 3, 3, 4, 4, 4]
    tokens = [40 + 7 * i for i in range(12)]
    return DraftTree(
        np.array(tokens, np.int64),
        np.array(parents, np.int32),
        np.array(depth, np.int32),
        np.ones(12, np.float32),
        np.full(12, DraftSource.RETRIEVAL, np.int8),
    )


def test_the_gguf_runs_the_same_model_as_torch(backend, torch_model, tokenizer):
    """The fixture is faithful (same weights, same tokenizer): llama.cpp's logits are torch's."""
    ids = prompt_ids(tokenizer, PROMPTS[0])
    assert backend.tokenize(PROMPTS[0]) == ids
    backend.start(ids[:-1] + [ids[-1]])
    got = backend.verify(ids[-1], DraftTree.empty()).logits
    assert isinstance(got, np.ndarray) and got.dtype == np.float32, "llama.cpp's rows are NumPy's: no torch"
    with torch.no_grad():
        want = torch_model(torch.tensor([ids])).logits[0, -1].numpy()
    assert got.shape == (1, backend.vocab)
    assert np.allclose(got[0], want, atol=2e-3), float(np.abs(got[0] - want).max())


# ---------------------------------------------------------------- the engine on this backend


def answer(engine, ids, drafters=(), n=40, **kw):
    events = list(engine.generate(GenerationRequest(prompt_ids=ids, max_new_tokens=n, drafters=list(drafters), **kw)))
    return events[-1]


@pytest.fixture(scope="module")
def datastore(peaked, tokenizer, tmp_path_factory):
    """The peaked model's own continuations (plain decoding on this backend) among other text."""
    path = tmp_path_factory.mktemp("ds") / "store.idx"
    w = Writer(path, peaked.vocab)
    for text in PROMPTS + REPEATING:
        ids = prompt_ids(tokenizer, text)
        for params in SAMPLINGS:  # seeded answers are fixed by their seed: retrieval can know them too
            w.add_entry(ids + answer(peaked, ids, sampling=params).token_ids[:25])
        w.add_entry(prompt_ids(tokenizer, "import os\nimport sys\n\nclass Thing:\n    pass\n"))
    w.finalize()
    return path


def drafter_mixes(engine, datastore):
    return {
        "retrieval": lambda: [RetrievalDrafter(datastore)],
        "context": lambda: [ContextDrafter()],
        "retrieval+context": lambda: [RetrievalDrafter(datastore), ContextDrafter()],
    }


def drafted_answers(engine, tokenizer, datastore, mix, params):
    """(prompt ids, plain answer, drafted answer) for each repeating prompt."""
    makers = drafter_mixes(engine, datastore)
    for text in REPEATING:
        ids = prompt_ids(tokenizer, text)
        yield ids, answer(engine, ids, sampling=params), answer(engine, ids, makers[mix](), sampling=params, budget=12)


@pytest.mark.parametrize("mix", ["retrieval", "context", "retrieval+context"])
@pytest.mark.parametrize("params", SAMPLINGS, ids=["greedy", "T0.8", "T1"])
def test_answers_are_the_backends_own_plain_decoding(peaked, tokenizer, datastore, mix, params):
    """Token for token, unless batch shape moved a near-tie: then the first divergence must sit
    where plain decoding's two best scores (log p plus the position's noise at T > 0) lay within
    the batch noise measured there. Drafts must have been accepted in every mix: an answer
    decoded plainly would pass for nothing."""
    accepted = {}
    for ids, plain, spec in drafted_answers(peaked, tokenizer, datastore, mix, params):
        assert_plain_or_near_tie(peaked, ids, plain.token_ids, spec.token_ids, params, what=f"{mix}: ")
        for source, n in spec.stats.accepted_by_source.items():
            accepted[source] = accepted.get(source, 0) + n
    assert sum(accepted.values()) > 0, f"{mix}: drafts were never accepted: the check proved nothing"
    if mix == "context":
        assert accepted.get("context", 0) > 0


@pytest.mark.parametrize("mix", ["context", "retrieval+context"])
def test_noise_keyed_by_the_step_instead_of_the_position_is_caught(peaked, tokenizer, datastore, mix):
    """The check above can fail at T > 0: verify rows given the noise of their depth in the tree
    (a plausible slip) make drafted answers differ from plain decoding's far from any near-tie."""
    from draftscope.bench.lossless_stats import noise_keyed_by_step

    params = SAMPLINGS[1]
    caught = 0
    with noise_keyed_by_step():
        for ids, plain, spec in drafted_answers(peaked, tokenizer, datastore, mix, params):
            try:
                assert_plain_or_near_tie(peaked, ids, plain.token_ids, spec.token_ids, params)
            except AssertionError:
                caught += 1
    assert caught > 0, "a verifier with the wrong noise went unnoticed"


def test_a_wrong_verifier_is_caught(peaked, tokenizer, datastore, monkeypatch):
    """The identity check above can fail: a verifier that accepts each tree's first draft does."""
    import draftscope.engine.answer as engine_module

    ids = prompt_ids(tokenizer, REPEATING[1])
    plain = answer(peaked, ids)
    monkeypatch.setattr(
        engine_module, "verify_tree", lambda tree, chosen: ([0], int(chosen[1])) if len(tree) else ([], int(chosen[0]))
    )
    broken = answer(peaked, ids, [RetrievalDrafter(datastore), ContextDrafter()], budget=12)
    with pytest.raises(AssertionError, match="diverged from plain decoding"):
        assert_plain_or_near_tie(peaked, ids, plain.token_ids, broken.token_ids, SamplingParams())


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


class Oracle(Drafter):
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

    assert (
        main(
            [
                "generate",
                "def main():",
                "--model",
                str(gguf_file),
                "--backend",
                "llama.cpp",
                "--max-new-tokens",
                "8",
                "--drafters",
                "context",
            ]
        )
        == 0
    )
    captured = capsys.readouterr()
    assert captured.out.strip() and "llama.cpp" in captured.err


def test_the_terminal_writes_json_a_schema_accepts_on_llama_cpp(gguf_file, tmp_path, capsys):
    """``--json-schema``: every token held to the schema, on this backend too (a random model, whose
    free text is noise, writes JSON the schema accepts); a schema that cannot be used is said before
    the model loads."""
    import json

    from draftscope.cli import main

    schema = {
        "type": "object",
        "properties": {"colour": {"enum": ["red", "green", "blue"]}, "ok": {"type": "boolean"}},
        "required": ["colour", "ok"],
        "additionalProperties": False,
    }
    (tmp_path / "pick.json").write_text(json.dumps(schema))
    argv = ["generate", "A colour:", "--model", str(gguf_file), "--backend", "llama.cpp", "--max-new-tokens", "40"]
    assert main([*argv, "--json-schema", str(tmp_path / "pick.json"), "--temperature", "0.8", "--seed", "3"]) == 0
    value = json.loads(capsys.readouterr().out)
    assert set(value) == {"colour", "ok"} and value["colour"] in {"red", "green", "blue"}
    (tmp_path / "bad.json").write_text('{"type": "nonsense"}')
    assert main([*argv, "--json-schema", str(tmp_path / "bad.json")]) == 2
    assert "bad.json" in capsys.readouterr().err


def test_asking_llama_cpp_for_a_folder_model_is_refused_in_words(tokenizer_dir, capsys):
    from draftscope.cli import main

    assert main(["generate", "hi", "--model", str(tokenizer_dir), "--backend", "llama.cpp"]) == 2
    assert "not a GGUF file" in capsys.readouterr().err


def test_the_lossless_audit_runs_on_llama_cpp(gguf_file, tmp_path, capsys):
    """Greedy answers against the backend's plain decoding, seeded identity, the sampler's tests
    with llama.cpp's own logits."""
    from draftscope.cli import main

    code = main(
        [
            "bench",
            "lossless",
            "--model",
            str(gguf_file),
            "--backend",
            "llama.cpp",
            "--draft-model",
            "self",
            "--configs",
            "context,model",
            "--temperature",
            "0,1",
            "--prompts",
            "2",
            "--seeds",
            "2",
            "--max-new-tokens",
            "12",
            "--runs",
            "60",
            "--pit-tokens",
            "150",
            "--budget",
            "6",
            "--quiet",
            "--json",
            str(tmp_path / "r.json"),
        ]
    )
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
        final = list(
            engine.generate(GenerationRequest(prompt_ids=short, max_new_tokens=100, drafters=[ContextDrafter()]))
        )[-1]
        assert final.error is None and len(short) + len(final.token_ids) <= 32
    finally:
        small.close()


def test_the_server_answers_on_llama_cpp(engine, tokenizer, tmp_path):
    """The OpenAI-compatible server over this backend through the official client: greedy text
    equals the engine's own plain decoding, streamed and not, with the drafts in the extension."""
    import openai
    from runtime_helpers import runtime_for

    from draftscope.server import ServerConfig, ServerThread, create_app

    app = create_app(runtime_for(engine, max_new_tokens=24), history=None, config=ServerConfig())
    server = ServerThread(app, port=0).start()
    try:
        client = openai.OpenAI(base_url=server.url, api_key="unused")
        messages = [{"role": "user", "content": PROMPTS[0] + " " + PROMPTS[0]}]
        expected = list(engine.generate(GenerationRequest(messages=messages, max_new_tokens=24)))[-1]
        reply = client.chat.completions.create(model="tiny", messages=messages, temperature=0, max_tokens=24)
        assert reply.choices[0].message.content == expected.text
        chunks = list(
            client.chat.completions.create(model="tiny", messages=messages, temperature=0, max_tokens=24, stream=True)
        )
        assert "".join(c.choices[0].delta.content or "" for c in chunks) == expected.text
        assert chunks[-1].model_extra["draftscope"]["stats"]["tokens"] == len(expected.token_ids)
    finally:
        server.stop()


def test_a_tree_with_more_leaves_than_sequences_is_refused_and_the_backend_goes_on(backend, tokenizer):
    ids = prompt_ids(tokenizer, PROMPTS[0])
    wide = MAX_LEAVES + 1  # that many children of the root: one leaf each
    tree = DraftTree(
        np.arange(40, 40 + wide, dtype=np.int64),
        np.full(wide, -1, np.int32),
        np.ones(wide, np.int32),
        np.ones(wide, np.float32),
        np.full(wide, DraftSource.RETRIEVAL, np.int8),
    )
    backend.start(ids)
    with pytest.raises(ValueError, match=f"{wide} leaves.*at most {MAX_LEAVES}"):
        backend.verify(ids[-1], tree)
    first = DraftTree(
        tree.tokens[:MAX_LEAVES],
        tree.parents[:MAX_LEAVES],
        tree.depth[:MAX_LEAVES],
        tree.support[:MAX_LEAVES],
        tree.source[:MAX_LEAVES],
    )
    fits = backend.verify(ids[-1], first).logits
    backend.start(ids)
    alone = backend.verify(ids[-1], DraftTree.empty()).logits[0]
    assert fits.shape[0] == MAX_LEAVES + 1 and np.allclose(fits[0], alone, atol=1e-3)


@pytest.fixture(scope="module")
def long_context(tokenizer, tokenizer_dir, tmp_path_factory):
    """The model with 2,048 positions, in a llama.cpp context of 1,024: room for prompts that
    take more than one prefill batch."""
    model = tiny_llama(len(tokenizer), seed=3, sharpen=4.0, max_positions=2048)
    path = write_tiny_gguf(tmp_path_factory.mktemp("gguf-long") / "long-F32.gguf", model, tokenizer_dir)
    opened = LlamaCppBackend(path, tokenizer, context=1024, threads=1)
    yield model, opened
    opened.close()


def test_a_prompt_longer_than_one_prefill_batch(long_context, tokenizer):
    """A 600-token prompt is fed in batches of 512: the logits after it are the model's (torch's,
    on the whole prompt at once), and a tree verified after it sees all of it."""
    model, backend = long_context
    text = " ".join(PROMPTS * 40)
    ids = prompt_ids(tokenizer, text)[:600]
    assert len(ids) == 600 > PREFILL_BATCH
    backend.start(ids)
    tree = a_tree()
    rows = torch.from_numpy(backend.verify(ids[-1], tree).logits)
    with torch.no_grad():
        want = torch_logits(model, ids + tree.token_path(6))
    # float32 sums in another order drift with length (measured: 1e-3 after 100 tokens, 3e-3
    # after 500 and 600, 4e-3 after 800, no step at 512); a batch fed at the wrong place moves
    # them by tenths
    assert torch.allclose(rows[0], want[len(ids) - 1], atol=1e-2), float((rows[0] - want[len(ids) - 1]).abs().max())
    path_end = rows[1 + 6]  # node 6's path: nodes 0, 3, 6
    assert torch.allclose(path_end, want[-1], atol=1e-2), float((path_end - want[-1]).abs().max())
    # and answers carry on from there: drafted as plain (up to a near-tie), to their full length
    engine = Engine(backend=backend)
    engine.eos_ids = set()
    plain = answer(engine, ids, n=24)
    drafted = answer(engine, ids, [ContextDrafter()], n=24, budget=8)
    assert len(plain.token_ids) == len(drafted.token_ids) == 24
    assert_plain_or_near_tie(engine, ids, plain.token_ids, drafted.token_ids, SamplingParams())


def torch_logits(model, ids):
    return model(torch.tensor([ids])).logits[0].float()


@pytest.mark.parametrize("length", [2, 12, 200])
def test_hidden_states_from_llama_cpp_are_torch_s(backend, torch_model, tokenizer, length):
    """Issue 43: the final normalised hidden state of the prompt's last position (its chunk's last
    token read apart) and of every row of a branching tree, in the same decode as the logits, equal
    torch's for the same F32 model within the drift that grows with the context (llama.cpp keeps
    keys and values in f16): no more, relative to their size, than the logits' own drift, measured in
    the same step. Asking for them leaves the logits and the cache as without."""
    from draftscope.engine.backends.pytorch.torch_backend import TorchBackend

    def drift(a, b):  # a: llama.cpp's (NumPy), b: torch's
        a = torch.from_numpy(a)
        return float((a - b).abs().max() / b.abs().max())

    torch_backend = TorchBackend(torch_model, tokenizer)
    ids = (prompt_ids(tokenizer, REPEATING[0]) * 40)[:length]
    tree = DraftTree(
        np.array([60, 61, 62, 63], np.int64),
        np.array([-1, -1, 0, 1], np.int32),
        np.array([1, 1, 2, 2], np.int32),
        np.ones(4, np.float32),
        np.full(4, DraftSource.CONTEXT, np.int8),
    )
    got_start, want_start = backend.start(ids, want_hidden=True), torch_backend.start(ids, want_hidden=True)
    assert backend.cached == len(ids) - 1
    got, want = backend.verify(ids[-1], tree, want_hidden=True), torch_backend.verify(ids[-1], tree, want_hidden=True)
    assert got.hidden.shape == want.hidden.shape == (len(tree) + 1, torch_model.config.hidden_size)
    allowed = max(2 * drift(got.logits, want.logits), 1e-3)
    assert drift(got.hidden, want.hidden) <= allowed, (drift(got.hidden, want.hidden), drift(got.logits, want.logits))
    if length > 2:
        assert got_start.shape == want_start.shape == (torch_model.config.hidden_size,)
        assert drift(got_start, want_start) <= allowed, (drift(got_start, want_start), allowed)
    else:
        assert got_start.shape == want_start.shape
    backend.truncate(backend.cached)  # as the loop does with a verify it does not commit
    plain = backend.verify(ids[-1], tree)  # the same cache, no hidden states: the same logits
    assert plain.hidden is None and np.allclose(plain.logits, got.logits, atol=1e-4)
    backend.commit([1, 3])
    assert backend.cached == len(ids) + 2


def test_a_prompt_longer_than_the_context_is_an_error_not_an_abort(backend, tokenizer):
    """A short context takes shorter batches: a 512-token chunk on a 256-token context aborted
    llama.cpp (n_tokens <= n_batch, itself cut to n_ctx); now the chunks fit and the full context
    is an error in words."""
    from draftscope.engine.backends.llama.llama_lib import LlamaCppError

    ids = (prompt_ids(tokenizer, REPEATING[1]) * 200)[:1200]  # past the cells too (the context plus a tree's room)
    with pytest.raises(LlamaCppError, match="is full"):
        backend.start(ids)
    backend.start(prompt_ids(tokenizer, PROMPTS[0]))  # the backend goes on
    assert backend.verify(prompt_ids(tokenizer, PROMPTS[0])[-1], DraftTree.empty()).logits.shape[0] == 1
