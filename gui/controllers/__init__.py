"""What the window does, without widgets: jobs and inputs, models, speeds. Testable headless
(QtCore only); `MainWindow` builds the widgets and connects them to these."""
