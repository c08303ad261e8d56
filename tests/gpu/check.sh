#!/usr/bin/env bash
# The GPU check, prepared to run unattended in about 10 minutes on a machine with an NVIDIA GPU:
#   1. a fresh venv with Tessera and onnxruntime-gpu[cuda,cudnn] (CUDA 13 and cuDNN 9 come as
#      wheels, so only the NVIDIA driver is needed on the machine);
#   2. `python -m engine devices --json`: what ONNX Runtime really gives here (M7);
#   3. the memory contract M1–M5 on the real CUDA provider, no wrappers: pytest -m gpu tests/gpu
#      (with test_shared_arena.py: one arena per device, two sessions used in turn for 10
#      rounds with device memory flat, M6);
#   4. `python -m engine bench --gpu --json`: device memory after load, at the peak and after the
#      operation, with and without the arena shrink, and the GPU result against the CPU's.
#
# Results go to $OUT (default ./gpu-results): environment.txt, devices.json, gpu-tests.txt and
# .xml, memory.json, bench-gpu.txt and .json, each step's .out/.err, and summary.txt with every
# step's exit status and time. The whole check keeps within TIME_LIMIT seconds (default 570).
#
# Usage:  tests/gpu/check.sh
# Environment (all optional):
#   OUT            results folder
#   GPU_VENV       where to create the venv (default ${TMPDIR:-/tmp}/tessera-gpu-venv)
#   PYTHON         interpreter that creates the venv (default python3; needs 3.11+)
#   WHEELS         a folder of wheels: install offline from it (--no-index --find-links); a
#                  wheel too large to carry whole may be there in parts (NAME.whl.part-aa…,
#                  from `split -b 90M NAME.whl NAME.whl.part-`): they are joined first
#   SKIP_INSTALL=1 use $PYTHON as it is (an environment already holding onnxruntime-gpu)
#   FETCH_STARTER=1  fetch the real starter models first, so bench uses animevideov3 ×4
#   TIME_LIMIT     seconds for the whole check (default 570)
set -uo pipefail  # no -e: every step runs, and summary.txt says which failed
cd "$(dirname "$0")/../.."
OUT="${OUT:-$PWD/gpu-results}"
mkdir -p "$OUT"
SUMMARY="$OUT/summary.txt"
: >"$SUMMARY"
status=0

DEADLINE=$((SECONDS + ${TIME_LIMIT:-570}))  # the whole check fits in 10 minutes

step() {  # step NAME SECONDS COMMAND...: run within the time left; NAME.out / NAME.err; record rc
  local name=$1 limit=$2
  shift 2
  local left=$((DEADLINE - SECONDS))
  if [ "$left" -lt "$limit" ]; then limit=$left; fi
  if [ "$limit" -lt 15 ]; then
    echo "$name: unrun, no time left" | tee -a "$SUMMARY"
    status=1
    return 124
  fi
  echo "== $name (limit ${limit}s)"
  local started=$SECONDS
  timeout --kill-after=10 "$limit" "$@" >"$OUT/$name.out" 2>"$OUT/$name.err"
  local rc=$?
  tail -n 30 "$OUT/$name.out"
  [ "$rc" -eq 0 ] || tail -n 15 "$OUT/$name.err"
  echo "$name: rc=$rc in $((SECONDS - started))s" | tee -a "$SUMMARY"
  [ "$rc" -eq 0 ] || status=1
  return "$rc"
}

{
  date -u
  uname -a
  nvidia-smi 2>&1 || echo "nvidia-smi: not found or failed"
} >"$OUT/environment.txt"
if ! nvidia-smi -L >/dev/null 2>&1; then
  echo "unrun: no NVIDIA GPU answers nvidia-smi on this machine" | tee -a "$SUMMARY"
  exit 2
fi

PYTHON="${PYTHON:-python3}"
if [ -n "${WHEELS:-}" ] && compgen -G "$WHEELS/*.part-*" >/dev/null; then
  JOINED="${TMPDIR:-/tmp}/tessera-gpu-wheels"
  step join-wheels 120 tests/gpu/join_wheels.sh "$WHEELS" "$JOINED" && WHEELS="$JOINED"
