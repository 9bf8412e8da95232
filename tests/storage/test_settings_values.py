"""Loading the settings never fails (README's promise): a value Python cannot turn into a number
or text with a broken character falls back to its default with a notice naming the setting, and
the other settings are kept (real files)."""

from __future__ import annotations

from draftscope.storage import Settings, load_settings


def write(path, text: str) -> None:
    path.write_text(text, encoding="utf-8", errors="surrogatepass")


def test_a_401_digit_number_in_a_decimal_setting_falls_back_with_a_notice(tmp_path):
    path = tmp_path / "settings.json"
    huge = "9" * 401
    write(
        path, f'{{"version": 2, "sampling": {{"temperature": {huge}, "top_k": 7}}, "appearance": {{"font_size": 14}}}}'
    )
    settings, notices = load_settings(path)
    assert settings.temperature == Settings().temperature
    assert settings.top_k == 7 and settings.font_size == 14, "the other settings are kept"
    assert len(notices) == 1 and "'temperature'" in notices[0] and "using the default" in notices[0]
    assert len(notices[0]) < 300, "the notice quotes the value shortened"


def test_text_with_a_broken_character_falls_back_with_a_notice(tmp_path):
    path = tmp_path / "settings.json"
    write(
        path,
        '{"version": 2, "model": {"model": "qwen\\ud800", "threads": 2}, "remembered": {"recent_models": ["a\\udfff"]}}',
    )
    settings, notices = load_settings(path)
    assert settings.model == "default" and settings.threads == 2 and settings.recent_models == []
    assert any("'model'" in n for n in notices) and any("'recent_models'" in n for n in notices)
