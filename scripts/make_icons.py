#!/usr/bin/env python3
"""Render resources/icons/draftscope.svg to the PNG sizes the app and the desktop entry use.

    python scripts/make_icons.py            # writes resources/icons/png/draftscope-<N>.png
    python scripts/make_icons.py --check    # exit 1 if a PNG is missing or has the wrong size

Rendering uses PySide6's QtSvg (QSvgRenderer painting onto a transparent ARGB QImage), so the
only requirement is the PySide6 the app already depends on; it works without a display.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SVG = ROOT / "resources" / "icons" / "draftscope.svg"
PNG_DIR = ROOT / "resources" / "icons" / "png"
SIZES = (16, 32, 48, 64, 128, 256, 512)


def png_path(size: int, folder: Path = PNG_DIR) -> Path:
    return folder / f"draftscope-{size}.png"


def render(svg: Path, size: int):
    """The SVG drawn on a transparent ``size`` x ``size`` QImage."""
    from PySide6.QtCore import Qt
    from PySide6.QtGui import QImage, QPainter
    from PySide6.QtSvg import QSvgRenderer

    renderer = QSvgRenderer(str(svg))
    if not renderer.isValid():
        raise ValueError(f"{svg} is not a valid SVG")
    image = QImage(size, size, QImage.Format.Format_ARGB32_Premultiplied)
    image.fill(Qt.GlobalColor.transparent)
    painter = QPainter(image)
    painter.setRenderHint(QPainter.RenderHint.Antialiasing)
    painter.setRenderHint(QPainter.RenderHint.SmoothPixmapTransform)
    renderer.render(painter)
    painter.end()
    return image.convertToFormat(QImage.Format.Format_ARGB32)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--svg", type=Path, default=SVG)
    parser.add_argument("--out", type=Path, default=PNG_DIR, help="output folder (default: %(default)s)")
    parser.add_argument("--check", action="store_true", help="only check that every PNG exists with its size")
    args = parser.parse_args(argv)

    os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
    from PySide6.QtGui import QGuiApplication, QImage

    _app = QGuiApplication.instance() or QGuiApplication(sys.argv[:1])  # QImage text/font code wants one
    if args.check:
        bad = []
        for size in SIZES:
            image = QImage(str(png_path(size, args.out)))
            if image.isNull() or (image.width(), image.height()) != (size, size):
                bad.append(png_path(size, args.out))
        for path in bad:
            print(f"missing or wrong size: {path}", file=sys.stderr)
        return 1 if bad else 0

    args.out.mkdir(parents=True, exist_ok=True)
    for size in SIZES:
        path = png_path(size, args.out)
        if not render(args.svg, size).save(str(path), "PNG"):
            print(f"could not write {path}", file=sys.stderr)
            return 1
        print(f"{path.relative_to(ROOT) if path.is_relative_to(ROOT) else path}  {size}x{size}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
