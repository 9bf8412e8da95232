"""The datastore wizard (offscreen Qt): sources checked as they are added, a build walked through
with the Next button, a clean cancel, and bad sources reported on the sources page."""

import dataclasses
import json
import os
import threading
import time
from pathlib import Path

import pytest

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
pytest.importorskip("PySide6")

from PySide6.QtCore import Qt
from PySide6.QtWidgets import QCheckBox, QLabel, QLineEdit, QProgressBar, QPushButton, QWizard

from draftscope.datastore.default import datastores_dir
from draftscope.datastore.pipeline import build_datastore
from draftscope.datastore.preview import parse_source, preview_source
from draftscope.gui.wizard.wizard import DatastoreWizard
from draftscope.retrieval import Reader, Writer


@pytest.fixture
def dirs(tmp_path, monkeypatch):
    """Fresh data, cache and config folders."""
    out = {name: tmp_path / name for name in ("data", "cache", "config")}
    for name, path in out.items():
        monkeypatch.setenv(f"DRAFTSCOPE_{name.upper()}_DIR", str(path))
    return out


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
    records = sharegpt(6) + [{"id": "bad", "text": "no conversation here"}]
    path = tmp_path / "chats.json"
    path.write_text(json.dumps(records, indent=1), encoding="utf-8")
    return path


@pytest.fixture
def code_dir(tmp_path):
    root = tmp_path / "project"
    (root / "pkg").mkdir(parents=True)
    (root / "main.py").write_text("def main():\n    print('hello world')\n    return 0\n")
    (root / "pkg" / "thing.py").write_text("import os\nimport sys\n\nclass Thing:\n    pass\n")
    (root / "pkg" / "blob.py").write_bytes(b"\x00\x01binary\x00")
    (root / "notes.bin").write_bytes(b"ignored: not a code extension")
    return root


def make_wizard(qtbot, tokenizer, **kw) -> DatastoreWizard:
    kw.setdefault("tokenizer_loader", lambda spec: tokenizer)
    wizard = DatastoreWizard(kw.pop("model_spec", "tiny-test-model"), **kw)
    qtbot.addWidget(wizard)
    wizard.show()
    return wizard


def find(widget, cls, name):
    found = widget.findChild(cls, name)
    assert found is not None, name
    return found


def button(wizard, which) -> QPushButton:
    return wizard.button(which)


def click(qtbot, widget) -> None:
    assert widget.isEnabled() and widget.isVisible()
    qtbot.mouseClick(widget, Qt.MouseButton.LeftButton)


def next_page(qtbot, wizard) -> None:
    click(qtbot, button(wizard, QWizard.WizardButton.NextButton))


def files_in(folder: Path) -> set[str]:
    return {p.name for p in folder.iterdir()}


# --- previews (no Qt) -----------------------------------------------------------------------------


def test_preview_reads_only_the_first_records(tmp_path):
    big = tmp_path / "big.jsonl"
    with big.open("w") as f:
        for rec in sharegpt(20_000):
            f.write(json.dumps(rec) + "\n")
    source = parse_source(f"chat:{big}")
    preview = preview_source(source, items=3)
    assert preview.error is None
    assert "Question 0" in preview.text and "Answer 2" in preview.text and "Question 3:" not in preview.text
    assert source.bytes_done[0] < big.stat().st_size / 10  # stopped early


def test_jsonl_field_in_the_spec(tmp_path):
    path = tmp_path / "docs.jsonl"
    path.write_text(json.dumps({"body": "The quick brown fox."}) + "\n")
    source = parse_source(f"jsonl:{path}#body")
    assert source.path == path and source.options.text_field == "body"
    assert preview_source(source).error is None
    wrong = preview_source(parse_source(f"jsonl:{path}"))  # field "text" is not there
    assert "docs.jsonl" in wrong.error and "missing field" in wrong.error and "body" in wrong.error


# --- the wizard -----------------------------------------------------------------------------------


