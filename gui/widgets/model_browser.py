"""The model browser (Get… → Browse OpenModelDB models…): OpenModelDB's ONNX models, searchable
and filtered by family and scale, permissive licences first; each with what it is for, its
architecture, size, licence and sample pictures (links: the window fetches nothing it was not
asked to). Get downloads one with progress and Cancel (a cancelled download resumes); a
non-commercial licence must be accepted first. The catalogue's date is shown, and Refresh
reads it again from OpenModelDB's address in the settings.
"""

from __future__ import annotations

import re
from html import escape

from PySide6.QtCore import Qt
from PySide6.QtGui import QBrush, QColor, QPalette
from PySide6.QtWidgets import (
    QAbstractItemView,
    QCheckBox,
    QComboBox,
    QDialog,
    QHBoxLayout,
    QHeaderView,
    QLabel,
    QLineEdit,
    QProgressBar,
    QPushButton,
    QSplitter,
    QTableWidget,
    QTableWidgetItem,
    QVBoxLayout,
    QWidget,
)

from engine.models.browse import BrowseEntry, Snapshot, browse, bundled_snapshot_path
from engine.models.catalog import Family
from gui.controllers.models import ModelsController, fmt_size
from gui.settings import AppSettings

_BAR = re.compile(r"\[[# ]*\]\s*[\d.]+%")  # the command line's own text bar and share
COLUMNS = ("Name", "Does", "Architecture", "Size", "Licence")
_ANY = None


