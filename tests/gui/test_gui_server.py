"""The local server beside the window (Settings ▸ Server): on from the settings, its address in
the status bar, served answers in the conversation list with their drafts, answering one at a time
with the window's own answers; switched off from the settings dialog."""

import dataclasses
import os
import socket

import pytest

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
pytest.importorskip("PySide6")

import openai
from engine_fixtures import tiny_llama
from PySide6.QtWidgets import QLabel, QPlainTextEdit

from draftscope.core.runtime import Runtime
from draftscope.engine.engine import Engine
from draftscope.gui.launcher import Launcher
from draftscope.storage import HistoryStore, Settings


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_the_server_runs_beside_the_window_and_its_answers_appear_in_the_history(qtbot, tokenizer, tmp_path):
    engine = Engine(tiny_llama(len(tokenizer), seed=3, sharpen=4.0), tokenizer, name="tiny")
    engine.eos_ids = set()
    port = free_port()
    settings = Settings(
        datastore=str(tmp_path / "none.idx"),
        max_new_tokens=10,
        server_enabled=True,
        server_port=port,
        server_api_key="k",
    )
    launcher = Launcher(
        lambda s, log=None: Runtime(s, engine),
        HistoryStore(tmp_path / "h.sqlite3"),
        settings,
        settings_file=tmp_path / "settings.json",
    )
    with qtbot.waitSignal(launcher.window_ready, timeout=10_000) as ready:
        launcher.start()
    window = ready.args[0]
    qtbot.addWidget(window)
    label = window.findChild(QLabel, "statusServer")  # shown where the bar has room: it is the last in importance
    assert window.status.wanted[label] and label.text() == f"server: 127.0.0.1:{port}/v1"

    client = openai.OpenAI(base_url=f"http://127.0.0.1:{port}/v1", api_key="k", max_retries=0)
    reply = client.chat.completions.create(model="tiny", messages=[{"role": "user", "content": "hello from a script"}])
    assert reply.usage.completion_tokens == 10, "the window's settings give the default max tokens"
    qtbot.waitUntil(lambda: window.conversation_list.count() == 1, timeout=5000)
    assert window.conversation_list.item(0).text() == "API · hello from a script"
    window.show_conversation(window.history.conversations()[0].id)
    answer = window.history.messages(window.conversation_id)[-1]
    assert answer.content == reply.choices[0].message.content and window.history.steps(answer.id)

    # Settings ▸ Server shows each request in a line, and those served while it is open
    launcher.open_settings()
    log = launcher.settings_dialog.findChild(QPlainTextEdit, "serverRequestLog")
    assert "POST /v1/chat/completions 200 · 10 tokens · " in log.toPlainText()
    client.models.list()
    qtbot.waitUntil(lambda: "GET /v1/models 200 · " in log.toPlainText(), timeout=5000)
    launcher.settings_dialog.reject()

    launcher.apply_settings(dataclasses.replace(launcher.settings, server_enabled=False))
    assert not label.isVisible()
    with pytest.raises(openai.APIConnectionError):
        client.models.list()


def test_a_port_in_use_is_said_and_the_window_opens_anyway(qtbot, tokenizer, tmp_path):
    engine = Engine(tiny_llama(len(tokenizer), seed=3), tokenizer, name="tiny")
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        settings = Settings(datastore=str(tmp_path / "none.idx"), server_enabled=True, server_port=port)
        launcher = Launcher(
            lambda s, log=None: Runtime(s, engine),
            HistoryStore(tmp_path / "h.sqlite3"),
            settings,
            settings_file=tmp_path / "settings.json",
        )
        with qtbot.waitSignal(launcher.window_ready, timeout=30_000) as ready:
            launcher.start()
        window = ready.args[0]
        qtbot.addWidget(window)
        assert "The server could not start" in window.statusBar().currentMessage()
        assert not window.findChild(QLabel, "statusServer").isVisible()


def test_the_settings_dialog_server_tab_round_trips(qtbot):
    from PySide6.QtWidgets import QCheckBox, QLineEdit, QSpinBox

    from draftscope.gui.dialogs.settings_dialog import SettingsDialog

    dialog = SettingsDialog(
        Settings(server_enabled=True, server_port=9100, server_api_key="abc", server_keep_history=False)
    )
    qtbot.addWidget(dialog)
    assert dialog.findChild(QCheckBox, "serverEnabled").isChecked()
    assert dialog.findChild(QSpinBox, "serverPortSpin").value() == 9100
    assert dialog.findChild(QLineEdit, "serverKeyEdit").text() == "abc"
    assert not dialog.findChild(QCheckBox, "serverKeepHistory").isChecked()
    dialog.findChild(QCheckBox, "serverEnabled").setChecked(False)
    dialog.findChild(QSpinBox, "serverPortSpin").setValue(9200)
    s = dialog.result_settings()
    assert (s.server_enabled, s.server_port, s.server_api_key, s.server_keep_history) == (False, 9200, "abc", False)


