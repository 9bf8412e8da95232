"""A llama.cpp whose kernels fault on this CPU never ends the app (issue 40): the self-test runs in a
child before the first GGUF opens, and where it dies the model opens on torch (or on llama.cpp with
its weights in their plain layout, where only the repacked kernels fault), in the window, the
terminal and the server, each saying why and what fixes it. The dying llama.cpp is a stand-in
self-test child that dies as the AMX kernels did (SIGSEGV in a batched product)."""

from __future__ import annotations

import sys
import textwrap

import pytest
from llama_helpers import need_llama_cpp

need_llama_cpp()

from engine_fixtures import tiny_llama
from gguf_fixtures import write_tiny_gguf

from draftscope import paths
from draftscope.core.runtime import load_runtime
from draftscope.engine.backends.llama import llama_verdict, selftest
from draftscope.storage import Settings

PROMPT = "The quick brown fox"
NONE = {"retrieval": False, "learned": False, "context": False, "model": False, "recurrent": False}


@pytest.fixture(scope="module")
def gguf(tokenizer, tokenizer_dir, tmp_path_factory):
    return write_tiny_gguf(
        tmp_path_factory.mktemp("fallback") / "tiny-F32.gguf", tiny_llama(len(tokenizer), seed=3), tokenizer_dir
    )


def stand_in(tmp_path, monkeypatch, *, plain_runs: bool):
    from llama_helpers import amx_faulting_selftest

    amx_faulting_selftest(tmp_path, monkeypatch, plain_runs=plain_runs)


def settings(gguf, **fields) -> Settings:
    return Settings(**{"model": str(gguf), "drafters": dict(NONE), "datastore": "", "max_new_tokens": 8, **fields})


def test_a_dying_llama_cpp_opens_the_gguf_on_torch_with_a_notice(gguf, tmp_path, monkeypatch):
    stand_in(tmp_path, monkeypatch, plain_runs=False)
    runtime = load_runtime(settings(gguf))
    try:
        assert runtime.engine.backend.kind == "torch"
        [notice] = [n for n in runtime.notices if "llama.cpp" in n]
        assert "SIGSEGV" in notice and "AMX" in notice and "scripts/setup.sh" in notice and "torch" in notice
    finally:
        runtime.close()
    kept = llama_verdict.verdict(check=False)  # kept: the next load does not run the child again
    assert kept is not None and not kept.runs


def test_llama_cpp_asked_for_by_name_is_refused_in_words(gguf, tmp_path, monkeypatch):
    stand_in(tmp_path, monkeypatch, plain_runs=False)
    with pytest.raises(ValueError, match=r"llama.cpp does not run on this CPU: llama.cpp died of SIGSEGV"):
        load_runtime(settings(gguf, backend="llama.cpp"))


def test_where_only_the_repacked_kernels_fault_the_gguf_stays_on_llama_cpp_without_them(
    gguf, tokenizer, tmp_path, monkeypatch
):
    stand_in(tmp_path, monkeypatch, plain_runs=True)
    runtime = load_runtime(settings(gguf))
    try:
        backend = runtime.engine.backend
        assert backend.kind == "llama.cpp" and backend.repacked is False
        assert "without repacked kernels" in backend.describe()
        [notice] = [n for n in runtime.notices if "llama.cpp" in n]
        assert "without its repacked kernels" in notice and "SIGSEGV" in notice and "scripts/setup.sh" in notice
        from draftscope.engine.engine import GenerationRequest

        ids = tokenizer(PROMPT, add_special_tokens=False)["input_ids"]
        final = list(runtime.engine.generate(GenerationRequest(prompt_ids=ids, max_new_tokens=6)))[-1]
        assert final.error is None and len(final.token_ids) == 6
    finally:
        runtime.close()


