"""``draftscope doctor`` lists the conversations' KV caches saved on disk (issue 61): how many,
their size and their folder."""

from __future__ import annotations

import json

from draftscope.cli import main
from draftscope.engine.kv_disk import KvDiskStore


def test_doctor_lists_the_saved_caches(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("DRAFTSCOPE_CONFIG_DIR", str(tmp_path / "config"))
    monkeypatch.setenv("DRAFTSCOPE_DATA_DIR", str(tmp_path / "data"))
    folder = tmp_path / "data" / "kv-caches"
    assert main(["doctor", "--json"]) == 0
    report = json.loads(capsys.readouterr().out)["kv_caches"]
    assert (report["count"], report["bytes"], report["folder"]) == (0, 0, str(folder))

    store = KvDiskStore(folder, 10**8)
    for first in (1, 2):
        store.save("k", [first, *range(100, 200)], 101, b"x" * (3 << 20))
    assert main(["doctor"]) == 0
    said = capsys.readouterr().out
    assert "Conversations' caches on disk" in said and "2 saved · 6.0 MB of 1,024 MB" in said
    assert str(folder) in said
