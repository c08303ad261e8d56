"""`python -m gui [FILES…]`: the desktop app."""

from __future__ import annotations

import sys

from gui.app import main

if __name__ == "__main__":
    sys.exit(main())
