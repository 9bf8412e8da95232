"""The recurrent drafter (ReDrafter) on the llama.cpp backend, on a tiny F32 GGUF written at test
time from the very model torch runs: a head trained through llama.cpp (its hidden states read by
llama.cpp, its embedding and output rows from the GGUF, no torch copy) trains as one trained on
torch does and loads on both backends; its beams keep greedy and seeded answers plain decoding's,
alone and with answers sharing forwards, and a verifier with the wrong noise is caught; the app,
the terminal and the server take the head for a GGUF model."""

from __future__ import annotations

import threading

import pytest
import torch
from engine_fixtures import tiny_llama
from gguf_fixtures import write_tiny_gguf
from llama_helpers import assert_plain_or_near_tie, need_llama_cpp

from draftscope.cli import main
from draftscope.drafters import ContextDrafter
from draftscope.drafters.recurrent.files import HeadError, read_meta, target_identity
from draftscope.drafters.recurrent.head_drafter import RecurrentSetup
from draftscope.drafters.recurrent.target import GgufTarget, TorchTarget
from draftscope.drafters.recurrent.train import TrainOptions, train_head
from draftscope.engine.engine import Engine, GenerationRequest
from draftscope.engine.sampling import SamplingParams

need_llama_cpp()
from draftscope.engine.backends.llama.llamacpp import LlamaCppBackend

SAMPLINGS = [
    SamplingParams(),
    SamplingParams(temperature=0.8, top_p=0.9, seed=11),
    SamplingParams(temperature=1.0, top_k=20, seed=5),
]
PROMPTS = ["def main():\n    print('hello", "The quick brown fox", "Hello there! How can", "import os\nimport"]


pytestmark = pytest.mark.usefixtures("one_thread")


@pytest.fixture(scope="module")
def gguf_file(model, tokenizer_dir, tmp_path_factory):
    return write_tiny_gguf(tmp_path_factory.mktemp("gguf") / "tiny-F32.gguf", model, tokenizer_dir)


@pytest.fixture(scope="module")
def engine(gguf_file, tokenizer):
    backend = LlamaCppBackend(gguf_file, tokenizer, context=512, threads=1)
    yield Engine(backend=backend)
    backend.close()


def prompt_ids(tokenizer, text):
    return tokenizer(text, add_special_tokens=False)["input_ids"]


@pytest.fixture(scope="module")
def own_text(engine, tokenizer, tmp_path_factory):
    """The model's own greedy answers (on llama.cpp) to short prompts: what the head learns."""
    gen = torch.Generator().manual_seed(1)
    docs = []
    for _ in range(24):
        prompt = torch.randint(3, len(tokenizer), (3,), generator=gen).tolist()
        final = list(engine.generate(GenerationRequest(prompt_ids=prompt, max_new_tokens=40)))[-1]
        docs.append(tokenizer.decode(prompt + final.token_ids).replace("\0", ""))
    path = tmp_path_factory.mktemp("recurrent-data") / "own.txt"
    path.write_text("\n\n".join(docs))
    return path


def options(data, **kw) -> TrainOptions:
    base = dict(
        data=[f"text:{data}"],
        tokens=60 * 128,
        seq_len=32,
        batch=4,
        length=3,
        draft_vocab=64,
        layers=1,
        lr=1e-2,
        val_sequences=4,
        checkpoint_every=5,
    )
    return TrainOptions(**{**base, **kw})


@pytest.fixture(scope="module")
def heads(engine, model, tokenizer, own_text, tmp_path_factory):
    """The same training run twice: through llama.cpp (the GGUF) and on the torch model."""
    folder = tmp_path_factory.mktemp("heads")
    on_llama = train_head(
        GgufTarget(engine.backend, engine.stepper), tokenizer, options(own_text), folder / "llama", model_name="tiny"
    )
    on_torch = train_head(model, tokenizer, options(own_text), folder / "torch", model_name="tiny")
    return on_llama, on_torch


