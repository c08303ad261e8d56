"""`python -m engine …` and the `tessera-engine` command: stop signals are handled from the
first instruction (engine/stopping.py), before the command line's imports."""

import sys

from engine.stopping import stop_quietly_until_ready

stop_quietly_until_ready()


def run() -> int:
    from engine.cli import main

    return main()


if __name__ == "__main__":
    sys.exit(run())