def test_the_terminal_answers_on_torch_and_says_why(gguf, tmp_path, monkeypatch, capsys):
    from draftscope.cli import main

    stand_in(tmp_path, monkeypatch, plain_runs=False)
    assert main(["generate", PROMPT, "--model", str(gguf), "--drafters", "none", "--max-new-tokens", "6"]) == 0
    captured = capsys.readouterr()
    assert captured.out.strip()
    assert "on torch" in captured.err and "note: GGUF models run on torch" in captured.err
    assert "SIGSEGV" in captured.err and "bash scripts/setup.sh" in captured.err


def test_the_server_answers_on_torch_and_says_why(gguf, tmp_path, monkeypatch, capsys):
    import openai

    from draftscope.cli import build_parser
    from draftscope.commands.model_options import runtime_from_args
    from draftscope.server import ServerConfig, ServerThread, create_app

    stand_in(tmp_path, monkeypatch, plain_runs=False)
    args = build_parser().parse_args(["serve", "--model", str(gguf), "--drafters", "none", "--max-new-tokens", "6"])
    runtime = runtime_from_args(args)
    assert "note: GGUF models run on torch" in capsys.readouterr().err
    server = ServerThread(create_app(runtime, history=None, config=ServerConfig()), port=0).start()
    try:
        client = openai.OpenAI(base_url=server.url, api_key="unused")
        reply = client.completions.create(model="tiny", prompt=PROMPT, temperature=0, max_tokens=6)
        assert reply.choices[0].text
    finally:
        server.stop()
        runtime.close()


def test_the_window_opens_on_torch_and_says_why(qtbot, gguf, tmp_path, monkeypatch):
    pytest.importorskip("PySide6")
    from PySide6.QtWidgets import QLabel

    from draftscope.gui.launcher import Launcher
    from draftscope.storage import HistoryStore

    stand_in(tmp_path, monkeypatch, plain_runs=False)
    launcher = Launcher(load_runtime, HistoryStore(tmp_path / "h.sqlite3"), settings(gguf))
    with qtbot.waitSignal(launcher.window_ready, timeout=120_000) as ready:
        launcher.start()
    window = ready.args[0]
    qtbot.addWidget(window)
    try:
        from PySide6.QtWidgets import QMessageBox

        box = window.findChild(QMessageBox, "backendNotice")  # said in full, not in a passing status message
        assert box is not None and box.isVisible()
        text = box.text()
        assert "GGUF models run on torch" in text and "SIGSEGV" in text and "scripts/setup.sh" in text
        assert "torch" in window.findChild(QLabel, "statusDevice").text()
    finally:
        window.close()
        launcher.server.stop()


# ---------------------------------------------------------------- a verdict about the CPU, never about a moment


def child_that(tmp_path, monkeypatch, body: str):
    """The self-test's child replaced by ``body`` (Python); verdicts kept apart from the suite's."""
    script = tmp_path / "child.py"
    script.write_text(textwrap.dedent(body))
    monkeypatch.setattr(selftest, "CHILD_COMMAND", [sys.executable, str(script)])
    monkeypatch.setattr(paths, "llama_verdict_file", lambda: tmp_path / "verdict.json")


def test_a_check_that_times_out_is_reported_and_asked_again_not_kept(tmp_path, monkeypatch):
    child_that(tmp_path, monkeypatch, 'import time\nprint("stage: prompt", flush=True)\ntime.sleep(30)\n')
    monkeypatch.setattr(llama_verdict, "CHECK_TIMEOUT_S", 2.0)
    found = llama_verdict.verdict()
    assert not found.runs and "did not finish" in found.notice and "checked again" in found.notice
    assert llama_verdict.verdict(check=False) is None, "a timeout on a busy machine was kept for good"