def test_the_gguf_target_is_the_torch_model(engine, model, tokenizer):
    """Sizes, identity, embedding and output rows read from the GGUF, and hidden states and greedy
    next tokens read through llama.cpp, are the torch model's (within fp32 drift)."""
    gguf, torch_view = GgufTarget(engine.backend, engine.stepper), TorchTarget(model)
    assert target_identity(gguf, "tiny") == target_identity(torch_view, "tiny")
    ids = torch.tensor([[5, 9, 40, 2, 77, 5, 9, 40], [3, 3, 3, 12, 100, 7, 1, 0]])
    assert torch.equal(gguf.embed(ids), torch_view.embed(ids))
    assert torch.equal(gguf.output_rows(torch.tensor([0, 7, 99])), torch_view.output_rows(torch.tensor([0, 7, 99])))
    hidden, greedy = gguf.outputs(ids, greedy=True)
    want_hidden, want_greedy = torch_view.outputs(ids, greedy=True)
    assert hidden.shape == want_hidden.shape
    assert torch.allclose(hidden, want_hidden, atol=2e-3, rtol=1e-3), (hidden - want_hidden).abs().max()
    assert (greedy == want_greedy).float().mean() > 0.9  # the greedy choice moves only at near-ties
    assert engine.backend.cached == 0 and engine.stepper.busy == 0, "reading leaves no answer behind"


def test_a_head_trained_through_llama_cpp_matches_one_trained_on_torch(heads, engine, model, tokenizer, own_text):
    """Training from the GGUF runs end to end and reaches the validation acceptance of the same run
    on torch within 5%; each head loads on both backends (one model, one identity)."""
    on_llama, on_torch = heads
    a, b = on_llama.validation["tau_chain"], on_torch.validation["tau_chain"]
    print(f"\nvalidation τ: llama.cpp-trained {a}, torch-trained {b}")
    assert a > 1.2, f"the head learnt little (validation τ {a})"
    assert abs(a - b) <= 0.05 * b, f"llama.cpp-trained τ {a} vs torch-trained {b}"
    assert read_meta(on_llama.out)["training"]["backend"] == "llama.cpp"
    torch_engine = Engine(model, tokenizer, name="tiny")
    for report in heads:
        for eng in (engine, torch_engine):
            setup = RecurrentSetup.for_engine(report.out, eng)
            assert setup.head.cfg.hidden == engine.backend.hidden_size


@pytest.fixture(scope="module")
def recurrent(heads, engine):
    setup = RecurrentSetup.for_engine(heads[0].out, engine)
    setup.width, setup.length = 3, 3
    return setup


def drafted(engine, ids, params, drafters, **kw):
    return list(
        engine.generate(
            GenerationRequest(prompt_ids=ids, max_new_tokens=40, sampling=params, drafters=drafters, budget=12, **kw)
        )
    )[-1]


@pytest.mark.parametrize("params", SAMPLINGS, ids=["greedy", "T0.8", "T1"])
def test_answers_with_the_heads_beams_are_plain_decodings(engine, tokenizer, recurrent, params):
    """Token for token (or a first divergence at a measured near-tie), alone and beside the
    context drafter; beams were accepted, or the check would prove nothing."""
    accepted = 0
    for text in PROMPTS:
        ids = prompt_ids(tokenizer, text)
        plain = drafted(engine, ids, params, [])
        for drafters in ([recurrent.drafter()], [recurrent.drafter(), ContextDrafter()]):
            spec = drafted(engine, ids, params, drafters)
            assert spec.error is None, spec.error
            assert_plain_or_near_tie(engine, ids, plain.token_ids, spec.token_ids, params)
            accepted += spec.stats.accepted_by_source.get("recurrent", 0)
    print(f"\nbeam tokens accepted: {accepted}")
    assert accepted > 0, "the head's beams were never accepted"


def test_noise_keyed_by_the_step_is_caught_with_the_heads_beams(engine, tokenizer, recurrent):
    """The check above can fail: verify rows given the noise of their tree depth make answers with
    beams differ from plain decoding far from any near-tie."""
    from draftscope.bench.lossless_stats import noise_keyed_by_step

    params, caught = SAMPLINGS[1], 0
    with noise_keyed_by_step():
        for text in PROMPTS:
            ids = prompt_ids(tokenizer, text)
            plain, spec = drafted(engine, ids, params, []), drafted(engine, ids, params, [recurrent.drafter()])
            try:
                assert_plain_or_near_tie(engine, ids, plain.token_ids, spec.token_ids, params)
            except AssertionError:
                caught += 1
    print(f"\ncaught {caught} of {len(PROMPTS)}")
    assert caught > 0, "a verifier with the wrong noise went unnoticed"


