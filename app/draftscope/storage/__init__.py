"""Qt-free persistence: settings (platformdirs config dir) and chat history (SQLite)."""

from draftscope.storage.history import HistoryStore
from draftscope.storage.settings import Settings
from draftscope.storage.settings_file import load_settings, save_settings, settings_path

__all__ = ["HistoryStore", "Settings", "load_settings", "save_settings", "settings_path"]
