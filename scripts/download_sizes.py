"""Bytes a newcomer downloads for the distributions installed in a site-packages folder: each one's wheel as
PyPI's simple index lists it (the wheel whose tags the install recorded), or its sdist where it was built here.

    python scripts/download_sizes.py VENV/lib/python3.11/site-packages [PREFIX,PREFIX...]

PREFIXes keep only distributions whose names start so (torch,nvidia,triton: what torch brings)."""

from __future__ import annotations

import json
import sys
import urllib.request
from importlib.metadata import distributions

from packaging.tags import parse_tag
from packaging.utils import canonicalize_name, parse_sdist_filename, parse_wheel_filename
from packaging.version import Version

SKIP = ("draftscope", "pip", "setuptools")


def index_files(name: str) -> list[dict]:
    request = urllib.request.Request(
        f"https://pypi.org/simple/{name}/", headers={"Accept": "application/vnd.pypi.simple.v1+json"}
    )
    with urllib.request.urlopen(request, timeout=30) as response:
        return json.load(response)["files"]


def _wheel_matches(filename: str, version: Version, tags: set) -> bool:
    try:
        _, found, _, file_tags = parse_wheel_filename(filename)
    except ValueError:  # old, invalid names on the index
        return False
    return found == version and bool(file_tags & tags)


def _sdist_of(filename: str, version: Version) -> bool:
    try:
        return parse_sdist_filename(filename)[1] == version
    except ValueError:
        return False


def download_of(dist) -> tuple[int, str]:
    """(bytes, file name) of what pip fetched for ``dist``: its wheel, else the source it built."""
    name, version = canonicalize_name(dist.metadata["Name"]), Version(dist.version)
    tags = {t for line in (dist.read_text("WHEEL") or "").splitlines() if line.startswith("Tag:")
            for t in parse_tag(line.split(": ", 1)[1].strip())}  # fmt: skip
    files = index_files(name)
    wheel = next(
        (f for f in files if f["filename"].endswith(".whl") and _wheel_matches(f["filename"], version, tags)), None
    )
    if wheel is not None:
        return wheel.get("size") or 0, wheel["filename"]
    sdist = next((f for f in files if not f["filename"].endswith(".whl") and _sdist_of(f["filename"], version)), None)
    return ((sdist.get("size") or 0), sdist["filename"] + " (built here)") if sdist else (0, f"{name} (not on PyPI)")


def main() -> None:
    prefixes = sys.argv[2].split(",") if len(sys.argv) > 2 else [""]
    rows = [
        download_of(d)
        for d in distributions(path=[sys.argv[1]])
        if canonicalize_name(d.metadata["Name"]) not in SKIP
        and any(canonicalize_name(d.metadata["Name"]).startswith(p) for p in prefixes)
    ]
    for size, filename in sorted(rows, reverse=True)[:12]:
        print(f"{size / 1e6:8.1f} MB  {filename}")
    print(f"{len(rows)} distributions, {sum(size for size, _ in rows) / 1e6:.0f} MB")


if __name__ == "__main__":
    main()
