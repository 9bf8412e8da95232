"""``draftscope datastore distill``: a datastore of the model's own greedy answers. A tiny random
Llama answers a handful of ShareGPT-style prompts; the answers file, the index, resume after a
cancel or a crash, and the CLI's errors are checked."""

import json
import shutil
from collections import Counter

import pytest
import torch
from engine_fixtures import tiny_llama

from draftscope.cli import main
from draftscope.datastore.answer_generation import encode_prompt, stop_token_ids
from draftscope.datastore.distill import (
    DistillProgress,
    answers_path_for,
    distill,
    prompt_id,
    read_prompts,
)
from draftscope.datastore.manifest import read_manifest
from draftscope.datastore.progress import CancelToken
from draftscope.datastore.sources import DatastoreError
from draftscope.retrieval import BuildCancelled, Reader

NEW_TOKENS = 10


pytestmark = pytest.mark.usefixtures("one_thread")


@pytest.fixture(scope="module")
def model(tokenizer):
    """A tiny random Llama whose end token takes over a token it writes mid-answer to some prompts
    but not all (its logit raised 5%, so no near-ties), so some answers end and others run into
    max_new_tokens."""
    model = tiny_llama(len(tokenizer), seed=3, eos_token_id=tokenizer.eos_token_id)
    written = []
    for question in QUESTIONS:
        ids = encode_prompt(tokenizer, question)
        with torch.inference_mode():
            out = model.generate(torch.tensor([ids]), max_new_tokens=NEW_TOKENS, do_sample=False, pad_token_id=0)
        written.append(set(out[0, len(ids) + 1 :].tolist()))
    in_some = Counter(t for tokens in written for t in tokens)
    token = next(t for t, n in in_some.most_common() if n < len(QUESTIONS))
    with torch.no_grad():
        model.lm_head.weight[tokenizer.eos_token_id] = model.lm_head.weight[token] * 1.05
    return model


def conversation(user: str, answer: str = "Use print('hello world').") -> dict:
    return {"conversations": [{"from": "human", "value": user}, {"from": "gpt", "value": answer}]}


QUESTIONS = [f"Question {i}: how do I print hello world in Python?" + " Please explain." * (i % 3) for i in range(6)]


@pytest.fixture
def prompts_file(tmp_path):
    records = [conversation(q) for q in QUESTIONS]
    path = tmp_path / "prompts.json"
    path.write_text(json.dumps(records), encoding="utf-8")
    return path


def answer_lines(out) -> list[dict]:
    return [json.loads(line) for line in answers_path_for(out).read_text(encoding="utf-8").splitlines()]


def hf_greedy(model, tokenizer, prompt: str) -> tuple[str, int]:
    """transformers' own greedy generate on one prompt, cut at the first end token."""
    ids = encode_prompt(tokenizer, prompt)
    stops = stop_token_ids(model, tokenizer)
    with torch.inference_mode():
        out = model.generate(
            torch.tensor([ids]), max_new_tokens=NEW_TOKENS, do_sample=False, eos_token_id=stops, pad_token_id=stops[0]
        )
    new = out[0, len(ids) :].tolist()
    end = next((i for i, t in enumerate(new) if t in stops), None)
    content = new if end is None else new[:end]
    return tokenizer.decode(content, skip_special_tokens=True), len(new) if end is None else end + 1


# ------------------------------------------------------------------------------------ prompts


def test_read_prompts_takes_first_user_turns_once(tmp_path):
    records = [
        {
            "conversations": [
                {"from": "gpt", "value": "Hi!"},
                {"from": "human", "value": "  first question  "},
                {"from": "gpt", "value": "a"},
                {"from": "human", "value": "follow-up"},
                {"from": "gpt", "value": "b"},
            ]
        },
        conversation("first question"),  # a repeat
        conversation("   "),  # empty
        conversation("x" * 5000),  # over-long
        {"messages": [{"role": "user", "content": "second question"}, {"role": "assistant", "content": "c"}]},
        conversation("third question"),
    ]
    path = tmp_path / "p.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in records), encoding="utf-8")
    assert read_prompts(f"chat:{path}") == ["first question", "second question", "third question"]
    assert read_prompts(f"chat:{path}", limit=2) == ["first question", "second question"]


