"""Reading ahead and the caches kept on disk (issue 61) are settings like the others: saved in their
own section of the file, checked on load (a wrong value falls back to its default with a notice),
and a change to them asks for no reload."""

from __future__ import annotations

import json
from dataclasses import replace

from draftscope.storage import Settings, load_settings, save_settings
from draftscope.storage.settings import MAX_KV_CACHE_MB, Change, Section, change_between


def test_the_defaults_read_ahead_and_keep_a_gigabyte_of_caches():
    s = Settings()
    assert s.read_ahead is True and s.kv_cache_budget_mb == 1024 and s.problems() == []
    assert "read_ahead" not in Section.MODEL.names and "kv_cache_budget_mb" not in Section.MODEL.names
    assert change_between(s, replace(s, read_ahead=False, kv_cache_budget_mb=0)) == Change.NONE


def test_they_are_saved_in_their_own_section_and_read_back(tmp_path):
    path = save_settings(Settings(read_ahead=False, kv_cache_budget_mb=0), tmp_path / "settings.json")
    saved = json.loads(path.read_text())
    assert saved["reading"] == {"read_ahead": False, "kv_cache_budget_mb": 0}
    settings, notices = load_settings(path)
    assert (settings.read_ahead, settings.kv_cache_budget_mb, notices) == (False, 0, [])


def test_an_older_file_without_them_reads_ahead_with_the_default_budget(tmp_path):
    path = tmp_path / "settings.json"
    path.write_text('{"version": 2, "sampling": {"top_k": 7}}')
    settings, notices = load_settings(path)
    assert (settings.top_k, settings.read_ahead, settings.kv_cache_budget_mb, notices) == (7, True, 1024, [])


def test_a_wrong_value_falls_back_to_its_default_with_a_notice(tmp_path):
    path = tmp_path / "settings.json"
    for reading, name in (
        ({"read_ahead": "no", "kv_cache_budget_mb": 5}, "read_ahead"),
        ({"read_ahead": False, "kv_cache_budget_mb": -1}, "kv_cache_budget_mb"),
        ({"read_ahead": False, "kv_cache_budget_mb": MAX_KV_CACHE_MB + 1}, "kv_cache_budget_mb"),
        ({"read_ahead": False, "kv_cache_budget_mb": True}, "kv_cache_budget_mb"),
    ):
        path.write_text(json.dumps({"version": 2, "reading": reading}))
        settings, notices = load_settings(path)
        assert getattr(settings, name) == getattr(Settings(), name), reading
        assert len(notices) == 1 and f"'{name}'" in notices[0] and "using the default" in notices[0], notices
        kept = next(k for k in reading if k != name)
        assert getattr(settings, kept) == reading[kept], "the other setting is kept"
    assert Settings(kv_cache_budget_mb=MAX_KV_CACHE_MB).problems() == []
