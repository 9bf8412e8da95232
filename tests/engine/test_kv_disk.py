"""The KV caches saved on disk (engine/kv_disk.py): finding a saved prefix from the index, reading
it back checked, the budget, damaged and killed writes, the folder's size and clearing it."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

import pytest

from draftscope import paths
from draftscope.engine.kv_disk import (
    STALE_TEMP_S,
    KvDiskStore,
    block_hashes,
    cache_files,
    clear_all,
    disk_use,
)


def test_the_folder_is_private_and_its_size_counts_and_clearing_removes_only_caches(tmp_path, monkeypatch):
    monkeypatch.setenv("DRAFTSCOPE_DATA_DIR", str(tmp_path / "data"))
    folder = paths.kv_cache_dir()
    assert folder.is_dir() and folder.stat().st_mode & 0o077 == 0, "KV files reproduce conversations: 0700"
    assert disk_use(folder) == 0 and clear_all(folder) == 0
    (folder / "a.kvc").write_bytes(b"x" * 100)
    (folder / "b.kvc").write_bytes(b"x" * 50)
    (folder / "index.json").write_text("{}")
    (folder / "notes.txt").write_text("not ours")
    assert disk_use(folder) == 152
    assert clear_all(folder) == 2
    assert disk_use(folder) == 0 and (folder / "notes.txt").exists(), "only the caches go"
    assert disk_use(tmp_path / "missing") == 0 and clear_all(tmp_path / "missing") == 0


def saved(store, key, tokens, state=b"s" * 1000):
    return store.save(key, list(tokens), len(tokens), state)


def test_a_prefix_is_found_from_the_index_and_read_back_checked(tmp_path):
    store = KvDiskStore(tmp_path, 10**6, min_save=16, min_gain=8)
    tokens = list(range(100, 180))
    path = saved(store, "k1", tokens, b"state bytes")
    prompt = tokens[:50] + [1, 2, 3]
    found = store.find("k1", prompt, better_than=0)
    assert found is not None and found.path == path and found.shares == 48  # whole blocks of 16
    back = store.load(found, "k1", prompt)
    assert (back.tokens, back.positions, back.state) == (tokens, 80, b"state bytes")
    assert store.find("k2", prompt, better_than=0) is None, "another model's key finds nothing"
    assert store.find("k1", prompt, better_than=45) is None, "not worth loading for 4 more tokens"
    assert store.find("k1", [7] + prompt, better_than=0) is None, "a different first token shares nothing"


def test_saving_a_longer_conversation_replaces_its_prefix_and_the_same_one_is_not_written_twice(tmp_path):
    store = KvDiskStore(tmp_path, 10**6, min_save=16, min_gain=8)
    tokens = list(range(100, 180))
    first = saved(store, "k", tokens[:40])
    assert saved(store, "k", tokens[:40]) is None, "already saved"
    longer = saved(store, "k", tokens)
    assert not first.exists() and cache_files(tmp_path) == [longer]
    other = saved(store, "k", [1] + tokens[:40])
    assert sorted(cache_files(tmp_path)) == sorted([longer, other])


def test_the_budget_evicts_the_least_recently_used(tmp_path):
    store = KvDiskStore(tmp_path, 10**6, min_save=16, min_gain=8)
    convs = [[k] + list(range(200, 240)) for k in range(3)]
    paths = [saved(store, "k", convs[0])]
    store.budget = 2 * paths[0].stat().st_size + 100  # two fit, not three
    paths.append(saved(store, "k", convs[1]))
    time.sleep(0.01)
    found = store.find("k", convs[0] + [5], better_than=0)
    assert store.load(found, "k", convs[0] + [5]) is not None  # the first is used again: the second is older
    time.sleep(0.01)
    paths.append(saved(store, "k", convs[2]))
    assert [p.exists() for p in paths] == [True, False, True]
    assert disk_use(tmp_path) <= store.budget + (tmp_path / "index.json").stat().st_size
    assert saved(store, "k", convs[1], b"x" * 5000) is None, "larger than the whole budget: not saved"


def test_a_damaged_index_is_rebuilt_from_the_files(tmp_path, caplog):
    store = KvDiskStore(tmp_path, 10**6, min_save=16, min_gain=8)
    tokens = list(range(100, 180))
    path = saved(store, "k", tokens)
    (tmp_path / "index.json").write_text('{"files": {"x.kvc": 3')
    assert store.find("k", tokens + [1], better_than=0).path == path
    assert "damaged" in caplog.text


@pytest.mark.parametrize("damage", ["state", "truncated", "tokens", "header", "other key", "empty"])
def test_a_file_that_does_not_check_out_is_refused_and_removed(tmp_path, damage, caplog):
    store = KvDiskStore(tmp_path, 10**6, min_save=16, min_gain=8)
    tokens = list(range(100, 180))
    path = saved(store, "k", tokens, bytes(range(256)) * 4)
    found = store.find("k", tokens + [1], better_than=0)
    data = bytearray(path.read_bytes())
    if damage == "state":
        data[-10] ^= 0xFF
    elif damage == "truncated":
        data = data[: len(data) // 2]
    elif damage == "tokens":
        data[-1024 - 4 * 40] ^= 0x01
    elif damage == "header":
        data[12:20] = b"nonsense"
    elif damage == "other key":
        data = data.replace(b'"key": "k"', b'"key": "j"')
    else:
        data = b""
    path.write_bytes(bytes(data))
    assert store.load(found, "k", tokens + [1]) is None
    assert not path.exists() and store.find("k", tokens + [1], better_than=0) is None
    assert "ignored" in caplog.text


def test_an_index_that_claims_other_tokens_is_caught_by_the_files_own(tmp_path):
    """The file's tokens, not the index, decide: an index naming the prompt's blocks for a file
    holding another conversation loads nothing."""
    store = KvDiskStore(tmp_path, 10**6, min_save=16, min_gain=8)
    ours, theirs = list(range(100, 180)), list(range(300, 380))
    path = saved(store, "k", theirs)
    index = json.loads((tmp_path / "index.json").read_text())
    index["files"][path.name]["blocks"] = block_hashes(ours)
    (tmp_path / "index.json").write_text(json.dumps(index))
    found = store.find("k", ours + [1], better_than=0)
    assert found is not None and store.load(found, "k", ours + [1]) is None


def test_a_write_killed_midway_leaves_no_file_that_loads(tmp_path):
    """A child process saving a large cache is killed while it writes: what it leaves is a hidden
    temporary file that no look-up finds, removed once stale."""
    script = (
        "import sys; from pathlib import Path; from draftscope.engine.kv_disk import KvDiskStore\n"
        "KvDiskStore(Path(sys.argv[1]), 10**10).save('k', list(range(100, 180)), 80, b'x' * (1 << 30))\n"
    )
    child = subprocess.Popen([sys.executable, "-c", script, str(tmp_path)])
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and not any(p.stat().st_size for p in tmp_path.glob(".tmp-*")):
            time.sleep(0.005)
        child.kill()
    finally:
        child.wait()
    temps = list(tmp_path.glob(".tmp-*"))
    assert temps and cache_files(tmp_path) == [], "killed before its rename: only a temporary file"
    store = KvDiskStore(tmp_path, 10**6, min_save=16, min_gain=8)
    assert store.find("k", list(range(100, 180)) + [1], better_than=0) is None
    old = time.time() - 2 * STALE_TEMP_S
    os.utime(temps[0], (old, old))
    saved(store, "k", list(range(400, 480)))  # a save sweeps stale temporary files
    assert not temps[0].exists()
