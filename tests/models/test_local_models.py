"""Models already on this computer: LM Studio's and Ollama's folders are listed (Ollama's blobs
by their manifest's name:tag), a listed file opens by its path, and the Settings' model list
offers them."""

from __future__ import annotations

import json
import os

import pytest
from engine_fixtures import tiny_llama
from gguf_fixtures import write_tiny_gguf
from llama_helpers import need_llama_cpp

from draftscope.models.local import find_local_models
from draftscope.models.resolve import resolve_model


@pytest.fixture
def home(tmp_path, monkeypatch, tokenizer, tokenizer_dir):
    """A home folder where LM Studio keeps one GGUF and Ollama one model (blob + manifest)."""
    home = tmp_path / "home"
    monkeypatch.setenv("DRAFTSCOPE_MODELS_HOME", str(home))
    monkeypatch.delenv("OLLAMA_MODELS", raising=False)
    model = tiny_llama(len(tokenizer), seed=3)
    studio = home / ".lmstudio" / "models" / "someone" / "Tiny-GGUF"
    studio.mkdir(parents=True)
    write_tiny_gguf(studio / "tiny-Q8_0.gguf", model, tokenizer_dir)
    (studio / "mmproj-tiny-f16.gguf").write_bytes(b"GGUF vision projector, not a chat model")
    ollama = home / ".ollama" / "models"
    (ollama / "blobs").mkdir(parents=True)
    digest = "ab" * 32
    write_tiny_gguf(ollama / "blobs" / f"sha256-{digest}", model, tokenizer_dir)
    manifest = ollama / "manifests" / "registry.ollama.ai" / "library" / "tiny-chat" / "latest"
    manifest.parent.mkdir(parents=True)
    manifest.write_text(
        json.dumps(
            {
                "layers": [
                    {"mediaType": "application/vnd.ollama.image.template", "digest": "sha256:" + "cd" * 32, "size": 10},
                    {"mediaType": "application/vnd.ollama.image.model", "digest": f"sha256:{digest}", "size": 1},
                ]
            }
        )
    )
    broken = ollama / "manifests" / "registry.ollama.ai" / "library" / "broken" / "latest"
    broken.parent.mkdir(parents=True)
    broken.write_text("{not json")
    return home


def test_lm_studio_and_ollama_models_are_found_by_their_names(home):
    found = {m.name: m for m in find_local_models()}
    assert set(found) == {"tiny-Q8_0", "tiny-chat:latest"}, found
    assert found["tiny-Q8_0"].app == "LM Studio" and found["tiny-chat:latest"].app == "Ollama"
    assert found["tiny-chat:latest"].path.name.startswith("sha256-") and found["tiny-chat:latest"].size > 0


def test_an_ollama_blob_opens_by_its_path_under_its_name(home):
    blob = next(m.path for m in find_local_models() if m.app == "Ollama")
    source = resolve_model(str(blob))
    assert source.kind == "gguf" and source.display_name == "tiny-chat:latest"
    not_a_model = home / "notes.txt"
    not_a_model.write_text("hello")
    with pytest.raises(FileNotFoundError, match="not a .gguf model"):
        resolve_model(str(not_a_model))


def test_an_ollama_model_answers_on_llama_cpp(home):
    need_llama_cpp()
    from draftscope.engine.engine import Engine, GenerationRequest

    blob = next(m.path for m in find_local_models() if m.app == "Ollama")
    engine = Engine.load(str(blob), backend="llama.cpp", measure=False)
    try:
        assert engine.backend.kind == "llama.cpp" and engine.name == "tiny-chat:latest"
        final = list(
            engine.generate(GenerationRequest(messages=[{"role": "user", "content": "hi"}], max_new_tokens=5))
        )[-1]
        assert final.finish_reason in ("length", "eos") and final.token_ids
    finally:
        engine.backend.close()