def test_a_one_off_error_is_not_kept_and_the_same_error_twice_is(tmp_path, monkeypatch):
    counter = tmp_path / "runs"
    child_that(
        tmp_path,
        monkeypatch,
        f"""
        from pathlib import Path
        runs = Path({str(counter)!r})
        n = int(runs.read_text()) if runs.exists() else 0
        runs.write_text(str(n + 1))
        print("stage: prompt")
        print("error: no space left on device" if n == 0 else "ok")
        raise SystemExit(1 if n == 0 else 0)
    """,
    )
    first = llama_verdict.verdict()
    assert not first.runs and "no space left" in first.notice
    assert llama_verdict.verdict(check=False) is None, "a one-off failure was kept"
    assert llama_verdict.verdict().runs, "the next start checks again, and it runs"

    counter.unlink()
    child_that(tmp_path, monkeypatch, 'print("stage: prompt")\nprint("error: unusable logits")\nraise SystemExit(1)\n')
    llama_verdict.forget()
    assert not llama_verdict.verdict().runs
    kept = llama_verdict.verdict(check=False)
    assert kept is not None and not kept.runs, "the same failure twice is the CPU's: kept"


def test_the_check_runs_with_the_apps_threads(gguf, tmp_path, monkeypatch):
    """The docs say the self-test runs with the app's threads (Settings ▸ Threads); it ran with every
    core (item 13)."""
    said = tmp_path / "argv"
    child_that(
        tmp_path,
        monkeypatch,
        f"""
        import sys
        open({str(said)!r}, "w").write(" ".join(sys.argv[1:]))
        print("stage: step")
        print("ok")
    """,
    )
    runtime = load_runtime(settings(gguf, threads=1))
    try:
        assert runtime.engine.backend.kind == "llama.cpp"
    finally:
        runtime.close()
    assert said.read_text().split()[-2:] == ["--threads", "1"]


def test_a_cache_folder_that_cannot_be_written_still_gives_a_verdict(tmp_path, monkeypatch):
    stand_in(tmp_path, monkeypatch, plain_runs=True)
    blocked = tmp_path / "blocked"
    blocked.write_text("a file where the folder should be")
    monkeypatch.setattr(paths, "llama_verdict_file", lambda: blocked / "verdict.json")
    found = llama_verdict.verdict()
    assert found.runs and not found.repacked  # as the check found, only not kept


def test_the_kept_answer_only_look_up_never_waits_for_a_check_in_progress(tmp_path, monkeypatch):
    import threading
    import time

    stand_in(tmp_path, monkeypatch, plain_runs=True)
    with llama_verdict._lock:  # a check in progress on another thread holds it
        started = time.monotonic()
        done = []
        looker = threading.Thread(target=lambda: done.append(llama_verdict.verdict(check=False)))
        looker.start()
        looker.join(5)
        assert done == [None] and time.monotonic() - started < 2


def test_set_up_forgets_the_apps_kept_verdict(tmp_path, monkeypatch):
    from draftscope.engine.backends.llama import llama_build

    stand_in(tmp_path, monkeypatch, plain_runs=False)
    llama_verdict.verdict()
    assert llama_verdict.verdict(check=False) is not None
    monkeypatch.setattr(llama_build.LlamaSetup, "ensure", lambda self: True)
    assert llama_build.main([]) == 0
    assert llama_verdict.verdict(check=False) is None, "rerunning set-up (the notice's fix) left the verdict kept"


def test_the_file_check_loads_the_gguf_as_the_kept_verdict_says(gguf, tmp_path, monkeypatch):
    """Under a kept "runs without repacked kernels", the GGUF check's child loaded the file with
    llama.cpp's defaults, which repack: where repacking faults, every GGUF was refused as damaged."""
    from draftscope.engine.backends.llama import gguf_check

    stand_in(tmp_path, monkeypatch, plain_runs=True)
    checker = tmp_path / "check.py"  # loading repacked faults, as the self-test's child did
    checker.write_text(
        'import os, signal, sys\nif "--plain-layout" not in sys.argv:\n'
        '    os.kill(os.getpid(), signal.SIGSEGV)\nprint("ok")\n'
    )
    monkeypatch.setattr(gguf_check, "CHILD_COMMAND", [sys.executable, str(checker)])
    monkeypatch.setattr(paths, "gguf_checked_file", lambda: tmp_path / "checked.json")
    runtime = load_runtime(settings(gguf))
    try:
        backend = runtime.engine.backend
        assert backend.kind == "llama.cpp" and not backend.repacked
    finally:
        runtime.close()
