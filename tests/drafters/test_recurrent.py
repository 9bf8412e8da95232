"""The recurrent drafter (ReDrafter): beams merged into one tree, greedy identity with a trained
head, training (save/load, resume after cancel, validation figures), heads refused for another
model or damaged, and the CLI. Sampling exactness is in test_engine_exactness.py."""

import json
import math

import numpy as np
import pytest
import torch
from engine_fixtures import tiny_llama

from draftscope.cli import main
from draftscope.core.drafter_factory import setup_drafters
from draftscope.datastore.progress import CancelToken
from draftscope.draft_tree import DraftSource
from draftscope.drafters.recurrent.beams import beam_search, beams_to_tree
from draftscope.drafters.recurrent.files import HeadError, load_head, read_meta, save_head, target_identity
from draftscope.drafters.recurrent.head import RecurrentHead
from draftscope.drafters.recurrent.head_drafter import RecurrentSetup
from draftscope.drafters.recurrent.train import (
    TrainCancelled,
    TrainError,
    TrainOptions,
    checkpoint_path,
    train_head,
)
from draftscope.drafters.recurrent.train_run import draft_vocabulary
from draftscope.engine.engine import Engine, GenerationRequest
from draftscope.engine.policy import shares

pytestmark = pytest.mark.usefixtures("one_thread")


@pytest.fixture(scope="module")
def own_text(model, tokenizer, tmp_path_factory):
    """A text file of the model's own greedy continuations of short prompts: training on it, the
    head learns exactly what greedy decoding will ask of it."""
    path = tmp_path_factory.mktemp("recurrent-data") / "own.txt"
    docs = []
    gen = torch.Generator().manual_seed(1)
    for _ in range(24):
        prompt = torch.randint(3, len(tokenizer), (1, 3), generator=gen)
        with torch.inference_mode():
            out = model.generate(prompt, max_new_tokens=40, do_sample=False, pad_token_id=0, eos_token_id=None)
        docs.append(tokenizer.decode(out[0].tolist()).replace("\0", ""))  # a NUL would make it a binary file
    path.write_text("\n\n".join(docs))
    return path


def small_options(data, **kw) -> TrainOptions:
    base = dict(
        data=[f"text:{data}"],
        tokens=24 * 32,
        seq_len=32,
        batch=4,
        length=3,
        draft_vocab=64,
        layers=1,
        lr=1e-2,
        val_sequences=4,
        checkpoint_every=2,
    )
    return TrainOptions(**{**base, **kw})


@pytest.fixture(scope="module")
def trained(model, tokenizer, own_text, tmp_path_factory):
    out = tmp_path_factory.mktemp("heads") / "tiny.safetensors"
    figures = []
    report = train_head(
        model, tokenizer, small_options(own_text, tokens=60 * 128), out, model_name="tiny", progress=figures.append
    )
    return report, figures


# ----------------------------------------------------------------------------- beams into a tree


def test_beams_merge_into_one_tree_with_shared_prefixes_once():
    log = math.log
    paths = [[[5], [7], [9]], [[5, 1], [5, 2], [7, 1]], [[5, 1, 4], [5, 2, 4], [5, 1, 8]]]
    scores = [[log(0.6), log(0.3), log(0.05)], [log(0.4), log(0.15), log(0.2)], [log(0.3), log(0.1), log(0.05)]]
    tree = beams_to_tree(paths, scores, budget=16)
    tree.validate()  # BFS order, parents before children, depths consistent
    got = {tuple(tree.token_path(i)): float(tree.support[i]) for i in range(len(tree))}
    assert set(got) == {(5,), (7,), (9,), (5, 1), (5, 2), (7, 1), (5, 1, 4), (5, 2, 4), (5, 1, 8)}
    assert len(tree) == 9, "each shared prefix is one node"
    assert got[(5, 1)] == pytest.approx(0.4) and got[(5, 1, 4)] == pytest.approx(0.3)
    share = {tuple(tree.token_path(i)): float(s) for i, s in enumerate(shares(tree))}
    assert share[(5,)] == pytest.approx(0.6) and share[(5, 1)] == pytest.approx(0.4 / 0.6), "given the parent"
    assert (tree.source == DraftSource.RECURRENT).all()
    small = beams_to_tree(paths, scores, budget=4)
    small.validate()
    assert {tuple(small.token_path(i)) for i in range(len(small))} == {(5,), (7,), (5, 1), (5, 1, 4)}, (
        "the most probable nodes are kept, and they form a tree"
    )


