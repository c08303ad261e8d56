"""The window's pictures: the viewer's detail requests read by the view controller, what the
viewer holds accounted in the workspace's picture budget (and the preview's patches beside it),
the budget's total on the memory panel, and Unload all letting go of the pictures too."""

from __future__ import annotations

from PySide6.QtCore import QEvent, QObject

from gui.controllers.memory import MemoryController
from gui.controllers.preview import PreviewController
from gui.controllers.view import ViewController
from gui.pictures import PictureBudget
from gui.widgets.images import read_detail
from gui.widgets.memory_panel import MemoryPanel
from gui.widgets.viewer import ViewerPanel

VIEWER = "viewer"
PREVIEW = "preview"  # the preview controller's patches as the engine sent them


class PicturesBinding(QObject):
    def __init__(
        self,
        viewer: ViewerPanel,
        view: ViewController,
        preview: PreviewController,
        budget: PictureBudget,
        memory: MemoryController,
        panel: MemoryPanel,
    ) -> None:
        super().__init__(viewer)
        self.viewer, self.view, self.preview, self.budget = viewer, view, preview, budget
        view.set_detail_reader(read_detail)
        view.set_frame_size(viewer.frame_size())
        viewer.detailRequested.connect(view.read_detail)
        view.detailLoaded.connect(viewer.show_detail)
        viewer.picturesChanged.connect(self.account)
        viewer.view.viewMoved.connect(self.account)  # the preview keeps only patches in view
        preview.resetRequested.connect(self.account)
        budget.releaseRequested.connect(self.release)
        budget.changed.connect(lambda: panel.set_pictures(budget.pictures, budget.total))
        panel.unloadAllRequested.connect(lambda: memory.release_pictures(budget))
        viewer.view.installEventFilter(self)
        self.account()

    def account(self) -> None:
        held = self.viewer.held_pictures()
        self.budget.account(VIEWER, held.pictures, held.nbytes)
        patches = self.preview.drawn
        self.budget.account(PREVIEW, len(patches), sum(p.pixels.nbytes for p in patches))

    def release(self) -> None:
        """The budget asks its holders to keep only what is on screen: the preview's patches
        go, the viewer keeps what it shows (and says so, which accounts both again)."""
        self.preview.release_pictures()
        self.viewer.release_pictures()

    def eventFilter(self, watched: QObject, event: QEvent) -> bool:
        if event.type() == QEvent.Type.Resize:
            self.view.set_frame_size(self.viewer.frame_size())
        return False
