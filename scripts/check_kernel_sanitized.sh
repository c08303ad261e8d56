#!/usr/bin/env bash
# The kernel's Python tests with the C kernel built under AddressSanitizer + UBSan: the ctypes
# boundary (slices, strides, kept chains, the streamed rings) as the engine drives it, where
# scripts/check_kernel_builds.sh checks the C side alone. Needs the venv of scripts/test.sh.
#
# The tests run in a copy of the checkout (its tracked and untracked files, no venv), so the
# sanitized library never replaces the one the checkout uses. ASan is preloaded into Python
# (an uninstrumented executable), with libstdc++ (ASan finds __cxa_throw only where it is
# loaded at its start: ORT throws); leaks are not checked (CPython keeps its arenas for good).
# Any sanitizer report aborts the process: the run fails. Exit status: pytest's. The test that
# runs a program under qemu is left out (the preloaded ASan would go into qemu too).
set -euo pipefail
cd "$(dirname "$0")/.."
began=$SECONDS
repo=$PWD
python=$repo/.venv/bin/python
[ -x "$python" ] || { echo "no .venv: run scripts/test.sh first" >&2; exit 2; }

copy=$(mktemp -d)
trap 'rm -rf "$copy"' EXIT
git ls-files -z --cached --others --exclude-standard | xargs -0 cp --parents -t "$copy"

suffix=$("$python" -c 'import importlib.machinery as m; print(m.EXTENSION_SUFFIXES[0])')
gcc -O3 -g -fno-omit-frame-pointer -fsanitize=address,undefined -fno-sanitize-recover=all \
  -Wall -Wextra -Werror -fPIC -shared -pthread engine/runtime/winograd.c \
  -o "$copy/engine/runtime/_winograd$suffix"

cd "$copy"
status=0
LD_PRELOAD="$(gcc -print-file-name=libasan.so) $(gcc -print-file-name=libstdc++.so)" \
ASAN_OPTIONS="detect_leaks=0:abort_on_error=1:log_path=$copy/sanitizer" \
UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1:log_path=$copy/sanitizer" \
PYTHONPATH="$copy" \
  "$python" -m pytest -q -p no:cacheprovider \
  tests/test_winograd.py tests/test_kernel_isas.py tests/test_kernel_safety.py \
  tests/test_kernel_fuzz.py tests/test_convgraph.py \
  --deselect tests/test_kernel_isas.py::test_an_avx2_only_cpu_takes_the_avx2_path "$@" || status=$?
# pytest holds the tests' stderr: a report that killed the process is only in its log.
for log in "$copy"/sanitizer.*; do
  [ -f "$log" ] && head -60 "$log" >&2 && status=${status/#0/1}
done
echo "kernel tests under ASan + UBSan: $((SECONDS - began)) s"
exit "$status"
