"""Preview in the viewer: the viewer's Preview button and the View menu's action kept in step,
the preview controller's answers drawn, and the view's moves passed on as the region."""

from __future__ import annotations

from collections.abc import Callable

from PySide6.QtCore import QObject
from PySide6.QtGui import QAction

from gui.controllers.preview import PreviewController
from gui.widgets.images import DisplayImage
from gui.widgets.viewer import ViewerPanel


class PreviewBinding(QObject):
    def __init__(
        self,
        viewer: ViewerPanel,
        preview: PreviewController,
        action: QAction,
        warn: Callable[[str], None],
    ) -> None:
        super().__init__(viewer)
        self.viewer, self.preview, self.action = viewer, preview, action
        viewer.previewToggled.connect(self.set_preview)
        viewer.previewStopRequested.connect(preview.cancel)
        viewer.view.viewMoved.connect(self._view_moved)
        preview.patched.connect(viewer.add_preview_patch)
        preview.resetRequested.connect(viewer.clear_preview)
        preview.targetCleared.connect(self._nothing_to_preview)
        preview.statusChanged.connect(viewer.set_preview_status)
        preview.pictureLoaded.connect(self._picture)
        preview.failed.connect(warn)

    def set_preview(self, on: bool) -> None:
        """Preview on: the right side shows the panel's operation on the left version, for
        the part in view; a job that finishes for the image turns it off to show its result."""
        self.action.blockSignals(True)
        self.action.setChecked(on)
        self.action.blockSignals(False)
        if on == self.preview.enabled and on == self.viewer.preview_on:
            return
        self.viewer.set_preview_mode(on, self.preview.label())
        if on:
            self.follow_left()
            self.preview.set_region(self.viewer.preview_region())
        self.preview.set_enabled(on)

    def follow_left(self) -> None:
        problem = self.preview.follow_left()
        if problem:
            self.viewer.set_preview_status(problem, False)

    def settings_changed(self) -> None:
        if self.preview.enabled:
            self.viewer.set_preview_mode(True, self.preview.label())
            self.preview.refresh()

    def _view_moved(self) -> None:
        if not self.preview.enabled:
            return
        layer = self.viewer.view.preview
        if layer is not None:
            layer.keep_within(self.viewer.view.visible_after())
        self.preview.set_region(self.viewer.preview_region())

    def _nothing_to_preview(self, why: str) -> None:
        self.viewer.clear_preview(pending=False)  # the left picture as it is, not dimmed
        self.viewer.set_preview_status(why, False)

    def _picture(self, image: DisplayImage) -> None:
        if image.frames:  # drawn at the product's size: the frame may be smaller
            self.viewer.view.set_preview_image(image.frames[0], image.size)