def test_read_prompts_names_the_problem(tmp_path):
    with pytest.raises(DatastoreError, match="missing.json: no such file"):
        read_prompts(f"chat:{tmp_path / 'missing.json'}")
    with pytest.raises(DatastoreError, match="chat:FILE"):
        read_prompts(f"text:{tmp_path}")
    empty = tmp_path / "empty.json"
    empty.write_text(json.dumps([conversation("")]), encoding="utf-8")
    with pytest.raises(DatastoreError, match="no usable prompts"):
        read_prompts(f"chat:{empty}")


# ------------------------------------------------------------------------------------ distill


def test_distill_indexes_one_answer_per_prompt(model, tokenizer, prompts_file, tmp_path):
    out = tmp_path / "own.idx"
    seen: list[DistillProgress] = []
    report = distill(
        model,
        tokenizer,
        read_prompts(f"chat:{prompts_file}"),
        out,
        batch_size=4,
        max_new_tokens=NEW_TOKENS,
        progress=seen.append,
        model_name="tiny",
    )

    lines = answer_lines(out)
    assert sorted(line["id"] for line in lines) == sorted(prompt_id(q) for q in QUESTIONS)
    assert {line["prompt"] for line in lines} == set(QUESTIONS)
    assert all(1 <= line["tokens"] <= NEW_TOKENS and line["model"] == "tiny" for line in lines)
    assert report.answers == report.generated == len(QUESTIONS)
    assert report.tokens == report.generated_tokens == sum(line["tokens"] for line in lines)
    assert report.tokens_per_second > 0

    # The index holds each finished answer as the chat template renders an assistant turn (ChatML
    # here: its end-of-turn included), an answer cut off by max_new_tokens as its bare text.
    assert {line["finished"] for line in lines} == {True, False}, "the fixture has both kinds"
    assert all(line["finished"] for line in lines if line["tokens"] < NEW_TOKENS)
    texts = [line["answer"] + ("<|im_end|>\n" if line["finished"] else "") for line in lines if line["answer"].strip()]
    expected = sorted(tokenizer(t, add_special_tokens=False)["input_ids"] for t in texts)
    reader = Reader(out)
    held = sorted(reader.document(i).tolist() for i in range(reader.document_count))
    assert held == expected
    # A suffix of an answer drafts its continuation.
    doc = max(held, key=len)
    cut = len(doc) - 3
    tree = reader.search(doc[:cut], min_suffix=2)
    assert doc[cut] in tree.tokens[tree.parents == -1].tolist()

    manifest = read_manifest(out)
    assert manifest["distill"]["answers"] == len(QUESTIONS) and manifest["distill"]["model"] == "tiny"
    assert manifest["sources"][0]["spec"] == f"answers:{answers_path_for(out)}"
    assert manifest["chat_template"]["mode"] == "assistant"
    assert not [p.name for p in tmp_path.iterdir() if p.name.startswith(".")], "the temporary conversations are gone"

    phases = [p.phase for p in seen]
    assert phases[0] == "generating" and phases[-2:] == ["indexing", "done"]
    generating = [p for p in seen if p.phase == "generating"]
    assert [p.answers for p in generating] == [0, 4, 6] and generating[-1].total == 6
    assert generating[1].eta_seconds is not None and generating[-1].eta_seconds == 0


