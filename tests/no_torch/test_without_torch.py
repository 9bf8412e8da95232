"""Issue 67: a CPU machine installs no torch. With torch hidden as if not installed
(tests/no_torch/sitecustomize.py on the children's PYTHONPATH), the default path — the window on a
GGUF on llama.cpp, ``draftscope generate`` and ``draftscope serve`` answering on it, ``--help`` and
``doctor`` — runs and never even tries to import torch (the sitecustomize notes every try Draftscope's
code makes, and any torch module loaded at exit); what does need torch says so in words and exits
with 2, without a traceback."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path
from urllib.request import Request, urlopen

import pytest
from engine_fixtures import tiny_llama
from gguf_fixtures import write_tiny_gguf
from llama_helpers import need_llama_cpp

HIDER = Path(__file__).with_name("sitecustomize.py")
PROMPT = "def main(): print('hello world')"
CONTEXT_ONLY = '{"retrieval": false, "learned": false, "context": true, "model": false, "recurrent": false}'

# The window's child: the runtime loads the GGUF as the app does, and the main window is built on it.
WINDOW = f"""
import json, sys
from PySide6.QtWidgets import QApplication
from draftscope.core.runtime import load_runtime
from draftscope.gui.main_window import MainWindow
from draftscope.storage import HistoryStore, Settings

