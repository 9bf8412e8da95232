"""Installing PyTorch from the window (offscreen Qt, PyTorch reported missing): Settings ▸ Model offers it
with its size (the CPU build without a card, the CUDA build with one) and says when the backend or the
precision chosen needs it; the install dialog runs a real `python -m pip install` of a tiny package served
from this test's own index over HTTP (slowly, so its download is seen) and shows the bytes, then "PyTorch
installed"; a failing install shows pip's words and leaves the window usable; Cancel kills pip. A model load
that failed for want of PyTorch offers the install and loads once it is done; training the recurrent drafter
and learning a model's style offer it too."""

import base64
import hashlib
import json
import os
import threading
import time
import zipfile
from functools import partial
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer

import pytest

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
pytest.importorskip("PySide6")

from PySide6.QtCore import Qt
from PySide6.QtWidgets import QCheckBox, QDialog, QLabel, QProgressBar, QPushButton
from runtime_helpers import runtime_for

from draftscope import optional_torch
from draftscope.core import settings_checks, words
from draftscope.core.runtime import Runtime
from draftscope.drafters.recurrent import files
from draftscope.gui.dialogs.recurrent_head import head_description
from draftscope.gui.dialogs.settings_dialog import SettingsDialog
from draftscope.gui.dialogs.torch_install import TorchInstallDialog
from draftscope.gui.main_window import MainWindow
from draftscope.gui.wizard.build_jobs import load_torch_model
from draftscope.gui.wizard.wizard import DatastoreWizard
from draftscope.optional_torch import InstallPlan, TorchMissing
from draftscope.storage import HistoryStore, Settings

pytestmark = pytest.mark.usefixtures("own_data_and_cache", "own_pip")

WHEEL_BYTES = 1_200_000  # over pip's 512 kB: pip reports its download's progress
CHUNK = 64 * 1024


@pytest.fixture
def own_pip(monkeypatch):
    """pip reads no configuration of this machine's (its index, its find-links): only the test's index."""
    monkeypatch.setenv("PIP_CONFIG_FILE", os.devnull)


@pytest.fixture
def no_torch(monkeypatch):
    """PyTorch reported missing, on a machine without an NVIDIA card (also where the settings' words ask)."""
    for where in (optional_torch, settings_checks, words):
        monkeypatch.setattr(where, "torch_available", lambda: False)
    monkeypatch.setattr(optional_torch, "has_nvidia_card", lambda: False)


def write_wheel(folder, name="tinypkg", size=WHEEL_BYTES):
    """A pure-Python wheel of ``size`` random (incompressible) bytes, its RECORD hashed as pip expects."""
    dist = f"{name}-1.0.dist-info"
    files = {
        f"{name}/__init__.py": b"VALUE = 42\n",
        f"{name}/blob.bin": os.urandom(size),
        f"{dist}/METADATA": f"Metadata-Version: 2.1\nName: {name}\nVersion: 1.0\n".encode(),
        f"{dist}/WHEEL": b"Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
    }

    def record(path, data):
        digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
        return f"{path},sha256={digest},{len(data)}"

    files[f"{dist}/RECORD"] = "\n".join([*(record(p, d) for p, d in files.items()), f"{dist}/RECORD,,"]).encode()
    with zipfile.ZipFile(folder / f"{name}-1.0-py3-none-any.whl", "w", zipfile.ZIP_STORED) as zf:
        for path, data in files.items():
            zf.writestr(path, data)


class SlowFiles(SimpleHTTPRequestHandler):
    """Serves the folder, ``pace`` seconds between 64 kB pieces (a download long enough to be seen)."""

    pace = 0.0

    def copyfile(self, source, outputfile):
        try:
            while piece := source.read(CHUNK):
                outputfile.write(piece)
                outputfile.flush()
                time.sleep(self.pace)
        except (BrokenPipeError, ConnectionResetError):
            pass  # pip was stopped

    def log_message(self, *_args):
        pass


@pytest.fixture
def index(tmp_path):
    """A package index of one wheel (tinypkg) at a local URL; ``index.pace`` slows its downloads."""
    folder = tmp_path / "index"
    folder.mkdir()
    write_wheel(folder)
    handler = type("Handler", (SlowFiles,), {"pace": 0.12})
    server = ThreadingHTTPServer(("127.0.0.1", 0), partial(handler, directory=str(folder)))
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True).start()
    index = type("Index", (), {"url": f"http://127.0.0.1:{server.server_address[1]}/", "handler": handler})
    yield index
    server.shutdown()
    server.server_close()


def local_plan(index, target, package="tinypkg"):
    """Install ``package`` from the test's index only, into ``target`` (never this Python's packages)."""
    args = ("--no-index", "--no-cache-dir", "--find-links", index.url, "--target", str(target), package)
    return InstallPlan(args, "about 1 MB to download", WHEEL_BYTES)


