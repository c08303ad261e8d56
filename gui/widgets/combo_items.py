"""Combo boxes whose items carry data and may be greyed out (a device with no working
runtime, a runtime that does not load): adding, choosing by data, falling back."""

from __future__ import annotations

from PySide6.QtCore import Qt
from PySide6.QtGui import QStandardItem, QStandardItemModel
from PySide6.QtWidgets import QComboBox

DATA = Qt.ItemDataRole.UserRole


def add_item(
    combo: QComboBox, text: str, data: object, *, enabled: bool = True, tip: str = ""
) -> None:
    """An item with its data (under `DATA`), greyed out where it cannot be chosen."""
    model = combo.model()
    assert isinstance(model, QStandardItemModel)
    item = QStandardItem(text)
    item.setData(data, DATA)
    item.setEnabled(enabled)
    if tip:
        item.setToolTip(tip)
    model.appendRow(item)


def select_data(combo: QComboBox, data: object) -> bool:
    """Choose the enabled item holding `data`; False where there is none."""
    model = combo.model()
    assert isinstance(model, QStandardItemModel)
    for row in range(combo.count()):
        item = model.item(row)
        if item is not None and item.isEnabled() and item.data(DATA) == data:
            combo.setCurrentIndex(row)
            return True
    return False


def first_enabled(combo: QComboBox) -> None:
    """Choose the first item that can be chosen (none where all are greyed out)."""
    model = combo.model()
    assert isinstance(model, QStandardItemModel)
    for row in range(combo.count()):
        item = model.item(row)
        if item is not None and item.isEnabled():
            combo.setCurrentIndex(row)
            return
    combo.setCurrentIndex(-1)
