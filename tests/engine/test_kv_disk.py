"""The KV caches saved on disk (engine/kv_disk.py): the folder's size and clearing it."""

from __future__ import annotations

from draftscope import paths
from draftscope.engine.kv_disk import clear_all, disk_use


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