def label(widget, name) -> QLabel:
    found = widget.findChild(QLabel, name)
    assert found is not None, name
    return found


def button(widget, name) -> QPushButton:
    found = widget.findChild(QPushButton, name)
    assert found is not None, name
    return found


def install_dialog(parent) -> TorchInstallDialog:
    found = parent.findChild(QDialog, "torchInstallDialog")
    assert found is not None, "the install dialog opened"
    return found


def open_settings(qtbot) -> SettingsDialog:
    dialog = SettingsDialog(Settings(), devices=["cpu"])
    qtbot.addWidget(dialog)
    dialog.show()
    return dialog


def test_settings_model_offers_pytorch_with_its_size(qtbot, no_torch, monkeypatch):
    dialog = open_settings(qtbot)
    offer = label(dialog, "torchOffer")
    assert offer.isVisible() and offer.text().startswith("Not installed.")
    assert "Hugging Face models" in offer.text() and "about 200 MB to download" in offer.text()
    auto = dialog.dtype_combo.findData("auto")
    assert "PyTorch is not installed here" in dialog.dtype_combo.itemData(auto, Qt.ItemDataRole.ToolTipRole)

    dialog.backend_combo.setCurrentIndex(dialog.backend_combo.findData("torch"))
    assert offer.text().startswith("The torch backend needs PyTorch, which is not installed here")
    assert offer.property("error")
    dialog.backend_combo.setCurrentIndex(dialog.backend_combo.findData("auto"))
    dialog.dtype_combo.setCurrentIndex(dialog.dtype_combo.findData("bfloat16"))
    assert offer.text().startswith("Precision bfloat16 applies to the torch backend, which needs PyTorch")

    button(dialog, "installTorchOfferButton").click()
    sizes = label(install_dialog(dialog), "torchSize").text()
    assert "about 200 MB to download" in sizes and "the CPU build (no NVIDIA card was found here)" in sizes
    assert (
        "'torch>=2.6' --extra-index-url https://download.pytorch.org/whl/cpu"
        in label(install_dialog(dialog), "torchCommand").text()
    )
    install_dialog(dialog).reject()

    monkeypatch.setattr(optional_torch, "has_nvidia_card", lambda: True)
    with_card = open_settings(qtbot)
    assert "about 3 GB to download with CUDA" in label(with_card, "torchOffer").text()
    button(with_card, "installTorchOfferButton").click()
    assert "the CUDA build, for the NVIDIA card found here" in label(install_dialog(with_card), "torchSize").text()


def test_settings_offer_nothing_where_pytorch_is_installed(qtbot, monkeypatch):
    monkeypatch.setattr(optional_torch, "torch_available", lambda: True)
    assert not label(open_settings(qtbot), "torchOffer").isVisible()


def test_a_head_without_pytorch_is_described_as_unable_to_draft(qtbot, no_torch):
    meta = {"format": files.FORMAT, "version": files.VERSION, "training": {"tokens": 600_000}}
    meta["training"]["validation"] = {"tau_chain": 1.9}
    path = files.json_path(files.default_head_path("tiny"))
    path.parent.mkdir(parents=True)
    path.write_text(json.dumps(meta))
    settings = SettingsDialog(Settings(model="tiny"), devices=["cpu"], recurrent=head_description("tiny"))
    qtbot.addWidget(settings)
    expected = "The head: trained on 600k tokens, validation τ 1.90; it needs PyTorch, not installed here"
    assert label(settings, "recurrentHint").text() == expected


def test_install_shows_pips_download_then_pytorch_installed(qtbot, index, tmp_path, monkeypatch):
    target = tmp_path / "site"
    monkeypatch.setattr(optional_torch, "torch_available", lambda: (target / "tinypkg").is_dir())
    dialog = TorchInstallDialog("Training the recurrent drafter", plan=local_plan(index, target))
    qtbot.addWidget(dialog)
    dialog.show()
    assert (
        label(dialog, "torchNeeded").text()
        == "Training the recurrent drafter needs PyTorch, which is not installed here."
    )
    bar, status = dialog.findChild(QProgressBar, "torchInstallProgress"), label(dialog, "torchInstallStatus")
    with qtbot.waitSignal(dialog.installed, timeout=60_000) as installed:
        button(dialog, "installTorchButton").click()
        qtbot.waitUntil(lambda: 0 < bar.value() < bar.maximum(), timeout=30_000)
        assert status.text().startswith("Downloading PyTorch: "), status.text()
        assert " of 1.2 MB" in status.text() and "Downloading tinypkg-1.0-py3-none-any.whl (1.2 MB)" in status.text()
    assert installed.args == [True]
    assert status.text() == "PyTorch installed, ready without a restart: Training the recurrent drafter can run now."
    assert (target / "tinypkg" / "__init__.py").is_file()
    assert not dialog.bar_row.isVisible() and not button(dialog, "installTorchButton").isVisible()
    assert button(dialog, "closeTorchInstallButton").text() == "Done"


