"""scripts/screenshots.py, which takes the README's screenshots, runs in CI's environment: on a
tiny GGUF written here it answers, opens every panel and writes real, non-blank images."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from engine_fixtures import tiny_llama
from gguf_fixtures import write_tiny_gguf

ROOT = Path(__file__).resolve().parents[2]


def take(part: str, tmp_path, tokenizer, tokenizer_dir) -> Path:
    model = write_tiny_gguf(tmp_path / "tiny-F32.gguf", tiny_llama(len(tokenizer), seed=5), tokenizer_dir)
    out = tmp_path / "shots"
    # the app's folders in scratch space: the first run must not find (or write) the user's settings
    env = dict(
        os.environ,
        QT_QPA_PLATFORM="offscreen",
        DRAFTSCOPE_CONFIG_DIR=str(tmp_path / "config"),
        DRAFTSCOPE_DATA_DIR=str(tmp_path / "data"),
    )
    run = subprocess.run(
        [
            sys.executable,
            str(ROOT / "scripts" / "screenshots.py"),
            "--model",
            str(model),
            "--only",
            part,
            "--max-new-tokens",
            "12",
            "--out",
            str(out),
            "--head-model",
            str(model),
        ],
        capture_output=True,
        text=True,
        timeout=600,
        env=env,
    )
    assert run.returncode == 0, run.stderr[-3000:]
    return out


def assert_pictures(out: Path, names) -> None:
    from PySide6.QtGui import QImage

    for name in names:
        image = QImage(str(out / name))
        assert not image.isNull() and image.width() > 300, name
        colours = {image.pixel(x, y) for x in range(0, image.width(), 17) for y in range(0, image.height(), 17)}
        assert len(colours) > 8, f"{name} is blank"


def test_the_screenshot_script_takes_the_window_shots(tmp_path, tokenizer, tokenizer_dir):
    pytest.importorskip("PySide6")
    out = take("window", tmp_path, tokenizer, tokenizer_dir)
    assert_pictures(
        out,
        (
            "main-window.png",
            "main-window-dark.png",
            "provenance.png",
            "trie-view.png",
            "speedup-panel.png",
            "drafts-panel.png",
        ),
    )


def test_the_screenshot_script_takes_the_dialog_shots(tmp_path, tokenizer, tokenizer_dir):
    """The race (both lanes run and replay), the settings, both pages of the first run and a
    recurrent head trained in its dialog."""
    pytest.importorskip("PySide6")
    out = take("dialogs", tmp_path, tokenizer, tokenizer_dir)
    assert_pictures(
        out, ("race.png", "settings.png", "first-run-model.png", "first-run-datastore.png", "train-head.png")
    )