fi
if [ "${SKIP_INSTALL:-0}" = "1" ]; then
  PY="$PYTHON"
else
  VENV="${GPU_VENV:-${TMPDIR:-/tmp}/tessera-gpu-venv}"
  export PYTHON VENV WHEELS="${WHEELS:-}"
  install() {
    set -e
    "$PYTHON" -m venv --clear "$VENV"
    local pip=("$VENV/bin/python" -m pip install --progress-bar off --disable-pip-version-check)
    if [ -n "$WHEELS" ]; then pip+=(--no-index --find-links "$WHEELS"); fi
    # The project's runtime dependencies with the CUDA wheels, but not PySide6: the check
    # needs no GUI. Never the CPU `onnxruntime` package: it shares onnxruntime-gpu's folder.
    "${pip[@]}" "onnxruntime-gpu[cuda,cudnn]>=1.20" "numpy>=1.26" "Pillow>=10.3" "onnx>=1.16" \
      "nvidia-ml-py>=12.535" "psutil>=5.9" "pytest>=8"
    # The project itself; PYTHONPATH covers it should the build backend be out of reach offline.
    "${pip[@]}" --no-deps -e . || echo "editable install failed; running from the checkout" >&2
    if "$VENV/bin/python" -m pip show onnxruntime >/dev/null 2>&1; then
      echo "the CPU onnxruntime package got installed beside onnxruntime-gpu" >&2
      exit 1
    fi
  }
  export -f install
  if ! step install 360 bash -c install; then
    echo "install failed: see $OUT/install.err" | tee -a "$SUMMARY"
    exit 1
  fi
  PY="$VENV/bin/python"
fi
"$PY" -m pip freeze 2>/dev/null | grep -iE "onnx|nvidia|numpy|pillow|psutil|pytest" >>"$OUT/environment.txt"

export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
export ORT_LOGGING_LEVEL=3
MODELS="$(mktemp -d)"  # an empty models folder unless the starter models are fetched
export TESSERA_MODELS_DIR="$MODELS"
if [ "${FETCH_STARTER:-0}" = "1" ]; then
  step fetch-starter 240 "$PY" -m engine models fetch-starter
fi

step devices 60 "$PY" -m engine devices --json && cp "$OUT/devices.out" "$OUT/devices.json"
# The GPUs as the set-up sees them (NVML, the driver's files) and the runtime it would install.
step runtime-setup 60 "$PY" -m engine.runtime.runtime_setup --dry-run

step gpu-tests 240 "$PY" -m pytest -q -m gpu tests/gpu -rA -p no:cacheprovider \
  --junitxml="$OUT/gpu-tests.xml"
cp "$OUT/gpu-tests.out" "$OUT/gpu-tests.txt"
if ! grep -q " passed" "$OUT/gpu-tests.out"; then
  echo "gpu-tests: nothing passed (all skipped: no working CUDA provider?)" | tee -a "$SUMMARY"
  status=1
fi

# What every process on the GPU holds, as `engine memory` sees it through NVML.
step memory 30 "$PY" -m engine memory --json && cp "$OUT/memory.out" "$OUT/memory.json"

step bench-gpu 180 "$PY" -m engine bench --gpu --json
cp "$OUT/bench-gpu.out" "$OUT/bench-gpu.json"  # with --json, stdout holds the JSON alone
cp "$OUT/bench-gpu.err" "$OUT/bench-gpu.txt"   # and stderr the printed table
cat "$OUT/bench-gpu.txt"

rm -rf "$MODELS"
echo "results in $OUT"
held=$(grep -c "rc=0 " "$SUMMARY" || true)
failed=$(grep -vc "rc=0 " "$SUMMARY" || true)
echo "summary: $held steps held, $failed did not" | tee -a "$SUMMARY"
cat "$SUMMARY"
exit "$status"
