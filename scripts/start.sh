#!/usr/bin/env bash
# Install Tessera into .venv with the runtime that serves this machine's GPUs, build the offline
# starter models (once) and start the app.
#   ./scripts/start.sh [--runtime auto|cpu|cuda|cuda12|openvino|migraphx|directml] [app options]
# --runtime cpu installs no GPU runtime; the default (auto) picks one from the GPUs found
# (engine/runtime/runtime_setup.py, pinned in resources/runtimes.json). A second start installs
# nothing again.
set -euo pipefail
cd "$(dirname "$0")/.."
runtime=auto
args=()
while [ $# -gt 0 ]; do
  case "$1" in
    --runtime) runtime="${2:?--runtime needs a value}"; shift 2 ;;
    --runtime=*) runtime="${1#--runtime=}"; shift ;;
    *) args+=("$1"); shift ;;
  esac
done
[ -x .venv/bin/python ] || python3 -m venv .venv
# Tessera itself only when pyproject.toml changed since the last start: pip would otherwise
# bring back onnxruntime-gpu where a replacing runtime (MIGraphX, DirectML) removed it.
stamp=.venv/tessera-pyproject.sha256
if ! sha256sum -c --status "$stamp" 2>/dev/null; then
  .venv/bin/python -m pip install -q --upgrade pip
  # setuptools warns about editable installs on every build; the warning is not for our users.
  PYTHONWARNINGS=ignore .venv/bin/python -m pip install -q -e .
  sha256sum pyproject.toml >"$stamp"
fi
# The GPU runtime: never fatal (offline, it names the pip command and Tessera runs on the CPU).
.venv/bin/python -m engine.runtime.runtime_setup --runtime "$runtime" || true
# Qt's window system plugin needs system libraries pip cannot install: name the missing ones and
# the command that installs them, rather than Qt's "could not load the Qt platform plugin".
scripts/check_qt_libs.sh .venv/bin/python || exit 1
.venv/bin/python -m engine models fetch-starter
# Bytecode now, not at each start: where PYTHONDONTWRITEBYTECODE is set the sources would be
# compiled again every time (about 0.1 s of each start).
.venv/bin/python -m compileall -q engine gui >/dev/null
exec .venv/bin/python -m gui ${args[@]+"${args[@]}"}