class ModelBrowser(QDialog):
    """A dialog over the models controller: it lists, the controller downloads."""

    def __init__(
        self, models: ModelsController, settings: AppSettings, parent: QWidget | None = None
    ) -> None:
        super().__init__(parent)
        self.setWindowTitle("Browse models — OpenModelDB")
        self.models = models
        self.settings = settings
        self.snapshot: Snapshot = models.snapshot()
        self.shown: list[BrowseEntry] = []
        self.getting: BrowseEntry | None = None

        self.search = QLineEdit()
        self.search.setPlaceholderText("Search names, purposes, authors, tags…")
        self.search.setClearButtonEnabled(True)
        self.family = QComboBox()
        self.scale = QComboBox()
        filters = QHBoxLayout()
        filters.addWidget(self.search, 1)
        filters.addWidget(QLabel("Family:"))
        filters.addWidget(self.family)
        filters.addWidget(QLabel("Scale:"))
        filters.addWidget(self.scale)

        self.table = QTableWidget(0, len(COLUMNS))
        self.table.setHorizontalHeaderLabels(COLUMNS)
        self.table.setSelectionBehavior(QAbstractItemView.SelectionBehavior.SelectRows)
        self.table.setSelectionMode(QAbstractItemView.SelectionMode.SingleSelection)
        self.table.setEditTriggers(QAbstractItemView.EditTrigger.NoEditTriggers)
        self.table.verticalHeader().hide()
        self.table.setAlternatingRowColors(True)
        self.table.setWordWrap(False)  # one line a model: long names elide, rows stay even
        header = self.table.horizontalHeader()
        header.setSectionResizeMode(0, QHeaderView.ResizeMode.Stretch)
        for column in range(1, len(COLUMNS)):
            header.setSectionResizeMode(column, QHeaderView.ResizeMode.ResizeToContents)
        self.details = QLabel()
        self.details.setWordWrap(True)
        self.details.setTextFormat(Qt.TextFormat.RichText)
        self.details.setOpenExternalLinks(True)  # sample pictures and pages open in a browser
        self.details.setAlignment(Qt.AlignmentFlag.AlignTop | Qt.AlignmentFlag.AlignLeft)
        self.details.setMinimumWidth(260)
        split = QSplitter()
        split.addWidget(self.table)
        split.addWidget(self.details)
        split.setStretchFactor(0, 3)
        split.setStretchFactor(1, 2)

        self.accept_box = QCheckBox()
        self.get_button = QPushButton("Get")
        self.get_button.setDefault(True)
        self.cancel_button = QPushButton("Cancel download")
        self.progress = QProgressBar()
        self.progress.setRange(0, 100)
        self.status = QLabel()
        self.status.setWordWrap(True)
        actions = QHBoxLayout()
        actions.addWidget(self.accept_box)
        actions.addStretch(1)
        actions.addWidget(self.progress, 3)
        actions.addWidget(self.cancel_button)
        actions.addWidget(self.get_button)

        self.dated = QLabel()
        self.refresh_button = QPushButton("Refresh from OpenModelDB")
        self.url = QLineEdit(settings.catalogue_url)
        self.url.setToolTip("The address of OpenModelDB's catalogue (its data API)")
        self.url.setMinimumWidth(260)
        close = QPushButton("Close")
        close.clicked.connect(self.reject)
        footer = QHBoxLayout()
        footer.addWidget(self.dated, 1)
        footer.addWidget(self.url)
        footer.addWidget(self.refresh_button)
        footer.addWidget(close)

        layout = QVBoxLayout(self)
        layout.addLayout(filters)
        layout.addWidget(split, 1)
        layout.addWidget(self.status)
        layout.addLayout(actions)
        layout.addLayout(footer)

        self.search.textChanged.connect(self.fill)
        self.family.currentIndexChanged.connect(self.fill)
        self.scale.currentIndexChanged.connect(self.fill)
        self.table.itemSelectionChanged.connect(self._selected)
        self.accept_box.toggled.connect(self._update_buttons)
        self.get_button.clicked.connect(self.get)
        self.cancel_button.clicked.connect(models.cancel_fetch)
        self.refresh_button.clicked.connect(self.refresh)
        models.fetchStatusChanged.connect(self._on_status)
        # Bound methods only: Qt drops them with the dialog, the controller lives on.
        models.fetchPercentChanged.connect(self._on_percent)
        models.fetchEnded.connect(self._on_ended)
        models.catalogueRefreshed.connect(self._on_refreshed)
        self._running(False)
        self._load(self.snapshot)
        self.resize(1000, 620)

    # -- the list -----------------------------------------------------------------------------
    def _load(self, snapshot: Snapshot) -> None:
        self.snapshot = snapshot
        self._refill_combo(
            self.family,
            [
                (f.value.capitalize(), f)
                for f in Family
                if any(e.family is f for e in snapshot.entries)
            ],
        )
        scales = sorted({e.scale for e in snapshot.entries})
        self._refill_combo(
            self.scale, [(f"×{s}" + (" (restore)" if s == 1 else ""), s) for s in scales]
        )
        shipped = (
            " (shipped with Tessera)"
            if snapshot.path == bundled_snapshot_path()
            else " (your refreshed copy)"
        )
        self.dated.setText(
            f"OpenModelDB catalogue of {snapshot.date or 'unknown date'}: "
            f"{len(snapshot.entries)} ONNX models{shipped}"
        )
        self.fill()

    @staticmethod
    def _refill_combo(combo: QComboBox, items: list[tuple[str, object]]) -> None:
        current = combo.currentData()
        combo.blockSignals(True)
        combo.clear()
        combo.addItem("Any", _ANY)
        for text, data in items:
            combo.addItem(text, data)
        index = combo.findData(current)
        combo.setCurrentIndex(max(index, 0))
        combo.blockSignals(False)

    def fill(self) -> None:
        selected = self.current()
        self.shown = browse(
            self.snapshot,
            family=self.family.currentData(),
            scale=self.scale.currentData(),
            search=self.search.text(),
        )
        table = self.table
        table.setUpdatesEnabled(False)
        table.setRowCount(len(self.shown))
        muted = QBrush(self.palette().color(QPalette.ColorGroup.Disabled, QPalette.ColorRole.Text))
        warn = QBrush(QColor(176, 96, 0))
        for row, e in enumerate(self.shown):
            size = fmt_size(e.size)
            cells = (e.name, e.what, e.architecture, size, e.licence_text)
            for column, text in enumerate(cells):
                item = QTableWidgetItem(text)
                if column == 4 and e.needs_acceptance:
                    item.setForeground(warn)
                if e.file is None and column == 0:
                    item.setForeground(muted)
                    item.setToolTip("Not published as a plain .onnx file: open its page")
                table.setItem(row, column, item)
        table.setUpdatesEnabled(True)
        row = next((n for n, e in enumerate(self.shown) if e == selected), 0)
        if self.shown:
            table.selectRow(row)
        else:
            self.details.setText("No model matches.")
        self._update_buttons()

    def current(self) -> BrowseEntry | None:
        rows = self.table.selectionModel().selectedRows() if self.table.selectionModel() else []
        if not rows or rows[0].row() >= len(self.shown):
            return None
        return self.shown[rows[0].row()]

    def select(self, model_id: str) -> bool:
        for row, e in enumerate(self.shown):
            if e.id == model_id:
                self.table.selectRow(row)
                return True
        return False

    def _selected(self) -> None:
        e = self.current()
        if e is None:
            return
        self.details.setText(describe(e))
        self.accept_box.setChecked(False)
        self.accept_box.setVisible(e.needs_acceptance)
        self.accept_box.setText(
            f"I accept its licence, {e.licence or 'none given'}: no commercial use"
            if e.needs_acceptance
            else ""
        )
        self._update_buttons()

    # -- getting ------------------------------------------------------------------------------
    def get(self) -> None:
        e = self.current()
        if e is None or e.file is None:
            return
        if self.models.fetch_browsed(e, self.accept_box.isChecked()):
            self.getting = e
            self.progress.setValue(0)
            self._running(True)

    def _on_status(self, line: str, running: bool) -> None:
        if self.getting is not None and line:
            self.status.setText(_BAR.sub("", line).strip())  # the bar below shows the share

    def _on_percent(self, percent: float) -> None:
        self.progress.setValue(round(percent))

    def _on_ended(self, ok: bool) -> None:
        if self.getting is None:
            return
        name, self.getting = self.getting.name, None
        self._running(False)
        if ok:
            self.progress.setValue(100)
            self.status.setText(f"{name} is installed: pick it in the model list (Upscale).")

    def _running(self, running: bool) -> None:
        self.progress.setVisible(running)
        self.cancel_button.setVisible(running)
        self._update_buttons()

    def _update_buttons(self) -> None:
        e = self.current()
        busy = self.getting is not None
        ok = (
            e is not None
            and e.file is not None
            and (not e.needs_acceptance or self.accept_box.isChecked())
        )
        self.get_button.setEnabled(ok and not busy)
        if e is not None and e.file is None:
            self.get_button.setToolTip("Not a plain .onnx download: see its page")
        elif e is not None and e.needs_acceptance and not self.accept_box.isChecked():
            self.get_button.setToolTip("Accept its licence first")
        else:
            self.get_button.setToolTip("")

    # -- the catalogue ------------------------------------------------------------------------
    def refresh(self) -> None:
        url = self.url.text().strip()
        self.settings.catalogue_url = url
        self.refresh_button.setEnabled(False)
        self.status.setText(f"Reading the catalogue from {url}…")
        self.models.refresh_catalogue(url)

    def _on_refreshed(self, outcome: object) -> None:
        self.refresh_button.setEnabled(True)
        if isinstance(outcome, Exception):
            self.status.setText(f"The catalogue was not refreshed: {outcome}")
            return
        assert isinstance(outcome, Snapshot)
        self._load(outcome)
        self.status.setText(f"Catalogue refreshed: {len(outcome.entries)} ONNX models.")