def test_a_failing_install_shows_pips_words_and_the_window_stays_usable(qtbot, index, tmp_path, no_torch, monkeypatch):
    target = tmp_path / "site"
    plan = local_plan(index, target, package="nosuchpkg")
    monkeypatch.setattr(optional_torch, "install_plan", lambda card=None: plan)
    settings = open_settings(qtbot)
    button(settings, "installTorchOfferButton").click()
    dialog = install_dialog(settings)
    button(dialog, "installTorchButton").click()
    error = label(dialog, "torchInstallError")
    qtbot.waitUntil(error.isVisible, timeout=60_000)
    assert error.text().startswith("pip found no build of it for this Python")
    assert "Nothing else changed: Draftscope runs as before." in error.text()
    assert "ERROR: No matching distribution found for nosuchpkg" in error.text()
    again = button(dialog, "installTorchButton")
    assert again.text() == "Try again" and again.isEnabled() and not dialog.running
    assert not target.exists(), "nothing was installed"

    dialog.reject()
    assert button(settings, "installTorchOfferButton").isVisible(), "the offer stays"
    settings.generation.sampling["temperature"].setValue(0.5)
    settings.accept()
    assert settings.result() == QDialog.DialogCode.Accepted
    assert settings.result_settings().temperature == 0.5


def test_cancel_and_closing_kill_pip(qtbot, index, tmp_path):
    index.handler.pace = 0.5  # ten seconds of download: cancelled long before its end
    target = tmp_path / "site"
    dialog = TorchInstallDialog(plan=local_plan(index, target))
    qtbot.addWidget(dialog)
    dialog.show()
    button(dialog, "installTorchButton").click()
    bar = dialog.findChild(QProgressBar, "torchInstallProgress")
    qtbot.waitUntil(lambda: bar.value() > 0, timeout=30_000)
    pid, temp = dialog.process.processId(), dialog._temp
    assert pid > 0 and os.path.isdir(temp)
    button(dialog, "cancelTorchInstallButton").click()
    qtbot.waitUntil(lambda: not dialog.running, timeout=5000)
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)  # pip is gone (and reaped)
    assert label(dialog, "torchInstallStatus").text() == "Cancelled: pip was stopped. PyTorch is not installed."
    assert not label(dialog, "torchInstallError").isVisible()
    assert not os.path.exists(temp), "pip's temporary files went with it"
    assert not (target / "tinypkg").exists()
    assert button(dialog, "installTorchButton").isEnabled()

    button(dialog, "installTorchButton").click()  # again, then the dialog closed mid-download: pip ends too
    qtbot.waitUntil(lambda: dialog.running and dialog.process.processId() not in (0, pid), timeout=10_000)
    pid = dialog.process.processId()
    dialog.reject()
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)
    assert not dialog.isVisible() and not (target / "tinypkg").exists()


def test_a_load_that_needs_pytorch_offers_it_then_loads(qtbot, chat_engine, index, tmp_path, monkeypatch):
    from draftscope.gui.launcher import Launcher

    target = tmp_path / "site"
    monkeypatch.setattr(optional_torch, "torch_available", lambda: (target / "tinypkg").is_dir())
    monkeypatch.setattr(optional_torch, "install_plan", lambda card=None: local_plan(index, target))

    def factory(settings, log=None):
        optional_torch.require_torch("/models/llama (a Hugging Face folder) on the torch backend")
        return Runtime(settings, chat_engine)

    launcher = Launcher(factory, HistoryStore(tmp_path / "h.sqlite3"), Settings(model="/models/llama"))
    launcher.start()
    qtbot.waitUntil(lambda: launcher.error_box is not None and launcher.error_box.isVisible(), timeout=10_000)
    box = launcher.error_box
    assert "/models/llama (a Hugging Face folder) on the torch backend needs PyTorch" in box.text()
    assert "TorchMissing" not in box.text() and "ImportError" not in box.text()
    box.findChild(QPushButton, "installTorchAction").click()
    dialog = install_dialog(box)
    assert label(dialog, "torchNeeded").text().startswith("/models/llama (a Hugging Face folder) on the torch")
    with qtbot.waitSignal(launcher.window_ready, timeout=60_000) as ready:
        button(dialog, "installTorchButton").click()
        qtbot.waitUntil(lambda: button(dialog, "closeTorchInstallButton").text() == "Done", timeout=60_000)
        button(dialog, "closeTorchInstallButton").click()
    qtbot.addWidget(ready.args[0])
    assert not box.isVisible()


