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

ROOT = Path(__file__).resolve().parents[1]


def test_the_screenshot_script_takes_the_window_shots(tmp_path, tokenizer, tokenizer_dir):
    pytest.importorskip("PySide6")
    from PySide6.QtGui import QImage

    model = write_tiny_gguf(tmp_path / "tiny-F32.gguf", tiny_llama(len(tokenizer), seed=5), tokenizer_dir)
    out = tmp_path / "shots"
    env = dict(os.environ, QT_QPA_PLATFORM="offscreen")
    run = subprocess.run([sys.executable, str(ROOT / "scripts" / "screenshots.py"), "--model", str(model),
                          "--only", "window", "--max-new-tokens", "12", "--out", str(out)],
                         capture_output=True, text=True, timeout=600, env=env)
    assert run.returncode == 0, run.stderr[-3000:]
    for name in ("main-window.png", "main-window-dark.png", "provenance.png", "trie-view.png",
                 "speedup-panel.png", "drafts-panel.png"):
        image = QImage(str(out / name))
        assert not image.isNull() and image.width() > 300, name
        colours = {image.pixel(x, y) for x in range(0, image.width(), 17) for y in range(0, image.height(), 17)}
        assert len(colours) > 8, f"{name} is blank"