def test_beam_search_scores_are_the_heads_path_log_probabilities(model):
    torch.manual_seed(0)
    head = RecurrentHead.for_target(model, torch.arange(0, 200, 3), layers=1).eval()
    embed = model.get_input_embeddings()
    hidden = torch.randn(model.config.hidden_size)
    paths, scores = beam_search(head, hidden, embed, root=11, width=3, length=3)
    with torch.no_grad():
        first = torch.log_softmax(head.logits(head.first_state(embed(torch.tensor([11]))), hidden[None]), -1)[0]
        top = torch.topk(first, 3)
        assert [p[0] for p in paths[0]] == head.vocab_ids[top.indices].tolist()
        for path, score in zip(paths[2], scores[2]):  # recompute each depth-3 beam step by step
            state, total = None, 0.0
            for prev, tok in zip([11] + path[:-1], path):
                e = embed(torch.tensor([prev]))
                state = head.first_state(e) if state is None else head.next_state(state, e)
                logp = torch.log_softmax(head.logits(state, hidden[None]), -1)[0]
                total += float(logp[head.vocab_ids.tolist().index(tok)])
            assert score == pytest.approx(total, abs=1e-4)
    assert scores[2] == sorted(scores[2], reverse=True)


def test_draft_distribution_is_a_proper_distribution_over_the_whole_vocabulary(model):
    head = RecurrentHead.for_target(model, torch.tensor([2, 9, 40]), layers=1)
    q = head.full_distribution(torch.tensor([0.2, 0.5, 0.3]))
    assert q.shape == (model.config.vocab_size,) and float(q.sum()) == pytest.approx(1.0)
    assert float(q[9]) == pytest.approx(0.5) and float(q[3]) == 0.0


def test_draft_vocabulary_is_the_most_frequent_tokens_with_the_end_token():
    seqs = np.array([[1, 1, 1, 2, 2, 3], [1, 2, 4, 4, 4, 4]])
    assert draft_vocabulary(seqs, 2, 10).tolist() == [1, 4]
    assert draft_vocabulary(seqs, 2, 10, always=(9,)).tolist() == [1, 9]


# ----------------------------------------------------------------------------- training and decoding


def test_training_reports_progress_and_validation_that_improves(trained):
    report, figures = trained
    phases = [p.phase for p in figures]
    assert phases[0] == "reading" and phases[-1] == "done" and "validating" in phases
    rates = [p.tokens_per_second for p in figures if p.phase == "training"]
    assert all(r > 0 for r in rates) and figures[-2].eta_seconds is not None
    first, last = report.curve[0], report.curve[-1]
    assert last["tokens"] > first["tokens"] and len(report.curve) >= 5
    assert last["loss"] < first["loss"], report.curve
    assert last["tau_chain"] > 1.3, f"a head trained on the model's own text predicts it: {report.curve}"


def test_greedy_with_the_trained_head_is_token_identical_and_drafts_get_accepted(trained, model, tokenizer):
    report, _ = trained
    setup = RecurrentSetup.load(report.out, model, model_name="tiny")
    engine = Engine(model, tokenizer)
    gen = torch.Generator().manual_seed(7)
    accepted = 0
    for _ in range(4):
        prompt = torch.randint(3, len(tokenizer), (3,), generator=gen).tolist()
        plain = list(engine.generate(GenerationRequest(prompt_ids=prompt, max_new_tokens=40)))[-1]
        events = list(
            engine.generate(
                GenerationRequest(prompt_ids=prompt, max_new_tokens=40, drafters=[setup.drafter()], budget=16)
            )
        )
        assert events[-1].token_ids == plain.token_ids
        accepted += events[-1].stats.accepted_by_source.get("recurrent", 0)
    assert accepted >= 25, f"only {accepted} recurrent drafts accepted in 160 tokens"


def test_head_round_trips_through_its_files(trained, model):
    report, _ = trained
    head, meta = load_head(report.out, model, model_name="tiny")
    assert meta["config"]["draft_vocab"] == head.cfg.draft_vocab == 64
    assert meta["target"] == target_identity(model, "tiny")
    assert meta["training"]["tokens"] == report.tokens and meta["training"]["curve"] == report.curve
    x = torch.randn(2, head.cfg.state), torch.randn(2, head.cfg.hidden)
    again, _ = load_head(report.out)
    assert torch.equal(head.logits(*x), again.logits(*x))
    assert not checkpoint_path(report.out).exists(), "a finished run leaves no checkpoint"