def test_answers_are_transformers_greedy_answers(model, tokenizer, prompts_file, tmp_path):
    """batch_size=1 is exactly one ``generate`` call per prompt, so the answers must equal
    transformers' own greedy answers. Batched (left-padded) answers are compared too: padding
    is masked, so in fp32 they differ only where two logits (nearly) tie; on this fixture none
    do, and a difference here would point at wrong padding (mask or positions)."""
    prompts = read_prompts(f"chat:{prompts_file}")
    distill(model, tokenizer, prompts, tmp_path / "one.idx", batch_size=1, max_new_tokens=NEW_TOKENS)
    distill(model, tokenizer, prompts, tmp_path / "four.idx", batch_size=4, max_new_tokens=NEW_TOKENS)
    reference = {prompt_id(p): hf_greedy(model, tokenizer, p) for p in prompts}
    single = {line["id"]: (line["answer"], line["tokens"]) for line in answer_lines(tmp_path / "one.idx")}
    batched = {line["id"]: (line["answer"], line["tokens"]) for line in answer_lines(tmp_path / "four.idx")}
    assert single == reference
    assert batched == reference


def count_generate_calls(model, monkeypatch) -> list[int]:
    """Rows of each ``model.generate`` call, recorded."""
    calls: list[int] = []
    real = model.generate

    def counting(*args, **kwargs):
        calls.append(int(kwargs["input_ids"].shape[0]))
        return real(*args, **kwargs)

    monkeypatch.setattr(model, "generate", counting)
    return calls


def test_cancel_keeps_the_answers_and_a_second_run_resumes(model, tokenizer, prompts_file, tmp_path, monkeypatch):
    prompts = read_prompts(f"chat:{prompts_file}")
    out = tmp_path / "own.idx"
    cancel = CancelToken()

    def cancel_after_first_batch(p: DistillProgress) -> None:
        if p.phase == "generating" and p.answers >= 2:
            cancel.cancel()

    with pytest.raises(BuildCancelled, match="2 of 6 answers are kept"):
        distill(
            model,
            tokenizer,
            prompts,
            out,
            batch_size=2,
            max_new_tokens=NEW_TOKENS,
            progress=cancel_after_first_batch,
            cancel=cancel,
        )
    assert len(answer_lines(out)) == 2
    assert not out.exists(), "no index after a cancel"

    calls = count_generate_calls(model, monkeypatch)
    report = distill(model, tokenizer, prompts, out, batch_size=2, max_new_tokens=NEW_TOKENS)
    assert calls == [2, 2], "only the four missing prompts are generated"
    ids = [line["id"] for line in answer_lines(out)]
    assert len(ids) == len(set(ids)) == len(prompts)
    assert report.answers == 6 and report.generated == 4
    assert Reader(out).document_count > 0

    calls.clear()
    again = distill(model, tokenizer, prompts, out, batch_size=2, max_new_tokens=NEW_TOKENS)
    assert calls == [] and again.generated == 0 and again.answers == 6, "all answered: only indexing"


def test_a_cancel_during_a_batch_stops_generate_and_drops_the_batch(
    model, tokenizer, prompts_file, tmp_path, monkeypatch
):
    cancel = CancelToken()
    real = model.generate

    new_tokens: list[int] = []

    def cancelled_meanwhile(*args, **kwargs):
        cancel.cancel()  # as if Ctrl-C came while the batch was running
        result = real(*args, **kwargs)
        new_tokens.append(result.shape[1] - kwargs["input_ids"].shape[1])
        return result

    monkeypatch.setattr(model, "generate", cancelled_meanwhile)
    out = tmp_path / "own.idx"
    with pytest.raises(BuildCancelled, match="0 of 6 answers"):
        distill(
            model,
            tokenizer,
            read_prompts(f"chat:{prompts_file}"),
            out,
            batch_size=2,
            max_new_tokens=NEW_TOKENS,
            cancel=cancel,
        )
    assert new_tokens == [1], "generate stopped after its first token"
    assert not answers_path_for(out).exists() or answer_lines(out) == [], "the cut batch is not kept"


