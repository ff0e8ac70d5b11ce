#!/bin/bash
# Auto progress against manual progress in the same run (8-byte ping-pong,
# best of REPEAT), with the ratio auto/manual.
set -eu
top=$(cd "$(dirname "$0")/.." && pwd)
mkdir -p "$top/bench/out"
[ -e "$top/.libs/libntx-fi.so" ] && export FI_PROVIDER_PATH=$top/.libs
cc -O2 -Wall -o "$top/bench/out/progress_pingpong" "$top/bench/progress_pingpong.c" \
  $(pkg-config --cflags --libs libfabric)
best() { sort -n | head -1; }
m=() a=()
for ((i = 0; i < ${REPEAT:-3}; i++)); do
  out=$(timeout 120 "$top/bench/out/progress_pingpong" "${ITERS:-200000}")
  echo "$out"
  m+=("$(awk '/^manual/ { print $5 }' <<< "$out")")
  a+=("$(awk '/^auto/ { print $5 }' <<< "$out")")
done
bm=$(printf '%s\n' "${m[@]}" | best); ba=$(printf '%s\n' "${a[@]}" | best)
echo "best: manual $bm us, auto $ba us, auto/manual $(awk "BEGIN { printf \"%.2f\", $ba / $bm }")"