def test_build_from_chat_logs_and_code(qtbot, dirs, tokenizer, chat_file, code_dir):
    wizard = make_wizard(qtbot, tokenizer, sources=[f"chat:{chat_file}"])
    assert wizard.objectName() == "datastoreWizard"
    assert wizard.currentPage().objectName() == "sourcesPage"
    assert wizard.add_source(f"code:{code_dir}")
    preview = find(wizard, type(wizard.sources_page.preview), "sourcePreview")
    assert "3 matching files" in preview.toPlainText() and "main.py" in preview.toPlainText()
    wizard.sources_page.source_list.setCurrentRow(0)
    assert "Question 0" in preview.toPlainText() and "Answer 0" in preview.toPlainText()
    assert not find(wizard, QLabel, "sourcesError").isVisible()

    built = []
    wizard.datastore_built.connect(lambda path, use_now: built.append((path, use_now)))
    next_page(qtbot, wizard)
    assert wizard.currentPage().objectName() == "optionsPage"
    assert "tiny-test-model" in find(wizard, QLineEdit, "tokenizerName").text()
    assert find(wizard, QCheckBox, "assistantOnlyCheck").isChecked()
    name = find(wizard, QLineEdit, "outputName")
    name.clear()
    qtbot.keyClicks(name, "mine")
    out = datastores_dir() / "mine.idx"
    assert str(out) in find(wizard, QLabel, "outputPath").text()
    find(wizard, QCheckBox, "dedupeCheck").setChecked(True)

    next_page(qtbot, wizard)  # "Build"
    assert wizard.currentPage().objectName() == "buildPage"
    qtbot.waitUntil(lambda: wizard.currentPage().objectName() == "summaryPage", timeout=30_000)

    report = wizard.build_report()
    assert wizard.result_path() == out and report.path == out and out.is_file()
    assert report.documents == 6 + 2 and report.tokens > 0
    assert report.skipped.count == 2  # the record without conversations, the binary .py file
    reader = Reader(out)
    assert reader.document_count == report.documents and reader.token_count == report.tokens
    assert find(wizard, QLabel, "summaryDocuments").text() == f"{report.documents:,}"
    assert find(wizard, QLabel, "summaryTokens").text() == f"{report.tokens:,}"
    assert find(wizard, QLabel, "summarySize").text().endswith(("KB", "bytes"))
    assert find(wizard, QLabel, "summarySkipped").text().startswith("2 records")
    examples = find(wizard, QLabel, "summarySkipExamples").text()
    assert "chats.json record 6: missing field" in examples and "binary file" in examples
    assert files_in(out.parent) == {"mine.idx", "mine.idx.manifest.json"}
    use_now = find(wizard, QCheckBox, "useNowCheck")
    assert use_now.isChecked() and "the models that share its tokenizer (others keep their own)" in use_now.text()
    assert not button(wizard, QWizard.WizardButton.BackButton).isEnabled()  # no second build by accident

    with qtbot.waitSignal(wizard.datastore_built, timeout=2000) as signal:
        click(qtbot, button(wizard, QWizard.WizardButton.FinishButton))
    assert signal.args == [str(out), True]
    assert wizard.use_now() is True and built == [(str(out), True)]


def test_cancel_mid_build_leaves_the_old_index_and_no_temp_files(qtbot, dirs, tokenizer, tmp_path):
    chats = tmp_path / "many.jsonl"
    with chats.open("w") as f:
        for rec in sharegpt(400):
            f.write(json.dumps(rec) + "\n")
    out = datastores_dir() / "big.idx"
    with Writer(out, 100) as w:  # an older datastore of the same name
        w.add_entries([[1, 2, 3, 4], [5, 6, 7]])
    old = out.read_bytes()

    slow = {"on": True, "calls": 0}

    def slow_builder(sources, tokenizer, out, *, options, progress, **kw):
        def report(p):
            progress(p)
            slow["calls"] += 1
            if slow["on"]:
                time.sleep(0.15)

        options = dataclasses.replace(options, batch_chars=300)  # many batches, each reported
        return build_datastore(sources, tokenizer, out, options=options, progress=report, **kw)

    wizard = make_wizard(qtbot, tokenizer, sources=[f"chat:{chats}"], builder=slow_builder)
    next_page(qtbot, wizard)
    name = find(wizard, QLineEdit, "outputName")
    name.clear()
    qtbot.keyClicks(name, "big")
    assert not button(wizard, QWizard.WizardButton.NextButton).isEnabled()  # would replace: needs a yes
    assert "already exists" in find(wizard, QLabel, "outputExists").text()
    find(wizard, QCheckBox, "replaceCheck").setChecked(True)
    next_page(qtbot, wizard)

    bar = find(wizard, QProgressBar, "buildProgress")
    qtbot.waitUntil(lambda: bar.maximum() > 0 and bar.value() > 0, timeout=20_000)
    assert "tokens/s" in find(wizard, QLabel, "buildRate").text()
    assert not button(wizard, QWizard.WizardButton.BackButton).isEnabled()
    click(qtbot, find(wizard, QPushButton, "cancelBuildButton"))
    again = find(wizard, QPushButton, "buildAgainButton")
    qtbot.waitUntil(lambda: again.isVisible(), timeout=10_000)
    assert slow["calls"] < 60  # stopped long before the end
    assert "cancelled" in find(wizard, QLabel, "buildStatus").text()
    assert wizard.result_path() is None and not wizard.is_building()
    assert out.read_bytes() == old
    assert files_in(out.parent) == {"big.idx"}  # no temp files, no manifest
    assert button(wizard, QWizard.WizardButton.BackButton).isEnabled()
    assert not find(wizard, QProgressBar, "buildProgress").isVisible()

    slow["on"] = False  # a second build runs to the end
    click(qtbot, again)
    qtbot.waitUntil(lambda: wizard.currentPage().objectName() == "summaryPage", timeout=60_000)
    assert out.read_bytes() != old and Reader(out).token_count == wizard.build_report().tokens
    assert files_in(out.parent) == {"big.idx", "big.idx.manifest.json"}