def describe(e: BrowseEntry) -> str:
    """The details pane of one model, as rich text with links."""
    parts = [f"<h3>{escape(e.name)}</h3>"]
    by = f" by {escape(e.author)}" if e.author else ""
    parts.append(
        f"<p><b>{escape(e.what)}</b> · {escape(e.architecture)}{by} · {escape(e.date)}</p>"
    )
    if e.purpose:
        parts.append(f"<p>{escape(e.purpose)}</p>")
    licence = escape(e.licence_text)
    if e.needs_acceptance:
        licence = f"<span style='color:#b06000'><b>{licence}</b></span> — accept it to download"
    parts.append(f"<p>Licence: {licence}</p>")
    if e.tags:
        parts.append(f"<p>Tags: {escape(', '.join(e.tags))}</p>")
    chosen = e.file
    if chosen is not None:
        parts.append(
            f"<p>File: {escape(chosen.variant)} ONNX, {escape(fmt_size(chosen.size))}, "
            f"SHA-256 {escape((chosen.sha256 or '')[:16])}…</p>"
        )
    elif e.files:
        url = escape(e.files[0].urls[0], quote=True)
        parts.append(
            f"<p>Published as an archive or on a page, not a plain .onnx: get it from "
            f"<a href='{url}'>its address</a>, then add it with Get… → Add a model file.</p>"
        )
    for n, pic in enumerate(e.images, 1):
        links = []
        if pic.before:
            links.append(f"<a href='{escape(pic.before, quote=True)}'>before</a>")
        after = "after" if pic.before else "picture"
        links.append(f"<a href='{escape(pic.after, quote=True)}'>{after}</a>")
        parts.append(f"<p>Sample {n}: {' / '.join(links)}</p>")
    if e.page:
        parts.append(f"<p><a href='{escape(e.page, quote=True)}'>Its OpenModelDB page</a></p>")
    return "".join(parts)


def open_model_browser(
    models: ModelsController, settings: AppSettings, parent: QWidget | None
) -> ModelBrowser:
    dialog = ModelBrowser(models, settings, parent)
    dialog.setAttribute(Qt.WidgetAttribute.WA_DeleteOnClose)
    dialog.show()
    return dialog