def test_settings_offer_the_models_on_this_computer(home, qtbot):
    os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
    pytest.importorskip("PySide6")
    from PySide6.QtWidgets import QComboBox

    from draftscope.gui.dialogs.settings_dialog import SettingsDialog
    from draftscope.storage.settings import Settings

    blob = next(m.path for m in find_local_models() if m.app == "Ollama")
    dialog = SettingsDialog(Settings())
    qtbot.addWidget(dialog)
    combo = dialog.findChild(QComboBox, "modelCombo")
    texts = [combo.itemText(i) for i in range(combo.count())]
    assert any(t.startswith("tiny-chat:latest · Ollama") for t in texts), texts
    assert any(t.startswith("tiny-Q8_0 · LM Studio") for t in texts), texts
    combo.setCurrentIndex(combo.findData(str(blob)))
    assert dialog.result_settings().model == str(blob)
    again = SettingsDialog(Settings(model=str(blob)))  # a stored choice shows as that entry
    qtbot.addWidget(again)
    assert again.findChild(QComboBox, "modelCombo").currentData() == str(blob)


def test_the_first_run_offers_the_models_on_this_computer(home, qtbot, tmp_path):
    os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
    pytest.importorskip("PySide6")
    from PySide6.QtWidgets import QPushButton, QRadioButton

    from draftscope.gui.dialogs.first_run import FirstRunDialog
    from draftscope.storage.settings import Settings

    studio = next(m for m in find_local_models() if m.app == "LM Studio")
    dialog = FirstRunDialog(Settings(), settings_file=tmp_path / "settings.json")
    qtbot.addWidget(dialog)
    found = {r.text(): r for r in dialog.findChildren(QRadioButton) if r.objectName().startswith("foundModelRadio")}
    assert any(t.startswith("tiny-chat:latest · Ollama") for t in found), list(found)
    pick = next(r for t, r in found.items() if t.startswith("tiny-Q8_0 · LM Studio"))
    assert not pick.isChecked(), "a catalogue model stays the recommendation"
    pick.setChecked(True)
    dialog.findChild(QPushButton, "continueButton").click()
    assert dialog.settings.model == str(studio.path), "a model on this computer opens as it is: no download"


def test_the_first_run_reads_a_picked_or_found_gguf_before_taking_it(home, qtbot, tmp_path):
    """Issue 49, item 13: the first run read a typed path as llama.cpp will, but took an LM Studio or
    Ollama pick, or a folder holding a .gguf, unread: a cut-short file then failed at load."""
    os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
    pytest.importorskip("PySide6")
    from PySide6.QtWidgets import QLabel, QLineEdit, QPushButton, QRadioButton

    from draftscope.gui.dialogs.first_run import FirstRunDialog
    from draftscope.storage.settings import Settings

    blob = next(m.path for m in find_local_models() if m.app == "Ollama")
    whole = blob.read_bytes()
    blob.write_bytes(whole[: len(whole) // 2])  # an interrupted pull
    dialog = FirstRunDialog(Settings(), settings_file=tmp_path / "settings.json")
    qtbot.addWidget(dialog)
    cont = dialog.findChild(QPushButton, "continueButton")
    error = dialog.findChild(QLabel, "setupError")
    pick = next(r for r in dialog.findChildren(QRadioButton) if r.text().startswith("tiny-chat:latest · Ollama"))
    pick.setChecked(True)
    cont.click()
    assert "cut short" in error.text() and dialog.pages.currentIndex() == 0 and dialog.settings.model != str(blob)

    folder = tmp_path / "downloads"
    folder.mkdir()
    (folder / "model.gguf").write_bytes(whole[: len(whole) // 2])
    (folder / "mmproj-model-f16.gguf").write_bytes(b"GGUF a vision projector")
    dialog.findChild(QRadioButton, "localModelRadio").setChecked(True)
    dialog.findChild(QLineEdit, "localModelPath").setText(str(folder))
    cont.click()
    assert "model.gguf is cut short" in error.text() and dialog.pages.currentIndex() == 0

    (folder / "model.gguf").write_bytes(whole)  # whole again: the folder's one model is taken
    cont.click()
    assert error.text() == "" and dialog.pages.currentIndex() == 1 and dialog.settings.model == str(folder.resolve())


def test_a_folder_of_several_ggufs_asks_for_one(tmp_path):
    from draftscope.models.resolve import ModelNotFoundError

    for name in ("a-Q4_K_M.gguf", "a-Q8_0.gguf"):
        (tmp_path / name).write_bytes(b"GGUF")
    with pytest.raises(ModelNotFoundError, match=r"holds 2 GGUF models \(a-Q4_K_M.gguf, a-Q8_0.gguf\): choose one"):
        resolve_model(str(tmp_path))
