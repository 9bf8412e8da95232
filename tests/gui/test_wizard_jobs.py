"""The datastore wizard's jobs without Qt: the tokenizer loaded once for every build, a cancel that
writes nothing, the model answering only the prompts asked for, and a build error traced to the
source it is about."""

import json
import subprocess
import sys

import pytest

from draftscope.datastore.pipeline import BuildOptions, build_datastore
from draftscope.datastore.preview import parse_source
from draftscope.datastore.progress import CancelToken
from draftscope.gui.wizard.build_jobs import ModelOnce, TokenizerOnce, build_job, distill_job, source_at_fault
from draftscope.retrieval import BuildCancelled, Reader, Writer


def sharegpt(n: int, start: int = 0) -> list[dict]:
    return [
        {
            "id": str(i),
            "conversations": [
                {"from": "human", "value": f"Question {i}: how do I print hello world in Python?"},
                {
                    "from": "gpt",
                    "value": f"Answer {i}: use print('hello world'). The quick brown fox jumps over the lazy dog.",
                },
            ],
        }
        for i in range(start, start + n)
    ]


@pytest.fixture
def chat_file(tmp_path):
    path = tmp_path / "chats.json"
    path.write_text(json.dumps(sharegpt(6)), encoding="utf-8")
    return path


def counting_loader(tokenizer, calls: list):
    def load(spec):
        calls.append(spec)
        return tokenizer

    return load


def run(job, cancel: CancelToken | None = None, statuses: list | None = None):
    statuses = [] if statuses is None else statuses
    return job(lambda progress: None, statuses.append, cancel or CancelToken())


def test_the_tokenizer_is_loaded_once_across_two_builds(tmp_path, tokenizer, chat_file):
    calls, first, second = [], [], []
    tokenizers = TokenizerOnce(counting_loader(tokenizer, calls), "tiny-test-model")
    sources = [parse_source(f"chat:{chat_file}")]
    for name, statuses in (("one.idx", first), ("two.idx", second)):
        report = run(
            build_job(sources, BuildOptions(), tmp_path / name, tokenizers, model_spec="tiny-test-model"),
            statuses=statuses,
        )
        assert Reader(report.path).document_count == 6
    assert calls == ["tiny-test-model"]
    assert any("tokenizer" in s for s in first), "the first build says it is loading the tokenizer"
    assert not any("tokenizer" in s for s in second), "the second build starts reading at once"


def test_a_failed_tokenizer_load_is_tried_again_by_the_next_build(tmp_path, tokenizer, chat_file):
    calls = []

    def flaky(spec):
        calls.append(spec)
        if len(calls) == 1:
            raise OSError("tokenizer.json: no such file")
        return tokenizer

    tokenizers = TokenizerOnce(flaky, "tiny-test-model")
    job = build_job(
        [parse_source(f"chat:{chat_file}")],
        BuildOptions(),
        tmp_path / "x.idx",
        tokenizers,
        model_spec="tiny-test-model",
    )
    with pytest.raises(OSError):
        run(job)
    assert run(job).documents == 6 and len(calls) == 2


def test_a_cancel_before_the_build_raises_and_writes_nothing(tmp_path, tokenizer, chat_file):
    out = tmp_path / "store" / "mine.idx"
    out.parent.mkdir()
    with Writer(out, 100) as w:  # an older datastore of the same name
        w.add_entries([[1, 2, 3, 4], [5, 6, 7]])
    old = out.read_bytes()
    built = []

    def builder(*args, **kwargs):
        built.append(args)
        return build_datastore(*args, **kwargs)

    cancel = CancelToken()
    cancel.cancel()
    job = build_job(
        [parse_source(f"chat:{chat_file}")],
        BuildOptions(),
        out,
        TokenizerOnce(lambda spec: tokenizer, "tiny-test-model"),
        model_spec="tiny-test-model",
        builder=builder,
    )
    with pytest.raises(BuildCancelled):
        run(job, cancel)
    assert built == [] and out.read_bytes() == old
    assert {p.name for p in out.parent.iterdir()} == {"mine.idx"}


def test_the_model_answers_only_the_prompts_asked_for(tmp_path, tokenizer):
    prompts = tmp_path / "prompts.json"
    prompts.write_text(json.dumps(sharegpt(5)), encoding="utf-8")
    asked = []

    def distiller(model, tok, prompt_list, out, *, progress, cancel, model_name):
        asked.append((model, list(prompt_list), out, model_name))
        return "report"

    out = tmp_path / "own.idx"
    statuses = []
    job = distill_job(
        ModelOnce("the model"),
        out,
        TokenizerOnce(lambda spec: tokenizer, "tiny-test-model"),
        model_spec="tiny-test-model",
        count=3,
        prompts_spec=f"chat:{prompts}",
        distiller=distiller,
    )
    assert run(job, statuses=statuses) == "report"
    [(model, prompt_list, to, name)] = asked
    assert model == "the model" and to == out and name == "tiny-test-model"
    assert [p.split(":")[0] for p in prompt_list] == ["Question 0", "Question 1", "Question 2"]
    assert statuses[-1] == "tiny-test-model is answering 3 prompts …"


def test_a_cancel_while_the_prompts_are_read_stops_before_any_answer(tmp_path, tokenizer):
    prompts = tmp_path / "prompts.json"
    prompts.write_text(json.dumps(sharegpt(5)), encoding="utf-8")
    cancel, asked = CancelToken(), []

    def status(text):
        if text.startswith("Reading the prompts"):
            cancel.cancel()  # the user cancels while the prompts are being read

    job = distill_job(
        ModelOnce("the model"),
        tmp_path / "own.idx",
        TokenizerOnce(lambda spec: tokenizer, "tiny-test-model"),
        model_spec="tiny-test-model",
        count=3,
        prompts_spec=f"chat:{prompts}",
        distiller=lambda *a, **kw: asked.append(a),
    )
    with pytest.raises(BuildCancelled):
        job(lambda progress: None, status, cancel)
    assert asked == [] and not (tmp_path / "own.idx").exists()


def test_a_build_error_is_traced_to_its_source(tmp_path, tokenizer, chat_file):
    other = tmp_path / "other.json"
    other.write_text(json.dumps(sharegpt(3)), encoding="utf-8")
    sources = [parse_source(f"chat:{chat_file}"), parse_source(f"chat:{other}")]
    other.unlink()  # gone between the check and the build
    job = build_job(
        sources, BuildOptions(), tmp_path / "x.idx", TokenizerOnce(lambda spec: tokenizer, "m"), model_spec="m"
    )
    with pytest.raises(Exception) as failed:
        run(job)
    source, text = source_at_fault(failed.value, sources)
    assert source.path == other
    assert text == "The build stopped: other.json: no such file or folder"
    assert source_at_fault(OSError("disk full"), sources) is None


def test_the_jobs_need_no_qt():
    code = (
        "import sys, draftscope.gui.wizard.build_jobs; sys.exit(any(m.split('.')[0] == 'PySide6' for m in sys.modules))"
    )
    assert subprocess.run([sys.executable, "-c", code]).returncode == 0
