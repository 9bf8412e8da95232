"""Warn when running from a source checkout whose Rust sources are newer than the built
extension: an editable install rebuilds Python edits live, but not the Rust code."""

from __future__ import annotations

import warnings
from pathlib import Path


def warn_if_extension_is_stale(extension_file: str | None) -> None:
    if not extension_file:
        return
    crate = Path(__file__).resolve().parents[3] / "retriever_rs"
    if not (crate / "Cargo.toml").is_file():
        return  # an installed wheel, not a checkout
    try:
        built = Path(extension_file).stat().st_mtime
        sources = [crate / "Cargo.toml", *(crate / "src").rglob("*.rs")]
        newest = max(p.stat().st_mtime for p in sources)
    except OSError:
        return
    if newest > built + 1:
        warnings.warn(
            "retriever_rs/ changed since the draftscope._retriever extension was built; "
            "rebuild it with `scripts/setup.sh` (or `maturin develop --release`)",
            stacklevel=3,
        )
