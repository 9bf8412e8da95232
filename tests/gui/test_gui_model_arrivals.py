"""The model switcher offers a model as soon as it arrives (offscreen Qt): a catalogue download
that ends (a fake fetcher: nothing is downloaded), and a GGUF that LM Studio put in its folder
while the app ran, seen when the switcher is next opened."""

import os

import pytest

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
pytest.importorskip("PySide6")

from PySide6.QtWidgets import QWidget

from draftscope.gui.dialogs.model_download import ModelDownload
from draftscope.gui.model_switcher import ModelSwitcher
from draftscope.models import catalog

pytestmark = pytest.mark.usefixtures("own_cache")  # no catalogue model downloaded


def offered(switcher: ModelSwitcher) -> list[str]:
    return [switcher.itemText(i) for i in range(switcher.count())]


def test_a_finished_download_is_offered_by_the_switcher_at_once(qtbot):
    model = catalog.SMOLLM2_135M
    switcher = ModelSwitcher("some-model")
    qtbot.addWidget(switcher)
    assert model.title not in offered(switcher)

    def fetch(model, *, progress=None, cancel=None, on_status=None):
        model.path.parent.mkdir(parents=True, exist_ok=True)
        model.path.write_bytes(b"GGUF")
        return model.path

    host = QWidget()
    qtbot.addWidget(host)
    download = ModelDownload(host, fetch_model=fetch, resume_with="Download")
    with qtbot.waitSignal(download.ended, timeout=10_000):
        assert download.start(model)
    assert model.title in offered(switcher)
    assert offered(switcher)[0] == "some-model" and offered(switcher)[-1] == "Other model…"


def test_a_model_lm_studio_fetched_meanwhile_is_offered_when_the_switcher_opens(qtbot, tmp_path, monkeypatch):
    monkeypatch.setenv("DRAFTSCOPE_MODELS_HOME", str(tmp_path / "home"))
    switcher = ModelSwitcher("some-model")
    qtbot.addWidget(switcher)
    switcher.show()
    assert not any("LM Studio" in text for text in offered(switcher))
    gguf = tmp_path / "home/.lmstudio/models/someone/tiny-chat/tiny-chat-Q4.gguf"
    gguf.parent.mkdir(parents=True, exist_ok=True)
    gguf.write_bytes(b"GGUF")
    switcher.showPopup()
    assert "tiny-chat-Q4 · LM Studio" in offered(switcher)
    assert switcher.currentText() == "some-model", "the model in use stays shown"
    switcher.hidePopup()
