"""Settings files written when answers were greedy and cut at 512 tokens (versions 1 and 2): a user
who never changed the sampling gets today's defaults, which do not loop; a user who chose theirs
keeps them."""

from __future__ import annotations

import json

from draftscope.storage import Settings, load_settings, save_settings
from draftscope.storage.settings_file import SETTINGS_VERSION

OLD_SAMPLING = {"temperature": 0.0, "top_p": 1.0, "top_k": 0, "repetition_penalty": 1.0, "max_new_tokens": 512}


def _write(tmp_path, document: dict):
    path = tmp_path / "settings.json"
    path.write_text(json.dumps(document))
    return path


def test_untouched_old_sampling_takes_todays_defaults(tmp_path):
    path = _write(tmp_path, {"version": 2, "sampling": dict(OLD_SAMPLING), "appearance": {"font_size": 14}})
    settings, notices = load_settings(path)
    fresh = Settings()
    assert notices == []
    assert (settings.temperature, settings.top_k, settings.max_new_tokens) == (
        fresh.temperature,
        fresh.top_k,
        fresh.max_new_tokens,
    )
    assert settings.temperature > 0 and settings.max_new_tokens == 0, "answers sample and run until the model stops"
    assert settings.font_size == 14, "the rest of the file is kept"


def test_a_flat_version_1_file_is_migrated_the_same_way(tmp_path):
    path = _write(tmp_path, {"version": 1, **OLD_SAMPLING, "threads": 2})
    settings, _ = load_settings(path)
    assert settings.temperature == Settings().temperature and settings.threads == 2


def test_sampling_the_user_chose_is_kept(tmp_path):
    chosen = {**OLD_SAMPLING, "max_new_tokens": 300}  # greedy on purpose, a limit of their own
    settings, _ = load_settings(_write(tmp_path, {"version": 2, "sampling": chosen}))
    assert (settings.temperature, settings.max_new_tokens, settings.top_k) == (0.0, 300, 0)


def test_a_migrated_file_is_saved_as_todays_version_and_stays(tmp_path):
    path = _write(tmp_path, {"version": 2, "sampling": dict(OLD_SAMPLING)})
    settings, _ = load_settings(path)
    save_settings(settings, path)
    assert json.loads(path.read_text())["version"] == SETTINGS_VERSION
    settings.temperature = 0.0  # chosen after the migration: never migrated again
    save_settings(settings, path)
    assert load_settings(path)[0].temperature == 0.0
