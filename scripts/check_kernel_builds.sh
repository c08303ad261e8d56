#!/usr/bin/env bash
# Tessera's CPU kernel (engine/runtime/winograd.c) where it ships, not only on this machine:
#  - cross-compiled for Windows x64 (MinGW-w64) and built with clang (no target_clones there);
#  - built for Linux aarch64 and its check (tests/kernel/winograd_check.c: every instruction
#    set against a float64 convolution) run under qemu-aarch64 (the NEON path);
#  - the check run on an AVX2-only x86 CPU under `qemu-x86_64 -cpu Haswell`, which must pick
#    the AVX2 path by itself;
#  - the check built with AddressSanitizer and UBSan, and with ThreadSanitizer, and run on
#    this CPU's every set.
# Installs the Debian packages it needs (CI has apt). Exit status: 0 when all held.
set -euo pipefail
cd "$(dirname "$0")/.."
began=$SECONDS

need=()
for pkg in gcc gcc-mingw-w64-x86-64 gcc-aarch64-linux-gnu libc6-arm64-cross qemu-user clang; do
  dpkg -s "$pkg" >/dev/null 2>&1 || need+=("$pkg")
done
if [ ${#need[@]} -gt 0 ]; then
  SUDO=""
  [ "$(id -u)" -ne 0 ] && SUDO="sudo"
  ($SUDO apt-get update -qq && DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${need[@]}") >/dev/null
fi

src=engine/runtime/winograd.c
check=tests/kernel/winograd_check.c
warn=(-Wall -Wextra -Werror -Iengine/runtime)
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT

step() { printf '== %s\n' "$*"; }

step "Windows x64 (MinGW-w64): the DLL and the check"
x86_64-w64-mingw32-gcc -O3 "${warn[@]}" -shared "$src" -o "$out/_winograd.pyd"
x86_64-w64-mingw32-gcc -O2 "${warn[@]}" "$check" "$src" -o "$out/check.exe"

step "clang: the library and the check, run on this CPU"
clang -O3 "${warn[@]}" -fPIC -shared -pthread "$src" -o "$out/libclang.so"
clang -O2 "${warn[@]}" -pthread "$check" "$src" -lm -o "$out/check-clang"
"$out/check-clang"

step "Linux aarch64: built, run under qemu-aarch64"
aarch64-linux-gnu-gcc -O3 "${warn[@]}" -fPIC -shared -pthread "$src" -o "$out/libarm.so"
aarch64-linux-gnu-gcc -O2 "${warn[@]}" -pthread "$check" "$src" -lm -o "$out/check-arm"
qemu-aarch64 -L /usr/aarch64-linux-gnu "$out/check-arm" --expect neon

step "x86-64 with AVX2 and no AVX-512 (qemu-x86_64 -cpu Haswell): the AVX2 path is taken"
gcc -O2 "${warn[@]}" -pthread "$check" "$src" -lm -o "$out/check"
# TCG warns once a thread about the CPUID bits it does not emulate (pcid, TSX...): not ours.
if ! qemu-x86_64 -cpu Haswell "$out/check" --expect avx2 2>"$out/haswell.err"; then
  grep -v "TCG doesn't support" "$out/haswell.err" >&2
  exit 1
fi

step "AddressSanitizer + UBSan on this CPU, every set"
gcc -O1 -g -fno-omit-frame-pointer -fsanitize=address,undefined -fno-sanitize-recover=all \
  "${warn[@]}" -pthread "$check" "$src" -lm -o "$out/check-asan"
"$out/check-asan"

step "ThreadSanitizer on this CPU: the chain's threads take each other's shares"
gcc -O1 -g -fsanitize=thread "${warn[@]}" -pthread "$check" "$src" -lm -o "$out/check-tsan"
"$out/check-tsan"

step "kernel builds and checks held in $((SECONDS - began)) s"
