"""`python -m gui [FILES…]` and the `tessera` command: the desktop app. Stop signals are
handled from the first instruction (engine/stopping.py), before Qt is imported."""

from __future__ import annotations

import sys

from engine.stopping import stop_quietly_until_ready

stop_quietly_until_ready()


def run() -> int:
    from gui.app import main

    return main()


if __name__ == "__main__":
    sys.exit(run())