def test_a_load_error_of_another_kind_offers_no_install(qtbot, tmp_path):
    from draftscope.gui.launcher import Launcher

    def factory(settings, log=None):
        raise FileNotFoundError("model not found: /nope")

    launcher = Launcher(factory, HistoryStore(tmp_path / "h.sqlite3"), Settings())
    launcher.start()
    qtbot.waitUntil(lambda: launcher.error_box is not None and launcher.error_box.isVisible(), timeout=10_000)
    assert launcher.error_box.findChild(QPushButton, "installTorchAction") is None
    launcher.error_box.findChild(QPushButton, "chooseAnotherModel").click()  # the others still do their part
    qtbot.waitUntil(lambda: launcher.chooser.isVisible(), timeout=5000)
    launcher.chooser.reject()
    qtbot.waitUntil(launcher.error_box.isVisible, timeout=5000)  # closed without a choice: the error again
    launcher.loader_thread.shutdown()  # the loader kept for a Retry


def test_training_the_recurrent_drafter_offers_pytorch_first(qtbot, chat_engine, tmp_path, no_torch):
    window = MainWindow(runtime_for(chat_engine), HistoryStore(tmp_path / "h.sqlite3"))
    qtbot.addWidget(window)
    window.show()
    window.open_train_dialog()
    dialog = install_dialog(window)
    assert dialog.isVisible()
    assert (
        label(dialog, "torchNeeded").text()
        == "Training the recurrent drafter needs PyTorch, which is not installed here."
    )
    assert getattr(window, "train_dialog", None) is None, "no training dialog that would fail"
    dialog.reject()
    assert window.isEnabled() and window.findChild(QPushButton, "sendButton").isEnabled()


def test_learning_the_style_offers_pytorch_and_says_why_it_cannot_start(qtbot, tokenizer, no_torch):
    wizard = DatastoreWizard("tiny-test-model", tokenizer_loader=lambda _spec: tokenizer)
    qtbot.addWidget(wizard)
    wizard.show()
    assert wizard.loads_a_model(), "the window's model on llama.cpp: loaded again, with torch"
    assert not wizard.findChild(QCheckBox, "distillCheck").isEnabled()
    missing = label(wizard, "distillTorchMissing").text()
    assert (
        missing == "Learning the model's style needs PyTorch, which is not installed here (about 200 MB to "
        "download, 700 MB on disk)."
    )
    button(wizard, "distillInstallTorchButton").click()
    assert label(install_dialog(wizard), "torchNeeded").text().startswith("Learning the model's style needs PyTorch")
    install_dialog(wizard).reject()
    with pytest.raises(TorchMissing, match="Learning the model's style needs PyTorch"):
        load_torch_model("tiny-test-model")  # a build that got that far says so in words, never an ImportError


def test_the_bundle_says_it_cannot_take_pytorch(qtbot, monkeypatch):
    monkeypatch.setattr("sys.frozen", True, raising=False)
    dialog = TorchInstallDialog("The torch backend")
    qtbot.addWidget(dialog)
    assert not button(dialog, "installTorchButton").isEnabled()
    assert "bundled app" in label(dialog, "torchInstallStatus").text()


def test_once_pip_unpacks_neither_cancel_nor_closing_stops_it(qtbot, tmp_path, monkeypatch):
    """Killed while unpacking, torch would be left without its metadata (transformers' import then fails, and
    with it every model): from pip's "Installing collected packages" on, the dialog waits for pip."""
    from draftscope.gui.dialogs import torch_install

    unpacking = "print('Installing collected packages: torch', flush=True); import time; time.sleep(60)"
    monkeypatch.setattr(torch_install, "install_arguments", lambda plan: ["-c", unpacking])
    dialog = TorchInstallDialog(plan=local_plan(type("Index", (), {"url": "http://127.0.0.1:9/"}), tmp_path / "s"))
    qtbot.addWidget(dialog)
    dialog.show()
    button(dialog, "installTorchButton").click()
    cancel = button(dialog, "cancelTorchInstallButton")
    qtbot.waitUntil(lambda: dialog.output.installing and not cancel.isEnabled(), timeout=20_000)
    assert not dialog.cancel() and dialog.running
    dialog.reject()
    assert dialog.isVisible() and dialog.running, "closing waits for pip to finish unpacking"
    assert label(dialog, "torchInstallStatus").text().startswith("Installing: this closes when pip has finished")
    dialog.process.kill()
    qtbot.waitUntil(lambda: not dialog.running, timeout=5000)
