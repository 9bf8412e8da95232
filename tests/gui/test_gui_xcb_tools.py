"""On a real X server (Xvfb, Qt's xcb platform, the app's theme), the app as it starts, with an MCP
server in its settings (the fixture server, tests/toolbox/mcp_fixture_server.py): the server starts
behind the open window, a call waits as a card and runs once approved, a change of Settings ▸ Tools
starts the servers again (the old process ends), and once the app has quit no server process is left.
Screenshots of the card waiting and of the finished call are saved (``SHOTS`` names the folder)."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from x_server import app_env, xvfb_display

pytest.importorskip("mcp")
psutil = pytest.importorskip("psutil")

FIXTURE = Path(__file__).resolve().parents[1] / "toolbox" / "mcp_fixture_server.py"
TEMPLATE = Path(__file__).resolve().parents[1] / "data" / "qwen2.5_chat_template.jinja"

SCRIPT = r"""
import copy, dataclasses, json, sys, time
from pathlib import Path
import psutil
from PySide6.QtCore import QTimer, QUrl
from PySide6.QtWidgets import QApplication
from transformers import AutoTokenizer
from engine_fixtures import tiny_llama
from runtime_helpers import CONTEXT_ONLY, GREEDY, runtime_for
from draftscope.engine.engine import Engine
from draftscope.gui.launcher import Launcher
from draftscope.gui.theme import apply_theme
from draftscope.storage import HistoryStore, Settings
from draftscope.toolbox.servers import McpServer

folder, template, fixture, work, out = map(Path, sys.argv[1:6])
report = {}
app = QApplication([])
apply_theme(app, "light", Settings().font_size)
tokenizer = AutoTokenizer.from_pretrained(folder)
tokenizer.chat_template = template.read_text()

def factory(settings, log=None):
    model = tiny_llama(len(tokenizer), seed=3, layers=1, hidden=32, sharpen=4.0, max_positions=4096)
    engine = Engine(model, tokenizer, name="tiny")
    engine.eos_ids = set()  # a required call ends with its grammar
    return runtime_for(engine, settings)

def wait(condition, what, seconds=60):
    deadline = time.monotonic() + seconds
    while not condition():
        app.processEvents()
        time.sleep(0.005)
        if time.monotonic() > deadline:
            sys.exit(f"timed out waiting for {what}")

def settle(seconds=0.5):
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        app.processEvents()

def servers():
    me = psutil.Process()
    return sorted(p.pid for p in me.children(recursive=True) if str(fixture) in " ".join(p.cmdline()))

def strict(tool):  # no keys beyond the tool's own: a random model's call of pid is {}
    tool = copy.deepcopy(tool)
    tool["function"]["parameters"]["additionalProperties"] = False
    return tool

others = ("add", "read_note", "big_result", "crash", "hang", "fail", "env_value", "garbage")  # a short prompt
files = McpServer("files", command=sys.executable, args=(str(fixture),), disabled_tools=others).to_dict()
fields = {**GREEDY, "max_new_tokens": 80}
settings = Settings(model="tiny", drafters=dict(CONTEXT_ONLY), read_ahead=False, mcp_servers=[files], **fields)
launcher = Launcher(factory, HistoryStore(work / "h.sqlite3"), settings, settings_file=work / "settings.json")
launcher.start()
wait(lambda: launcher.window is not None and launcher.window.isVisible(), "the window")
host, window = launcher.tool_host, launcher.window
wait(lambda: host.tools, "the MCP server's tools")
report["first"] = servers()
host.tools = [strict(t) for t in host.tools]
window.tool_loop.choice = "pid"
window.resize(1100, 700)
window.chat_input.setPlainText("What is the tool server's process id?")
window.send()
live = window.tool_loop.live_calls
wait(lambda: any(c.state == "asking" for c in live().values()), "a call waiting for approval")
settle(1.0)
window.screen().grabWindow(0).save(str(out / "tool-call-asking-xcb.png"))
call = next(c for c in live().values() if c.state == "asking")
window.chat_view.anchorClicked.emit(QUrl(f"tool:approve/{call.id}"))
wait(lambda: not window.streaming, "the loop's end")
messages = window.history.messages(window.conversation_id)
report["roles"] = [m.role for m in messages]
result = next(m for m in messages if m.role == "tool")
report["result"] = [result.content, result.tool_fields.get("status")]
window.chat_view.anchorClicked.emit(QUrl(f"tool:show/{result.id}"))
settle(1.0)
window.screen().grabWindow(0).save(str(out / "tool-call-done-xcb.png"))

notes = McpServer("notes", command=sys.executable, args=(str(fixture),), disabled_tools=others).to_dict()
launcher.apply_settings(dataclasses.replace(launcher.settings, mcp_servers=[notes]))
wait(lambda: host.route and all(s == "notes" for s, _ in host.route.values()), "the servers started again")
wait(lambda: not set(report["first"]) & set(servers()), "the old server's end")
report["second"] = servers()
print("REPORT " + json.dumps(report), flush=True)
QTimer.singleShot(0, app.quit)  # as the app quits: aboutToQuit closes the servers
app.exec()
"""


def test_the_tool_servers_live_and_die_with_the_app_on_a_real_x_server(tmp_path, tokenizer_dir):
    shots = os.environ.get("SHOTS") or str(tmp_path)
    script = tmp_path / "tools.py"
    script.write_text(SCRIPT)
    tests = str(Path(__file__).resolve().parents[1])
    with xvfb_display("1280x768") as display:
        env = app_env(
            tmp_path,
            QT_QPA_PLATFORM="xcb",
            DISPLAY=display,
            PYTHONPATH=os.pathsep.join([tests, os.environ.get("PYTHONPATH", "")]),
        )
        done = subprocess.run(
            [sys.executable, str(script), str(tokenizer_dir), str(TEMPLATE), str(FIXTURE), str(tmp_path), shots],
            env=env,
            capture_output=True,
            text=True,
            timeout=300,
        )
    assert done.returncode == 0, f"exit {done.returncode}: {done.stderr[-3000:]}"
    report = json.loads(done.stdout.split("REPORT ", 1)[1])
    assert len(report["first"]) == 1 and len(report["second"]) == 1, report
    assert report["roles"] == ["user", "assistant", "tool", "assistant"]
    assert report["result"] == [str(report["first"][0]), "ok"], "the call ran on the server the app started"
    alive = [pid for pid in report["first"] + report["second"] if psutil.pid_exists(pid) and not _zombie(pid)]
    assert not alive, f"server processes outlived the app: {alive}"
    for name in ("tool-call-asking-xcb.png", "tool-call-done-xcb.png"):
        assert os.path.getsize(os.path.join(shots, name)) > 10_000, name


def _zombie(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True
