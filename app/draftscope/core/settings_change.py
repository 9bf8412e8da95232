"""A settings change, heard as events: the window (and anything else that shows or serves the
runtime) connects to what concerns it instead of diffing settings by hand.

What a change does is decided once: by the changed settings' sections (storage/settings.py) and
what the runtime has loaded (Runtime.change_for). :meth:`SettingsEvents.announce` then emits, in
this order, ``look`` (restyle), ``tools`` (the MCP servers or the calls' limits changed: the
window's tool host starts again; it does not hang on the model, so a reload announces it too),
``model`` (load the model again: the new runtime is built whole from the settings, so nothing else
is announced), else ``server`` (restart it) and ``drafters`` (they were rebuilt). Each signal
carries the settings before and after.
"""

from __future__ import annotations

from psygnal import Signal, SignalGroup

from draftscope.storage.settings import Change


class SettingsEvents(SignalGroup):
    look = Signal(object, object)  # (old, new): theme or font size changed
    tools = Signal(object, object)  # the MCP servers, their tools' switches or the calls' limits changed
    model = Signal(object, object)  # the model must be loaded again with ``new``
    server = Signal(object, object)  # the server beside the window starts, restarts or stops
    drafters = Signal(object, object)  # the runtime's drafters were rebuilt for ``new``

    def announce(self, change: Change, old, new) -> None:
        """Emit what ``change`` asks for, in the order the module's docstring gives."""
        if change & Change.LOOK:
            self.look.emit(old, new)
        if change & Change.TOOLS:
            self.tools.emit(old, new)
        if change & Change.MODEL:
            self.model.emit(old, new)
            return
        if change & Change.SERVER:
            self.server.emit(old, new)
        if change & Change.DRAFTERS:
            self.drafters.emit(old, new)
