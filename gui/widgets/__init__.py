"""The main window's widgets."""