def test_resume_after_cancel_gives_the_same_head_as_an_uninterrupted_run(model, tokenizer, own_text, tmp_path):
    options = small_options(own_text)
    whole = tmp_path / "whole.safetensors"
    train_head(model, tokenizer, options, whole)

    parted = tmp_path / "parted.safetensors"
    cancel = CancelToken()

    def cancel_at_step_5(p):
        if p.phase == "training" and p.step == 5:
            cancel.cancel()

    with pytest.raises(TrainCancelled) as info:
        train_head(model, tokenizer, options, parted, progress=cancel_at_step_5, cancel=cancel)
    assert info.value.checkpoint.exists() and not parted.exists()
    steps = []
    train_head(model, tokenizer, options, parted, resume=True, progress=lambda p: steps.append(p.step))
    assert min(s for s in steps if s) > 4, "the resumed run starts where the checkpoint was"
    a, _ = load_head(whole)
    b, _ = load_head(parted)
    for (name, x), (_, y) in zip(a.state_dict().items(), b.state_dict().items()):
        assert torch.equal(x, y), name
    assert read_meta(whole)["training"]["curve"] == read_meta(parted)["training"]["curve"]


def test_resume_with_other_options_is_refused(model, tokenizer, own_text, tmp_path):
    out = tmp_path / "h.safetensors"
    cancel = CancelToken()
    with pytest.raises(TrainCancelled):
        train_head(
            model,
            tokenizer,
            small_options(own_text),
            out,
            cancel=cancel,
            progress=lambda p: p.step == 3 and cancel.cancel(),
        )
    with pytest.raises(TrainError, match="other options"):
        train_head(model, tokenizer, small_options(own_text, lr=5e-3), out, resume=True)


def test_bad_training_input_is_named(model, tokenizer, tmp_path):
    with pytest.raises(TrainError, match="no such file"):
        train_head(model, tokenizer, small_options(tmp_path / "missing.txt"), tmp_path / "h")
    (tmp_path / "short.txt").write_text("hi")
    with pytest.raises(TrainError, match="not even one sequence"):
        train_head(model, tokenizer, small_options(tmp_path / "short.txt"), tmp_path / "h")
    with pytest.raises(TrainError, match="seq_len"):
        small_options("x", seq_len=3).validate()


# ----------------------------------------------------------------------------- refusing heads


def test_a_head_for_another_model_is_refused_with_both_named(trained, tokenizer):
    report, _ = trained
    other = tiny_llama(len(tokenizer), seed=99, eos_token_id=tokenizer.eos_token_id)  # same sizes, other weights
    with pytest.raises(HeadError, match="trained for tiny .*same sizes, different weights"):
        load_head(report.out, other, model_name="other")
    bigger = tiny_llama(len(tokenizer), seed=5, hidden=128)
    with pytest.raises(HeadError, match="hidden 64.*not for .*hidden 128"):
        RecurrentSetup.load(report.out, bigger)


def test_damaged_head_files_are_named_not_crashes(trained, model, tmp_path):
    report, _ = trained
    broken = tmp_path / "broken.safetensors"
    broken.write_bytes(b"\x00" * 100)
    broken.with_suffix(".json").write_text(report.out.with_suffix(".json").read_text())
    with pytest.raises(HeadError, match="damaged head weights"):
        load_head(broken, model, model_name="tiny")
    broken.with_suffix(".json").write_text("{not json")
    with pytest.raises(HeadError, match="not a readable head"):
        load_head(broken)
    meta = json.loads(report.out.with_suffix(".json").read_text())
    broken.with_suffix(".json").write_text(json.dumps({**meta, "version": 99}))
    with pytest.raises(HeadError, match="version 99"):
        load_head(broken)
    with pytest.raises(HeadError, match="no such file"):
        load_head(tmp_path / "absent")


def test_save_writes_both_files_atomically(model, tmp_path):
    head = RecurrentHead.for_target(model, torch.arange(10), layers=1)
    out = save_head(head, tmp_path / "x", target=target_identity(model))
    assert out.exists() and out.with_suffix(".json").exists()
    assert not list(tmp_path.glob("*.tmp"))


# ----------------------------------------------------------------------------- wiring


