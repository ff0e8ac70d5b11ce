#!/bin/bash
# What the quiet poll path adds to a peer's first message (bench/idle_wake.c):
# an 8-byte ping-pong through the tcp back end, back to back and after
# GAP_MS (default 5) of polling silence, both processes pinned to CPUS
# (default 0,1); REPEAT (default 3) runs.
set -eu
top=$(cd "$(dirname "$0")/.." && pwd)
mkdir -p "$top/bench/out"
[ -e "$top/.libs/libntx-fi.so" ] && export FI_PROVIDER_PATH=$top/.libs
cc -O2 -Wall -o "$top/bench/out/idle_wake" "$top/bench/idle_wake.c" \
  $(pkg-config --cflags --libs libfabric)
for ((i = 0; i < ${REPEAT:-3}; i++)); do
  timeout 120 taskset -c "${CPUS:-0,1}" "$top/bench/out/idle_wake" \
    "${ITERS:-300}" "${GAP_MS:-5}"
done
