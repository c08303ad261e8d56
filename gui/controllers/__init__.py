"""What the window does, without widgets: actions on the workspace (gui/workspace.py) and on
the engine thread — inputs (what comes in), jobs (where a job is queued), view, preview (where
a preview is asked and answered), results, models, memory, speeds. Testable headless (QtCore
only), also against a fake engine thread (tests/fake_engine.py); `MainWindow` builds the
widgets and connects them to these."""