def test_the_build_bar_never_goes_back_and_the_time_left_counts_indexing(qtbot, dirs, tokenizer, tmp_path, monkeypatch):
    chats = tmp_path / "chats.jsonl"
    chats.write_text("".join(json.dumps(rec) + "\n" for rec in sharegpt(60)), encoding="utf-8")
    loading, loaded = threading.Event(), threading.Event()

    def slow_loader(spec):  # the tokenizer takes a while to load
        loading.set()
        loaded.wait(10)
        return tokenizer

    def paced_builder(sources, tokenizer, out, *, options, progress, **kw):
        def report(p):
            progress(p)
            time.sleep(0.11)  # past the pipeline's 0.1 s throttle: each batch is reported

        options = dataclasses.replace(options, batch_chars=300)  # many small batches
        return build_datastore(sources, tokenizer, out, options=options, progress=report, **kw)

    wizard = make_wizard(
        qtbot, tokenizer, sources=[f"chat:{chats}"], tokenizer_loader=slow_loader, builder=paced_builder
    )
    page, bar, eta = wizard.build_page, find(wizard, QProgressBar, "buildProgress"), find(wizard, QLabel, "buildEta")
    values, shown = [], []
    bar.valueChanged.connect(lambda v: values.append((v, bar.maximum())))
    show_progress = page.show_progress
    monkeypatch.setattr(page, "show_progress", lambda p: (show_progress(p), shown.append((p, eta.text()))))
    next_page(qtbot, wizard)
    next_page(qtbot, wizard)  # "Build"
    qtbot.waitUntil(loading.is_set, timeout=10_000)
    qtbot.waitUntil(lambda: "tokenizer" in find(wizard, QLabel, "buildPhase").text(), timeout=5000)
    assert bar.maximum() > 0 and bar.value() == 0  # not a busy bar (drawn full) while the tokenizer loads
    loaded.set()
    qtbot.waitUntil(lambda: wizard.currentPage().objectName() == "summaryPage", timeout=60_000)

    assert all(maximum > 0 for _, maximum in values)  # never a busy bar
    numbers = [v for v, _ in values]
    assert numbers == sorted(numbers) and numbers[-1] == bar.maximum()
    assert any(0 < v < bar.maximum() for v in numbers)  # it moves while reading, not only at the end
    reading = [(p, text) for p, text in shown if p.phase == "reading"]
    assert len(reading) >= 3 and [p.phase for p, _ in shown][-2:] == ["indexing", "done"]
    last, text = reading[-1]  # all read: what is left is the indexing, and the time left says so
    assert last.bytes_read == last.bytes_total and last.eta_seconds > 0 and text != "–"
    first_eta = reading[0][0].eta_seconds
    assert first_eta > last.eta_seconds > 0


def test_a_bad_source_is_named_and_blocks_next(qtbot, dirs, tokenizer, tmp_path, chat_file):
    garbage = tmp_path / "garbage.json"
    garbage.write_text("this is {not json at all\n")
    wizard = make_wizard(qtbot, tokenizer, sources=[f"chat:{chat_file}", f"chat:{garbage}"])
    error = find(wizard, QLabel, "sourcesError")
    assert error.isVisible()
    assert "garbage.json" in error.text() and "not valid JSON" in error.text()
    assert "chats.json" not in error.text()
    assert not button(wizard, QWizard.WizardButton.NextButton).isEnabled()

    assert not wizard.add_source(f"text:{tmp_path / 'missing.txt'}")
    assert "missing.txt: no such file or folder" in error.text()
    assert not wizard.add_source(f"code:{tmp_path / 'empty'}")  # does not exist either

    # remove the bad ones: the page is complete again
    page = wizard.sources_page
    while len(page.entries) > 1:
        page.source_list.setCurrentRow(len(page.entries) - 1)
        click(qtbot, find(wizard, QPushButton, "removeSourceButton"))
    assert not error.isVisible()
    assert button(wizard, QWizard.WizardButton.NextButton).isEnabled()