def test_a_line_cut_short_by_a_crash_is_skipped(model, tokenizer, prompts_file, tmp_path, monkeypatch):
    prompts = read_prompts(f"chat:{prompts_file}")[:3]
    out = tmp_path / "own.idx"
    whole = {"id": prompt_id(prompts[0]), "prompt": prompts[0], "answer": "An answer from before.", "tokens": 5}
    cut = json.dumps({"id": prompt_id(prompts[1]), "prompt": prompts[1], "answer": "half"})[:30]
    answers_path_for(out).write_text(json.dumps(whole) + "\n" + cut, encoding="utf-8")

    calls = count_generate_calls(model, monkeypatch)
    report = distill(model, tokenizer, prompts, out, batch_size=4, max_new_tokens=NEW_TOKENS)
    assert calls == [2], "the cut line's prompt is answered again, the whole one is not"
    lines = answer_lines(out)  # every line parses: the cut one is gone
    assert lines[0] == whole
    assert sorted(line["id"] for line in lines[1:]) == sorted(prompt_id(p) for p in prompts[1:])
    assert report.answers == 3 and report.generated == 2


def test_answers_of_another_model_are_refused(model, tokenizer, prompts_file, tmp_path):
    out = tmp_path / "own.idx"
    prompt = QUESTIONS[0]
    answers_path_for(out).write_text(
        json.dumps({"id": prompt_id(prompt), "prompt": prompt, "answer": "a", "tokens": 1, "model": "other-model"})
        + "\n",
        encoding="utf-8",
    )
    with pytest.raises(DatastoreError, match="holds answers of other-model, not tiny"):
        distill(model, tokenizer, [prompt], out, max_new_tokens=NEW_TOKENS, model_name="tiny")


# ---------------------------------------------------------------------------------------- CLI


def test_cli_missing_prompts_file_is_one_line_and_exit_1(tmp_path, capsys):
    missing = tmp_path / "missing-prompts.json"
    code = main(
        [
            "datastore",
            "distill",
            "--model",
            str(tmp_path / "no-model"),
            "--out",
            str(tmp_path / "x.idx"),
            "--prompts",
            f"chat:{missing}",
        ]
    )
    err = capsys.readouterr().err
    assert code == 1
    assert err.count("\n") == 1 and "missing-prompts.json" in err and "Traceback" not in err


def test_cli_distills_with_a_model_folder(tmp_path, tokenizer_dir, model, prompts_file, capsys):
    model_dir = tmp_path / "tiny-model"
    shutil.copytree(tokenizer_dir, model_dir)
    model.save_pretrained(model_dir)
    out = tmp_path / "own.idx"
    code = main(
        [
            "datastore",
            "distill",
            "--model",
            str(model_dir),
            "--out",
            str(out),
            "--prompts",
            f"chat:{prompts_file}",
            "--limit",
            "3",
            "--batch-size",
            "2",
            "--max-new-tokens",
            "4",
            "--device",
            "cpu",
            "--dtype",
            "float32",
            "--json",
        ]
    )
    captured = capsys.readouterr()
    assert code == 0, captured.err
    summary = json.loads(captured.out)
    assert summary["distill"]["answers"] == 3 and summary["distill"]["generated"] == 3
    assert summary["datastore"]["path"] == str(out)
    assert len(answer_lines(out)) == 3 and Reader(out).document_count > 0


# ------------------------------------------------------------------------------------- wizard


