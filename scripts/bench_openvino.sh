#!/usr/bin/env bash
# OpenVINO's CPU plugin against Tessera's kernel per instruction set (engine/bench/openvino_cpu.py).
# OpenVINO is an optional measurement, never a dependency of the app: it goes into a venv of
# its own (.ovenv, with numpy and Pillow for the worker), and the bench runs from the project's
# venv with TESSERA_OPENVINO_PYTHON pointing at it. Arguments go to the bench
# (--quick, --rounds N, --models DIR).
set -euo pipefail
cd "$(dirname "$0")/.."
venv=${OPENVINO_VENV:-.ovenv}
if [ ! -x "$venv/bin/python" ]; then
  python3 -m venv "$venv"
  "$venv/bin/pip" install -q openvino numpy pillow
fi
python=${PYTHON:-.venv/bin/python}
[ -x "$python" ] || python=python3
TESSERA_OPENVINO_PYTHON="$PWD/$venv/bin/python" exec "$python" -m engine.bench.openvino_cpu "$@"
