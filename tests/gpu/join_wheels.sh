#!/usr/bin/env bash
# join_wheels.sh SRC DST: copy the wheels of SRC into DST, joining any wheel that was split into
# parts to pass size limits (NAME.whl.part-aa, NAME.whl.part-ab…: `split -b 90M NAME.whl
# NAME.whl.part-`), in the parts' name order. Prints what it joined.
set -euo pipefail
src=$1 dst=$2
mkdir -p "$dst"
shopt -s nullglob
for whl in "$src"/*.whl; do cp -f "$whl" "$dst/"; done
declare -A seen=()
for part in "$src"/*.whl.part-*; do
  name=$(basename "${part%.part-*}")
  [ -n "${seen[$name]:-}" ] && continue
  seen[$name]=1
  # The glob sorts by name: part-aa, part-ab, … is the order split wrote them in.
  cat "$src/$name".part-* >"$dst/$name.tmp"
  mv "$dst/$name.tmp" "$dst/$name"
  echo "joined $name from $(ls "$src/$name".part-* | wc -l) parts"
done
