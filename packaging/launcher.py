"""Entry point of the frozen app: PyInstaller runs this file as `__main__`.

`--self-test` is answered here, before Qt, the single instance or the GUI modules load, so a
broken GUI dependency still gets a clear message from the self-test; gui.app.main() answers
it the same way for `python -m gui --self-test`.
"""

from __future__ import annotations

import sys


def main() -> int:
    args = sys.argv[1:]
    if "--self-test" in args and args[:1] != ["--engine"]:
        from gui.self_test import run_self_test

        return run_self_test()
    from gui.app import main as app_main

    return int(app_main() or 0)


if __name__ == "__main__":
    sys.exit(main())
