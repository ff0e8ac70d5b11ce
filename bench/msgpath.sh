#!/bin/bash
# The provider's own message path (bench/msgpath.c: one process, two
# endpoints, tagged 8-byte messages as Open MPI's ofi MTL sends and
# receives them): nanoseconds per message in windows of 64 and in a
# ping-pong, and per empty fi_cq_read (best of REPEAT), then, with
# valgrind, the instructions of each ntx function and in all per message
# (and per empty poll), from two callgrind runs of WINDOWS and 2*WINDOWS
# windows (the difference leaves start-up out). Instruction counts do
# not drift with the machine: compare builds with them. Environment:
# REPEAT (3), WINDOWS (2000), CALLGRIND (1; 0: skip), PEERS (0: idle
# endpoints connected to both first; more than 4 puts the shm back end
# in its ready-bitmap mode).
set -eu
top=$(cd "$(dirname "$0")/.." && pwd)
out=$top/bench/out
mkdir -p "$out"
[ -e "$top/.libs/libntx-fi.so" ] && export FI_PROVIDER_PATH=$top/.libs
export FI_PROVIDER=ntx
read -ra flags <<< "$(pkg-config --cflags --libs libfabric)"
cc -O2 -g -Wall -o "$out/msgpath" "$top/bench/msgpath.c" "${flags[@]}"
modes="message pingpong empty"
best() { sort -n | head -1; }
for mode in $modes; do
  for ((i = 0; i < ${REPEAT:-3}; i++)); do
    timeout 120 "$out/msgpath" 100000 $mode "${PEERS:-0}" | awk '{ print $2 }'
  done | best | sed "s/^/best ns per $mode: /"
done
[ "${CALLGRIND:-1}" = 0 ] && exit 0
if ! command -v valgrind > /dev/null; then
  echo "valgrind not found: no instruction counts (apt-get install valgrind)"
  exit 0
fi
n=${WINDOWS:-2000}
per_fn() { # callgrind output file -> "function count" lines
  callgrind_annotate --auto=no --threshold=100 "$1" |
    awk '/^ *[0-9,]+ / { v = $1; gsub(",", "", v); f = $0
      sub(/ \[.*/, "", f); sub(/.*:/, "", f); c[f] += v }
      / PROGRAM TOTALS/ { v = $1; gsub(",", "", v); c["(all)"] = v }
      END { for (f in c) print f, c[f] }'
}
for mode in $modes; do
  for w in "$n" $((2 * n)); do
    valgrind --tool=callgrind --callgrind-out-file="$out/msgpath.cg" \
      "$out/msgpath" "$w" $mode "${PEERS:-0}" > /dev/null 2>&1
    per_fn "$out/msgpath.cg" > "$out/msgpath.$w"
  done
  echo "instructions per $mode (callgrind, $n more windows of 64):"
  awk -v m=$((n * 64)) 'NR == FNR { a[$1] = $2; next }
    { printf "%s %.1f\n", $1, ($2 - a[$1]) / m }' \
    "$out/msgpath.$n" "$out/msgpath.$((2 * n))" > "$out/msgpath.d"
  awk '$1 ~ /^ntx_/ && $2 >= 0.5 { printf "  %-28s %7.1f\n", $1, $2 }' \
    "$out/msgpath.d" | sort -k2 -rn
  awk '$1 ~ /^ntx_/ && $2 >= 0.5 { s += $2 } $1 == "(all)" { all = $2 }
    END { printf "  %-28s %7.1f\n  %-28s %7.1f\n", "ntx in all", s,
          "the program in all", all }' "$out/msgpath.d"
done
rm -f "$out/msgpath.cg" "$out/msgpath.d" "$out/msgpath.$n" \
  "$out/msgpath.$((2 * n))"
