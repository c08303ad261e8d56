"""Tessera's desktop front end (PySide6). The window's state is `gui.workspace`; it runs the
engine only through `gui.engine_thread`, and imports only the engine modules on the allow-list
in pyproject.toml."""
