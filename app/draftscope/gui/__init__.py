"""The PySide6 desktop app. Only this package imports Qt; it talks to the engine through the
worker and the plain event types."""
