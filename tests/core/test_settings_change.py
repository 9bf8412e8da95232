"""What a settings change does is decided once (the sections, then the runtime) and heard as events."""

from dataclasses import replace

from draftscope.core.settings_change import SettingsEvents
from draftscope.storage.settings import Change, Section, Settings, change_between, section_of


def heard(change: Change) -> list[str]:
    events, out = SettingsEvents(), []
    for name in ("look", "tools", "model", "server", "drafters"):
        getattr(events, name).connect(lambda old, new, name=name: out.append(name))
    events.announce(change, Settings(), Settings())
    return out


def test_every_setting_sits_in_one_section_and_each_section_says_what_a_change_does():
    names = [name for section in Section for name in section.names]
    assert sorted(names) == sorted(Settings.__dataclass_fields__) and len(names) == len(set(names))
    assert section_of("threads") is Section.MODEL and section_of("temperature") is Section.SAMPLING
    base = Settings()
    assert change_between(base, replace(base, recent_models=["x"])) == Change.NONE
    assert change_between(base, replace(base, font_size=14, system_prompt="hi")) == Change.LOOK
    assert change_between(base, replace(base, context_length=8192, drafters={})) == Change.MODEL | Change.DRAFTERS


def test_a_change_is_announced_in_order_and_a_reload_says_nothing_more():
    assert heard(Change.NONE) == []
    assert heard(Change.LOOK | Change.SERVER | Change.DRAFTERS) == ["look", "server", "drafters"]
    assert heard(Change.MODEL | Change.SERVER | Change.LOOK) == ["look", "model"], "the new runtime is built whole"


def test_a_tools_change_restarts_the_tool_host_also_when_the_model_is_loaded_again():
    base = Settings()
    assert change_between(base, replace(base, mcp_servers=[{"name": "files", "command": "npx"}])) == Change.TOOLS
    assert heard(Change.TOOLS | Change.SERVER) == ["tools", "server"]
    assert heard(Change.TOOLS | Change.MODEL) == ["tools", "model"], "the tool host is not part of the runtime"
