#!/usr/bin/env bash
# Install Tessera into .venv, build the offline starter models (once) and start the app.
set -euo pipefail
cd "$(dirname "$0")/.."
python3 -m venv .venv
.venv/bin/python -m pip install -q --upgrade pip
.venv/bin/python -m pip install -q -e .
.venv/bin/python -m engine models fetch-starter
exec .venv/bin/python -m gui "$@"