def test_wizard_builds_from_the_models_own_answers(qtbot, model, tokenizer, prompts_file, tmp_path):
    pytest.importorskip("PySide6")
    from PySide6.QtWidgets import QCheckBox, QLabel, QLineEdit, QSpinBox, QWizard

    from draftscope.gui.wizard.wizard import DatastoreWizard

    without = DatastoreWizard(
        "tiny-test-model", tokenizer_loader=lambda spec: tokenizer, out_dir=tmp_path, model_loader=None
    )
    qtbot.addWidget(without)
    assert not without.can_distill(), "no model and no way to load one, no own answers"

    seen: list[DistillProgress] = []

    def distiller(*args, progress, **kwargs):
        return distill(
            *args, progress=lambda p: (seen.append(p), progress(p)), batch_size=2, max_new_tokens=NEW_TOKENS, **kwargs
        )

    wizard = DatastoreWizard(
        "tiny-test-model",
        tokenizer_loader=lambda spec: tokenizer,
        out_dir=tmp_path,
        model=model,
        distiller=distiller,
        distill_prompts=f"chat:{prompts_file}",
    )
    qtbot.addWidget(wizard)
    wizard.show()
    nxt = wizard.button(QWizard.WizardButton.NextButton)
    assert not nxt.isEnabled(), "no sources yet"
    wizard.findChild(QCheckBox, "distillCheck").setChecked(True)
    assert wizard.findChild(QSpinBox, "distillPromptsSpin").value() == 200
    wizard.findChild(QSpinBox, "distillPromptsSpin").setValue(4)
    assert nxt.isEnabled()
    nxt.click()
    assert wizard.findChild(QLineEdit, "outputName").text() == "tiny-test-model-own-answers"
    assert not wizard.findChild(QCheckBox, "dedupeCheck").isEnabled()
    wizard.button(QWizard.WizardButton.NextButton).click()  # "Build"
    qtbot.waitUntil(lambda: wizard.currentPage().objectName() == "summaryPage", timeout=30_000)

    out = tmp_path / "tiny-test-model-own-answers.idx"
    assert wizard.result_path() == out and wizard.distill_report().answers == 4
    assert len(answer_lines(out)) == 4 and Reader(out).document_count == wizard.build_report().documents
    assert any(p.phase == "generating" and p.answers == 2 for p in seen)
    assert "4 answers of the model" in wizard.findChild(QLabel, "summaryNote").text()


def test_the_wizard_of_a_llama_cpp_window_loads_the_model_with_torch_for_its_style(
    qtbot, monkeypatch, tokenizer_dir, model, prompts_file, tmp_path
):
    """The window on llama.cpp has no torch model to hand over: "Learn the model's own style" is
    offered all the same, says what it costs, and the build loads the model with torch."""
    pytest.importorskip("PySide6")
    from PySide6.QtWidgets import QCheckBox, QLabel, QSpinBox, QWizard

    from draftscope.gui.wizard.wizard import DatastoreWizard

    model_dir = tmp_path / "tiny-model"
    shutil.copytree(tokenizer_dir, model_dir)
    model.save_pretrained(model_dir)

    def distiller(*args, **kwargs):
        return distill(*args, batch_size=2, max_new_tokens=NEW_TOKENS, **kwargs)

    from draftscope.gui.wizard.build_jobs import load_torch_model

    loaded = []

    def loader(spec):  # the wizard's own torch loader, watched: the UI shows only the latest status line
        loaded.append(spec)
        return load_torch_model(spec)

    wizard = DatastoreWizard(
        str(model_dir),
        out_dir=tmp_path,
        distiller=distiller,
        model_loader=loader,
        distill_prompts=f"chat:{prompts_file}",
    )  # no model=: the window's runs on llama.cpp
    qtbot.addWidget(wizard)
    wizard.show()
    check = wizard.findChild(QCheckBox, "distillCheck")
    assert check.isVisible() and check.text().startswith("Learn the model's own style")
    assert "loads it a second time, with torch" in wizard.findChild(QLabel, "distillNote").text()
    check.setChecked(True)
    wizard.findChild(QSpinBox, "distillPromptsSpin").setValue(3)
    wizard.button(QWizard.WizardButton.NextButton).click()
    phases: list[str] = []
    show_phase = wizard.build_page.show_phase
    monkeypatch.setattr(wizard.build_page, "show_phase", lambda text: (phases.append(text), show_phase(text)))
    wizard.button(QWizard.WizardButton.NextButton).click()  # "Build"
    qtbot.waitUntil(lambda: wizard.currentPage().objectName() == "summaryPage", timeout=60_000)
    assert loaded == [str(model_dir)], "the model is loaded with torch for the answers, once"
    assert any("with torch to write its answers" in p or "answering 3 prompts" in p for p in phases), phases
    assert wizard.distill_report().answers == 3 and wizard.result_path().is_file()
