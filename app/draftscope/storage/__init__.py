"""Qt-free persistence: settings (platformdirs config dir) and chat history (SQLite)."""

from draftscope.storage.history import HistoryStore
from draftscope.storage.settings import Settings, load_settings, save_settings

__all__ = ["HistoryStore", "Settings", "load_settings", "save_settings"]