def test_a_source_that_goes_bad_before_the_build_sends_the_user_back(qtbot, dirs, tokenizer, tmp_path, chat_file):
    other = tmp_path / "other.json"
    other.write_text(json.dumps(sharegpt(3)))
    wizard = make_wizard(qtbot, tokenizer, sources=[f"chat:{chat_file}", f"chat:{other}"])
    next_page(qtbot, wizard)
    other.unlink()  # gone between the check and the build
    next_page(qtbot, wizard)
    error = find(wizard, QLabel, "sourcesError")
    qtbot.waitUntil(lambda: wizard.currentPage().objectName() == "sourcesPage", timeout=20_000)
    assert error.isVisible() and "other.json: no such file or folder" in error.text()
    assert not button(wizard, QWizard.WizardButton.NextButton).isEnabled()
    assert files_in(datastores_dir()) == set()

    other.write_text(json.dumps(sharegpt(3, start=10)))  # fixed: check again, build
    click(qtbot, find(wizard, QPushButton, "recheckSourcesButton"))
    assert not error.isVisible()
    next_page(qtbot, wizard)
    next_page(qtbot, wizard)
    qtbot.waitUntil(lambda: wizard.currentPage().objectName() == "summaryPage", timeout=30_000)
    assert wizard.build_report().documents == 6 + 3


def test_a_failing_tokenizer_is_shown_with_retry(qtbot, dirs, tokenizer, chat_file):
    calls = []

    def loader(spec):
        calls.append(spec)
        if len(calls) == 1:
            from draftscope.models.resolve import ModelNotFoundError

            raise ModelNotFoundError("model file not found: /nowhere/model.gguf")
        return tokenizer

    wizard = make_wizard(qtbot, tokenizer, sources=[f"chat:{chat_file}"], tokenizer_loader=loader)
    next_page(qtbot, wizard)
    next_page(qtbot, wizard)
    retry = find(wizard, QPushButton, "buildAgainButton")
    qtbot.waitUntil(retry.isVisible, timeout=10_000)
    assert retry.text() == "Retry"
    assert "/nowhere/model.gguf" in find(wizard, QLabel, "buildError").text()
    click(qtbot, retry)
    qtbot.waitUntil(lambda: wizard.currentPage().objectName() == "summaryPage", timeout=30_000)
    assert calls == ["tiny-test-model", "tiny-test-model"]
    find(wizard, QCheckBox, "useNowCheck").setChecked(False)
    with qtbot.waitSignal(wizard.datastore_built, timeout=2000) as signal:
        click(qtbot, button(wizard, QWizard.WizardButton.FinishButton))
    assert signal.args == [str(wizard.result_path()), False]


def test_closing_mid_build_cancels_it_and_writes_nothing(qtbot, dirs, tokenizer, tmp_path):
    chats = tmp_path / "many.jsonl"
    with chats.open("w") as f:
        for rec in sharegpt(400):
            f.write(json.dumps(rec) + "\n")
    reports = []
    closed = threading.Event()

    def slow_builder(sources, tokenizer, out, *, options, progress, **kw):
        def report(p):
            reports.append(p)
            time.sleep(0.05)
            if len(reports) == 2:  # held here until the wizard is closed: on a fast machine the whole
                closed.wait(10)  # build once took fewer reports than the test waited for, and wrote

        options = dataclasses.replace(options, batch_chars=300)
        return build_datastore(sources, tokenizer, out, options=options, progress=report, **kw)

    wizard = make_wizard(qtbot, tokenizer, sources=[f"chat:{chats}"], builder=slow_builder)
    built = []
    wizard.datastore_built.connect(lambda *args: built.append(args))
    next_page(qtbot, wizard)
    next_page(qtbot, wizard)
    qtbot.waitUntil(lambda: len(reports) >= 2, timeout=20_000)
    click(qtbot, button(wizard, QWizard.WizardButton.CancelButton))  # "Close"
    closed.set()
    assert not wizard.isVisible() and not wizard.is_building()
    seen = len(reports)
    qtbot.wait(300)
    assert len(reports) == seen, "the build stopped with the wizard"
    assert files_in(datastores_dir()) == set() and built == [] and wizard.result_path() is None
