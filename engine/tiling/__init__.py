"""Tiles: where they go (`plan`) and how they are put back together (`assembly`). Pure numpy."""