def test_answers_sharing_forwards_read_their_own_hidden_states(gguf_file, tokenizer, heads):
    """Two answers at once in shared forwards (the server's --parallel), both with beams: each is
    its plain decoding, so each beam search started from its own answer's hidden state."""
    backend = LlamaCppBackend(gguf_file, tokenizer, context=512, threads=1, slots=2)
    try:
        eng = Engine(backend=backend)
        setup = RecurrentSetup.for_engine(heads[0].out, eng)
        prompts = [prompt_ids(tokenizer, t) for t in PROMPTS[:2]]
        plain = [drafted(eng, ids, SamplingParams(), []).token_ids for ids in prompts]
        got = [None, None]

        def run(k):
            got[k] = drafted(eng, prompts[k], SamplingParams(), [setup.drafter()])

        threads = [threading.Thread(target=run, args=(k,)) for k in range(2)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(120)
        for k in range(2):
            assert got[k].error is None, got[k].error
            assert_plain_or_near_tie(eng, prompts[k], plain[k], got[k].token_ids, SamplingParams())
        assert sum(g.stats.accepted_by_source.get("recurrent", 0) for g in got) > 0
    finally:
        backend.close()


def test_the_app_and_the_terminal_take_the_head_for_a_gguf(gguf_file, heads, capsys):
    from draftscope.core.runtime import load_runtime
    from draftscope.storage import Settings

    settings = Settings(model=str(gguf_file), backend="llama.cpp", max_new_tokens=8)
    runtime = load_runtime(settings, head=heads[0].out, strict=True)
    try:
        assert runtime.engine.backend.kind == "llama.cpp" and runtime.recurrent is not None
        assert "recurrent" in runtime.drafter_setup.names
        assert not [n for n in runtime.notices if "ecurrent" in n], runtime.notices
    finally:
        runtime.engine.backend.close()
    assert (
        main(
            [
                "generate",
                "def main",
                "--model",
                str(gguf_file),
                "--backend",
                "llama.cpp",
                "--head",
                str(heads[0].out),
                "--max-new-tokens",
                "8",
            ]
        )
        == 0
    )
    capsys.readouterr()


def test_a_head_for_another_model_is_refused_on_llama_cpp(engine, tokenizer, own_text, tmp_path):
    other = tiny_llama(len(tokenizer), seed=6, sharpen=8.0)
    report = train_head(other, tokenizer, options(own_text, tokens=8 * 128), tmp_path / "other", model_name="other")
    with pytest.raises(HeadError, match="same sizes, different weights"):
        RecurrentSetup.for_engine(report.out, engine)


def test_a_model_shared_with_rpc_workers_refuses_the_head_in_words(gguf_file, tokenizer, heads):
    """With RPC workers the model runs in a child process (engine/backends/llama/isolated.py), which does
    not pass hidden states back: the head is refused saying so, and the way out."""
    from draftscope.engine.backends.llama.isolated import IsolatedLlamaBackend

    backend = IsolatedLlamaBackend(gguf_file, tokenizer, context=256, threads=1)
    try:
        with pytest.raises(
            HeadError,
            match=r"hidden state: the llama\.cpp backend runs a model shared with RPC "
            r"workers .* on this computer alone \(no workers\) it does",
        ):
            RecurrentSetup.for_engine(heads[0].out, Engine(backend=backend))
    finally:
        backend.close()


def test_the_cli_trains_a_head_on_a_gguf_through_llama_cpp(gguf_file, own_text, tmp_path, capsys):
    """`draftscope drafter train --model FILE.gguf` opens it as the app does (llama.cpp on a CPU)
    and trains through it; `--backend torch` trains on the de-quantised copy, for the same model."""
    out = tmp_path / "cli-head"
    args = [
        "drafter",
        "train",
        "--model",
        str(gguf_file),
        "--data",
        f"text:{own_text}",
        "--out",
        str(out),
        "--tokens",
        "512",
        "--seq-len",
        "32",
        "--batch",
        "4",
        "--draft-vocab",
        "64",
    ]
    code = main(args)
    err = capsys.readouterr().err
    assert code == 0, err
    assert "on llama.cpp · F32" in err and "validation τ" in err, err
    meta = read_meta(out)
    assert meta["training"]["backend"] == "llama.cpp" and meta["target"]["architecture"] == "llama"
    assert (
        main(
            [
                "drafter",
                "train",
                "--model",
                str(gguf_file),
                "--backend",
                "torch",
                "--data",
                f"text:{own_text}",
                "--out",
                str(tmp_path / "torch-head"),
                "--tokens",
                "512",
                "--seq-len",
                "32",
                "--batch",
                "4",
                "--draft-vocab",
                "64",
                "--dtype",
                "float32",
            ]
        )
        == 0
    )
    assert read_meta(tmp_path / "torch-head")["target"] == meta["target"], "one model, one identity"
    capsys.readouterr()


def test_training_through_llama_cpp_resumes_after_cancel_to_the_same_head(engine, tokenizer, own_text, tmp_path, heads):
    from draftscope.datastore.progress import CancelToken
    from draftscope.drafters.recurrent.files import load_head
    from draftscope.drafters.recurrent.train import TrainCancelled

    target, parted, cancel = GgufTarget(engine.backend, engine.stepper), tmp_path / "parted", CancelToken()

    def cancel_at_step_5(p):
        if p.phase == "training" and p.step == 5:
            cancel.cancel()

    with pytest.raises(TrainCancelled):
        train_head(
            target, tokenizer, options(own_text), parted, model_name="tiny", progress=cancel_at_step_5, cancel=cancel
        )
    train_head(target, tokenizer, options(own_text), parted, model_name="tiny", resume=True)
    whole, _ = load_head(heads[0].out)
    again, _ = load_head(parted.with_suffix(".safetensors"))
    for (name, x), (_, y) in zip(whole.state_dict().items(), again.state_dict().items()):
        assert torch.equal(x, y), name


def test_the_threads_setting_reaches_llama_cpp_and_torch(gguf_file, tokenizer_dir, model, tokenizer, tmp_path):
    """Settings ▸ Generation ▸ Threads (--threads): llama.cpp computes on that many threads; a torch
    model's torch on that many; 0 is Automatic: every core or one left free, as timed at load
    (torch stays at one thread beside llama.cpp)."""
    from draftscope.core.runtime import load_runtime
    from draftscope.engine.engine import torch_default_threads
    from draftscope.storage import Settings
    from draftscope.sysinfo import usable_cores

    before = torch.get_num_threads()
    try:
        for threads, want in ((1, 1), (0, usable_cores())):
            runtime = load_runtime(Settings(model=str(gguf_file), backend="llama.cpp", threads=threads))
            try:
                choice = runtime.engine.threads_choice
                if threads == 0 and choice is not None:  # timed at load: all cores or one fewer
                    assert choice.threads in (want, want - 1)
                    want = choice.threads
                assert runtime.engine.backend.threads == want and torch.get_num_threads() == 1
                assert f"{want} threads" in runtime.engine.backend.describe()
            finally:
                runtime.engine.backend.close()
        folder = tmp_path / "torch-model"
        import shutil

        shutil.copytree(tokenizer_dir, folder)
        model.save_pretrained(folder)
        for threads, want in ((1, 1), (0, torch_default_threads())):
            load_runtime(Settings(model=str(folder), backend="torch", dtype="float32", threads=threads))
            assert torch.get_num_threads() == want
    finally:
        torch.set_num_threads(before)


def test_a_head_beside_llama_cpp_is_tuned_at_the_one_thread_it_drafts_with(gguf_file, tokenizer, heads, monkeypatch):
    """Where torch is loaded only by the head (no torch before it, on a CPU machine), its layout and beam
    width must be measured at the one thread torch gets beside llama.cpp, not at torch's default."""
    from draftscope.drafters.recurrent import head_drafter

    threads_at_tune = []
    tune = RecurrentSetup.tune
    monkeypatch.setattr(
        RecurrentSetup, "tune", lambda self: (threads_at_tune.append(torch.get_num_threads()), tune(self))
    )
    backend = LlamaCppBackend(gguf_file, tokenizer, context=512, threads=1)
    try:
        eng = Engine(backend=backend)
        eng._torch_threads_set = False  # as where torch was not loaded when the model opened
        torch.set_num_threads(2)
        head_drafter.RecurrentSetup.for_engine(heads[0].out, eng)
    finally:
        backend.close()
    assert threads_at_tune == [1]