def test_the_factory_builds_the_recurrent_drafter_only_with_a_head(trained, model):
    report, _ = trained
    setup = RecurrentSetup.load(report.out, model, model_name="tiny")
    on = {"retrieval": False, "learned": False, "context": True, "model": False, "recurrent": True}
    assert setup_drafters(on, datastore=None).names == ["context"], "no head: the switch waits for one"
    assert setup_drafters(on, datastore=None, recurrent=setup).names == ["context", "recurrent"]
    assert setup_drafters("auto", datastore=None, recurrent=setup).names == ["context", "recurrent"]
    with pytest.raises(ValueError, match="head trained for this model"):
        setup_drafters("recurrent", datastore=None)


def test_cli_trains_and_describes_a_head(tokenizer_dir, own_text, tmp_path, capsys):
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(str(tokenizer_dir))
    folder = tmp_path / "model"
    tiny_llama(len(tok), seed=5, sharpen=8.0, eos_token_id=tok.eos_token_id).save_pretrained(folder)
    tok.save_pretrained(folder)
    out = tmp_path / "cli-head"
    code = main(
        [
            "drafter",
            "train",
            "--model",
            str(folder),
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
            "--dtype",
            "float32",
        ]
    )
    err = capsys.readouterr().err
    assert code == 0, err
    assert "tokens/s" in err and "validation τ" in err
    assert main(["drafter", "info", str(out) + ".safetensors"]) == 0
    assert "trained on text:" in capsys.readouterr().out
    assert (
        main(
            [
                "drafter",
                "train",
                "--model",
                str(folder),
                "--data",
                "text:/no/such/file",
                "--out",
                str(out),
                "--tokens",
                "64",
                "--seq-len",
                "32",
                "--dtype",
                "float32",
            ]
        )
        == 2
    )
    assert "no such file" in capsys.readouterr().err
    assert (
        main(
            [
                "generate",
                "hi",
                "--model",
                str(folder),
                "--head",
                str(tmp_path / "absent"),
                "--drafters",
                "recurrent",
                "--dtype",
                "float32",
                "--max-new-tokens",
                "4",
            ]
        )
        == 2
    )
    assert "no such file" in capsys.readouterr().err


def test_beams_widen_while_they_are_nearly_free_here(trained, model, monkeypatch):
    report, _ = trained
    setup = RecurrentSetup.load(report.out, model, model_name="tiny")
    costs = {1: 1.0, 2: 1.05, 4: 1.2, 8: 2.0}  # seconds per depth by width, as a CPU might measure
    monkeypatch.setattr(RecurrentSetup, "level_seconds", lambda self, w, repeats=5: costs[w])
    assert setup.tune() == costs and setup.width == 4 and setup.drafter().width == 4
    costs.update({2: 1.5, 4: 1.6})
    setup.tune()
    assert setup.width == 1, "a second beam that costs half as much again is not free"


def test_the_heads_cpu_layout_drafts_the_same_beams(trained, model):
    from draftscope.engine.backends.pytorch.cpu_linear import _set_layout

    report, _ = trained
    setup = RecurrentSetup.load(report.out, model, model_name="tiny")
    hidden = torch.randn(model.config.hidden_size)
    before = beam_search(setup.head, hidden, setup.embed, 7, width=4, length=3)
    assert setup.choose_layout()
    _set_layout([m for m in setup.head.modules() if type(m) is torch.nn.Linear], True)
    after = beam_search(setup.head, hidden, setup.embed, 7, width=4, length=3)
    assert after[0] == before[0] and np.allclose(after[1], before[1], atol=1e-4)


def test_a_beam_that_drafts_an_end_token_stops_there(model):
    from draftscope.drafters.recurrent.beams import end_rows

    torch.manual_seed(0)
    head = RecurrentHead.for_target(model, torch.arange(0, 200, 3), layers=1).eval()
    embed, hidden = model.get_input_embeddings(), torch.randn(model.config.hidden_size)
    paths, _ = beam_search(head, hidden, embed, root=11, width=3, length=3)
    best = paths[0][0][0]
    paths, scores = beam_search(head, hidden, embed, root=11, width=3, length=3, eos_mask=end_rows(head, {best}))
    deeper = [p for level, s in zip(paths[1:], scores[1:]) for p, v in zip(level, s) if v > float("-inf")]
    assert deeper and all(p[0] != best for p in deeper), "nothing is drafted after the end token"
    tree = beams_to_tree(paths, scores, 16)
    assert (best,) in {tuple(tree.token_path(i)) for i in range(len(tree))}
    assert end_rows(head, {1}) is None, "token 1 is not in this head's vocabulary"
