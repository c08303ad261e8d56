"""Tessera's desktop front end (PySide6). It reaches the engine only through `gui.engine_thread`."""