def test_the_window_answers_while_served_answers_step_beside_it_sharing_forwards(
    qtbot, tokenizer, tokenizer_dir, tmp_path
):
    """Settings ▸ Server ▸ Answers at once = 2 on llama.cpp: the model opens with three slots; two
    answers streamed through the real server (the official client) are in progress when the
    window's own answer starts, which runs at once; their steps share forwards, and the status bar
    says how many answers a forward held."""
    import threading
    import time

    from gguf_fixtures import write_tiny_gguf
    from llama_helpers import need_llama_cpp
    from PySide6.QtCore import Qt
    from PySide6.QtWidgets import QPlainTextEdit, QPushButton

    from draftscope.core.runtime import load_runtime

    need_llama_cpp()
    gguf = write_tiny_gguf(tmp_path / "tiny-F32.gguf", tiny_llama(len(tokenizer), seed=3, sharpen=4.0), tokenizer_dir)
    port = free_port()
    settings = Settings(
        model=str(gguf),
        backend="llama.cpp",
        datastore=str(tmp_path / "none.idx"),
        max_new_tokens=8,
        server_enabled=True,
        server_port=port,
        server_parallel=2,
    )
    launcher = Launcher(
        load_runtime, HistoryStore(tmp_path / "h.sqlite3"), settings, settings_file=tmp_path / "settings.json"
    )
    with qtbot.waitSignal(launcher.window_ready, timeout=60_000) as ready:
        launcher.start()
    window = ready.args[0]
    qtbot.addWidget(window)
    engine = window.runtime.engine
    engine.eos_ids = set()  # every answer runs to its length
    assert engine.stepper.size == 3
    decode = engine.backend.decode_many

    def paced(work):  # 10 ms a forward: 120 served steps outlast the window's 8 on a busy machine too
        time.sleep(0.01)
        return decode(work)

    engine.backend.decode_many = paced
    served, stepping = [], threading.Event()

    def served_answer():
        client = openai.OpenAI(base_url=f"http://127.0.0.1:{port}/v1", api_key="unused", max_retries=0)
        stream = client.chat.completions.create(
            model="tiny",
            messages=[{"role": "user", "content": "a served one"}],
            max_tokens=120,
            temperature=0,
            stream=True,
        )
        stats = None
        for chunk in stream:
            stepping.set()
            stats = ((chunk.model_extra or {}).get("draftscope") or {}).get("stats") or stats
        served.append(stats)

    clients = [threading.Thread(target=served_answer) for _ in range(2)]
    for t in clients:
        t.start()
    try:
        qtbot.waitUntil(lambda: engine.stepper.busy == 2 and stepping.is_set(), timeout=20_000)
        window.findChild(QPlainTextEdit, "chatInput").setPlainText("hello")
        with qtbot.waitSignal(window.answer_signals.answer_ended, timeout=30_000) as done:
            qtbot.mouseClick(window.findChild(QPushButton, "sendButton"), Qt.MouseButton.LeftButton)
        final = done.args[0]
        assert final.error is None and final.token_ids
        assert engine.stepper.busy >= 1, "the served answers were still running: the window did not wait for them"
        assert final.stats.answers_per_forward > 1.5, final.stats
    finally:
        for t in clients:
            t.join(60)
    assert len(served) == 2 and all(s and s["answers_per_forward"] > 1.5 for s in served), served
    label = window.findChild(QLabel, "statusServer")
    qtbot.waitUntil(lambda: "answers a forward" in label.text(), timeout=5000)
    window.close()
    launcher.server.stop()


def test_answers_at_once_and_workers_round_trip_through_the_settings_dialog(qtbot):
    from PySide6.QtWidgets import QLineEdit, QSpinBox

    from draftscope.gui.dialogs.settings_dialog import SettingsDialog

    dialog = SettingsDialog(Settings(server_parallel=3, workers="10.0.0.2:50052"))
    qtbot.addWidget(dialog)
    assert dialog.findChild(QSpinBox, "serverParallelSpin").value() == 3
    assert dialog.findChild(QLineEdit, "workersEdit").text() == "10.0.0.2:50052"
    dialog.findChild(QSpinBox, "serverParallelSpin").setValue(4)
    dialog.findChild(QLineEdit, "workersEdit").setText("10.0.0.2:50052, 10.0.0.3:50052")
    s = dialog.result_settings()
    assert (s.server_parallel, s.workers) == (4, "10.0.0.2:50052, 10.0.0.3:50052")
    dialog.findChild(QLineEdit, "workersEdit").setText("10.0.0.2")
    problems = dialog.problems()
    assert any(
        "workers must be host:port" in text and widget is dialog.findChild(QLineEdit, "workersEdit")
        for text, widget in problems
    ), problems