app = QApplication([])
settings = Settings(model=sys.argv[1], backend="llama.cpp", threads=1, drafters=json.loads({CONTEXT_ONLY!r}))
runtime = load_runtime(settings)
window = MainWindow(runtime, HistoryStore(sys.argv[2]))
window.show()
app.processEvents()
print(window.windowTitle(), "on", runtime.engine.backend.kind)
window.close()
runtime.close()
"""


@pytest.fixture(scope="module")
def gguf(tokenizer, tokenizer_dir, tmp_path_factory) -> Path:
    return write_tiny_gguf(tmp_path_factory.mktemp("gguf") / "tiny-F32.gguf", tiny_llama(len(tokenizer)), tokenizer_dir)


@pytest.fixture
def on_llama(gguf) -> Path:
    """The GGUF, for a test that answers with it on llama.cpp (skipped where llama.cpp is not installed,
    failed where it is required)."""
    need_llama_cpp()
    return gguf


class Hidden:
    """Children run with torch hidden; ``tries`` is what they tried of it (the sitecustomize's notes)."""

    def __init__(self, folder: Path) -> None:
        self.tries = folder / "torch-tries.txt"
        self.env = {
            **os.environ,
            "PYTHONPATH": os.pathsep.join([str(HIDER.parent), *filter(None, [os.environ.get("PYTHONPATH")])]),
            "DRAFTSCOPE_TORCH_TRIES": str(self.tries),
            "QT_QPA_PLATFORM": "offscreen",
        }

    def run(self, *args: str, stdin: str | None = None, timeout: float = 120) -> subprocess.CompletedProcess:
        return subprocess.run(
            [sys.executable, *args], env=self.env, input=stdin, capture_output=True, text=True, timeout=timeout
        )

    def draftscope(self, *args: str) -> subprocess.CompletedProcess:
        return self.run("-m", "draftscope", *args)

    def tried(self) -> str:
        return self.tries.read_text() if self.tries.exists() else ""


@pytest.fixture
def hidden(tmp_path) -> Hidden:
    return Hidden(tmp_path)


def answered(done: subprocess.CompletedProcess, hidden: Hidden) -> str:
    """The child's output, once it is known to have run with no torch tried."""
    assert done.returncode == 0, done.stderr[-3000:]
    assert "Traceback" not in done.stderr, done.stderr[-3000:]
    assert hidden.tried() == "", "torch was tried on the default path:\n" + hidden.tried()
    return done.stdout


def test_the_hider_hides_torch_and_notes_a_try(hidden, tmp_path):
    """The check itself: torch is not found, and a try from Draftscope's code is noted (a library's
    own guarded try is not)."""
    probe = tmp_path / "draftscope" / "probe.py"
    probe.parent.mkdir()
    probe.write_text("try:\n    import torch\nexcept ImportError:\n    pass\n")
    code = (
        "import importlib.util, sys; sys.path.insert(0, sys.argv[1]); import transformers, probe;"
        "print(importlib.util.find_spec('torch'))"
    )
    done = hidden.run("-c", code, str(probe.parent))
    assert done.returncode == 0 and done.stdout.strip() == "None", done.stderr
    assert hidden.tried() == f"import torch tried at {probe}:2\n"


def test_help_and_doctor_run_without_torch_and_doctor_says_it_is_optional(hidden):
    assert "serve" in answered(hidden.draftscope("--help"), hidden)
    said = answered(hidden.draftscope("doctor"), hidden)
    assert "not installed (optional" in said and "--with-torch" in said


def test_the_terminal_answers_on_llama_cpp_without_torch(hidden, on_llama):
    done = hidden.draftscope(
        "generate", PROMPT, "--model", str(on_llama), "--backend", "llama.cpp", "--threads", "1",
        "--drafters", "context", "--max-new-tokens", "8",
    )  # fmt: skip
    assert answered(done, hidden).strip() and "llama.cpp" in done.stderr


def test_the_window_is_built_on_llama_cpp_without_torch(hidden, on_llama, tmp_path):
    done = hidden.run("-c", WINDOW, str(on_llama), str(tmp_path / "history.sqlite3"))
    assert answered(done, hidden).strip() == "Draftscope on llama.cpp"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_the_server_answers_on_llama_cpp_without_torch(hidden, on_llama):
    port = free_port()
    args = ["serve", "--model", str(on_llama), "--backend", "llama.cpp", "--threads", "1", "--port", str(port)]
    args += ["--drafters", "context", "--max-new-tokens", "8", "--no-history"]
    server = subprocess.Popen(
        [sys.executable, "-m", "draftscope", *args], env=hidden.env, stderr=subprocess.PIPE, text=True
    )
    url = f"http://127.0.0.1:{port}/v1"
    try:
        deadline = time.monotonic() + 60
        while not _listening(url):
            assert server.poll() is None, f"draftscope serve exited: {server.stderr.read()[-3000:]}"
            assert time.monotonic() < deadline, "draftscope serve did not start listening"
            time.sleep(0.2)
        body = {"model": "default", "messages": [{"role": "user", "content": PROMPT}], "max_tokens": 8}
        asked = Request(url + "/chat/completions", json.dumps(body).encode(), {"Content-Type": "application/json"})
        with urlopen(asked, timeout=60) as reply:
            answer = json.load(reply)
    finally:
        server.terminate()
        server.wait(timeout=30)
    assert answer["choices"][0]["message"]["content"] and answer["usage"]["completion_tokens"] > 0
    assert "Traceback" not in server.stderr.read()
    assert hidden.tried() == "", "torch was tried on the default path:\n" + hidden.tried()


def _listening(url: str) -> bool:
    try:
        with urlopen(url + "/models", timeout=1) as reply:
            return reply.status == 200
    except OSError:  # URLError: not listening yet
        return False


@pytest.mark.parametrize(
    "args, what",
    [
        (["generate", "hi", "--backend", "torch"], "The torch backend"),
        (["drafter", "train", "--data", "text:notes.txt"], "Training a recurrent head"),
    ],
    ids=["torch-backend", "train-head"],
)
def test_what_needs_torch_says_so_in_words(hidden, gguf, args, what):
    done = hidden.draftscope(*args, "--model", str(gguf))
    assert done.returncode == 2, done.stderr[-3000:]
    assert "Traceback" not in done.stderr, done.stderr[-3000:]
    said = json.dumps(done.stderr)  # one line, for the message
    assert what in done.stderr and "needs PyTorch, which is not installed" in done.stderr, said
    assert "pip install" in done.stderr and "--with-torch" in done.stderr, said
