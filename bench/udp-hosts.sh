#!/bin/bash
# Across two hosts (test/hosts/hosts.sh: namespaces joined by veth pairs on
# a bridge), in one run: ntx's udp domain against libfabric's udp;ofi_rxd
# (reliable datagrams over UDP) and tcp;ofi_rxm, with no loss and with
# LOSS % of the packets dropped by nftables on both hosts. fi_pingpong,
# server on host 1 pinned to CPU 0, client on host 2 pinned to CPU 1; per
# size the median of REPEAT runs of the half round trip, MB/s, and the
# ratios ntx/rxd and ntx/rxm (latency: below 1 is better for ntx;
# bandwidth: above 1 is better). A run that does not finish in TMO seconds
# prints "-" and counts in the "failed" column (the medians are of the runs
# that finished). Needs root. Environment: SIZES (default "8 65536 1048576"),
# ITERS (default 1000, 100 from 64 KiB, 20 from 1 MiB), REPEAT (default
# 1), LOSS (default 5), TMO (default 60).
set -uo pipefail
top=$(cd "$(dirname "$0")/.." && pwd)
. "$top/test/hosts/hosts.sh"
export FI_PROVIDER_PATH=$top/.libs
sizes=${SIZES:-8 65536 1048576}
repeat=${REPEAT:-1}
loss=${LOSS:-5}
tmo=${TMO:-60}
provs=("ntx" "udp;ofi_rxd" "tcp;ofi_rxm")
trap hosts_down EXIT
hosts_up 2 || exit 1
port=$((20000 + RANDOM % 20000))

# one fi_pingpong: prints "usec MB/s" of its last line, "- -" if it failed
one() { # provider-and-domain options, size, iterations
  local size=$2 it=$3 out rc
  port=$((port + 1))
  hosts_run 1 timeout "$tmo" taskset -c 0 fi_pingpong $1 -e rdm -m tagged \
    -S "$size" -I "$it" -B "$port" > /dev/null 2>&1 &
  local srv=$!
  hosts_wait_listen 1 "$port" $srv
  out=$(hosts_run 2 timeout "$tmo" taskset -c 1 fi_pingpong $1 -e rdm \
    -m tagged -S "$size" -I "$it" -P "$port" "$(hosts_ip 1)" 2>&1 | tail -n 1)
  rc=$?
  wait $srv
  if [ $rc = 0 ] && [[ "$out" =~ ^[0-9] ]]; then
    echo "$out" | awk '{print $7, $6}'
  else
    echo "- -"
  fi
}
# the median of the runs that finished ("-" if none did): a failed run is
# no figure, neither the best nor the worst
median() { grep -v '^-$' | sort -g |
  awk '{a[NR] = $0} END {print NR ? a[int((NR + 1) / 2)] : "-"}'; }
ratio() { awk -v a="$1" -v b="$2" \
  'BEGIN { if (a != "-" && b != "-" && b > 0) printf "%.2f", a / b; else print "-" }'; }

drop() { # percent dropped on both hosts' output (0: none)
  local i
  for i in 1 2; do
    hosts_nft_clear "$i"
    [ "$1" = 0 ] || hosts_nft "$i" \
      "ip daddr $HOSTS_NET.0/24 numgen random mod 100 < $1 drop" || return 1
  done
}

printf "%-5s %-9s %-12s %12s %10s %6s %9s %9s %9s %9s\n" loss size provider \
  "usec/xfer" "MB/s" failed "lat/rxd" "bw/rxd" "lat/rxm" "bw/rxm"
for l in 0 "$loss"; do
  drop "$l" || { echo "nftables rules failed"; exit 1; }
  for s in $sizes; do
    it=${ITERS:-$( ( [ "$s" -ge 1048576 ] && echo 20 ) ||
                   ( [ "$s" -ge 65536 ] && echo 100 ) || echo 1000)}
    declare -A lat=() bw=() bad=()
    for p in "${provs[@]}"; do
      opts="-p $p"; [ "$p" = ntx ] && opts="-p ntx -d udp"
      r=$(for ((k = 0; k < repeat; k++)); do one "$opts" "$s" "$it"; done)
      lat[$p]=$(echo "$r" | awk '{print $1}' | median)
      bw[$p]=$(echo "$r" | awk '{print $2}' | median)
      bad[$p]=$(echo "$r" | grep -c '^- -$')
    done
    # the ratios on ntx's row
    printf "%-5s %-9s %-12s %12s %10s %6s %9s %9s %9s %9s\n" "$l%" "$s" ntx \
      "${lat[ntx]}" "${bw[ntx]}" "${bad[ntx]}/$repeat" \
      "$(ratio "${lat[ntx]}" "${lat[udp;ofi_rxd]}")" \
      "$(ratio "${bw[ntx]}" "${bw[udp;ofi_rxd]}")" \
      "$(ratio "${lat[ntx]}" "${lat[tcp;ofi_rxm]}")" \
      "$(ratio "${bw[ntx]}" "${bw[tcp;ofi_rxm]}")"
    for p in "${provs[@]:1}"; do
      printf "%-5s %-9s %-12s %12s %10s %6s\n" "$l%" "$s" "$p" "${lat[$p]}" \
        "${bw[$p]}" "${bad[$p]}/$repeat"
    done
    unset lat bw bad
  done
done
drop 0
