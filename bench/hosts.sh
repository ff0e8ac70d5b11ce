#!/bin/bash
# Across two hosts (test/hosts/hosts.sh: namespaces joined by veth pairs on
# a bridge), in one run: ntx's tcp domain against libfabric's tcp;ofi_rxm
# and net (1.17's native TCP RDM provider). fi_pingpong, server on host 1
# pinned to CPU 0, client on host 2 pinned to CPU 1; per size the median
# of REPEAT runs of the half round trip, MB/s, and the ratios ntx/other
# (latency: below 1 is better for ntx; bandwidth: above 1 is better).
# Needs root. Environment: SIZES (default "8 1024 65536 1048576"),
# ITERS (default 2000, 200 from 64 KiB), REPEAT (default 3).
set -uo pipefail
top=$(cd "$(dirname "$0")/.." && pwd)
. "$top/test/hosts/hosts.sh"
export FI_PROVIDER_PATH=$top/.libs
sizes=${SIZES:-8 1024 65536 1048576}
repeat=${REPEAT:-3}
trap hosts_down EXIT
hosts_up 2 || exit 1
port=$((20000 + RANDOM % 20000))
# one fi_pingpong: prints "usec MB/s" of its last line
one() { # provider-and-domain options, size, iterations
  local size=$2 it=$3 out
  port=$((port + 1))
  hosts_run 1 timeout 120 taskset -c 0 fi_pingpong $1 -e rdm -m tagged \
    -S "$size" -I "$it" -B "$port" > /dev/null 2>&1 &
  local srv=$!
  hosts_wait_listen 1 "$port" $srv
  out=$(hosts_run 2 timeout 120 taskset -c 1 fi_pingpong $1 -e rdm -m tagged \
    -S "$size" -I "$it" -P "$port" "$(hosts_ip 1)" 2>&1 | tail -n 1)
  wait $srv
  echo "$out" | awk '{print $7, $6}'
}
median() { sort -g | awk '{a[NR] = $0} END {print a[int((NR + 1) / 2)]}'; }
printf "%-9s %-12s %12s %10s %10s %10s\n" size provider "usec/xfer" "MB/s" \
  "lat ntx/x" "bw ntx/x"
for s in $sizes; do
  it=${ITERS:-$([ "$s" -ge 65536 ] && echo 200 || echo 2000)}
  declare -A lat=() bw=()
  for p in "ntx" "tcp;ofi_rxm" "net"; do
    opts="-p $p"; [ $p = ntx ] && opts="-p ntx -d tcp"
    r=$(for ((k = 0; k < repeat; k++)); do one "$opts" "$s" "$it"; done)
    lat[$p]=$(echo "$r" | awk '{print $1}' | median)
    bw[$p]=$(echo "$r" | awk '{print $2}' | median)
  done
  for p in "ntx" "tcp;ofi_rxm" "net"; do
    printf "%-9s %-12s %12s %10s %10s %10s\n" "$s" "$p" "${lat[$p]}" "${bw[$p]}" \
      "$(awk -v a="${lat[ntx]}" -v b="${lat[$p]}" 'BEGIN { if (b > 0) printf "%.2f", a / b; else print "-" }')" \
      "$(awk -v a="${bw[ntx]}" -v b="${bw[$p]}" 'BEGIN { if (b > 0) printf "%.2f", a / b; else print "-" }')"
  done
  unset lat bw
done
