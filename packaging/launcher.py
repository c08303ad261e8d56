"""Entry point of the frozen app: PyInstaller runs this file as `__main__`.

Dispatched here, before Qt or any GUI module loads:
- `--engine ARGS` is `python -m engine ARGS` (the frozen app has no `-m`; the model fetcher
  runs the engine CLI this way), so the GUI's import graph never holds the CLI or the bench;
- `--self-test`, so a broken GUI dependency still gets a clear message from the self-test;
  gui.app.main() answers it the same way for `python -m gui --self-test`.
"""

from __future__ import annotations

import sys

from engine.stopping import stop_quietly_until_ready

stop_quietly_until_ready()  # a Ctrl-C while Qt or onnx import: quiet, not a traceback


def main() -> int:
    args = sys.argv[1:]
    if args[:1] == ["--engine"]:
        from engine.cli import main as engine_main

        return int(engine_main(args[1:]) or 0)
    if "--self-test" in args:
        from gui.self_test import run_self_test

        return run_self_test()
    from gui.app import main as app_main

    return int(app_main() or 0)


if __name__ == "__main__":
    sys.exit(main())
