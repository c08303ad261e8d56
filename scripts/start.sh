#!/usr/bin/env bash
# Install Tessera into .venv, build the offline starter models (once) and start the app.
set -euo pipefail
cd "$(dirname "$0")/.."
python3 -m venv .venv
.venv/bin/python -m pip install -q --upgrade pip
# setuptools warns about editable installs on every build; the warning is not for our users.
PYTHONWARNINGS=ignore .venv/bin/python -m pip install -q -e .
# Qt's window system plugin needs system libraries pip cannot install: name the missing ones and
# the command that installs them, rather than Qt's "could not load the Qt platform plugin".
scripts/check_qt_libs.sh .venv/bin/python || exit 1
.venv/bin/python -m engine models fetch-starter
# Bytecode now, not at each start: where PYTHONDONTWRITEBYTECODE is set the sources would be
# compiled again every time (about 0.1 s of each start).
.venv/bin/python -m compileall -q engine gui >/dev/null
exec .venv/bin/python -m gui "$@"
