#!/bin/bash
# Runs inside the rxe guest (bench/rxe-pingpong.sh boots it): fi_pingpong
# over ntx's rxe0 domain (local peers forced through the device) and over
# libfabric's own verbs;ofi_rxm on the same device, in the same boot, and
# prints both with the ratios ntx/rxm. Environment: SIZES, ITERS, MODES.
set -u
: "${SIZES:=8 1024 8192 65536 1048576}"
: "${MODES:=msg tagged}"
: "${ITERS:=200}"
ulimit -l unlimited
ip=10.11.12.1
port=9300
out=/tmp/rxe-bench.csv
echo "provider,mode,size,usec,mbps" > "$out"

run() { # provider mode size -> "usec mbps"
  local prov=$1 mode=$2 size=$3 line dom=() env=()
  case $prov in
    ntx) dom=(-d rxe0); env=(FI_NTX_LOCAL_VIA_NETWORK=1) ;;
    *) env=(FI_UNIVERSE_SIZE=64) ;;
  esac
  port=$((port + 1))
  env "${env[@]}" timeout 300 fi_pingpong -p "$prov" "${dom[@]}" -e rdm \
    -m "$mode" -S "$size" -I "$ITERS" -B "$port" > /dev/null 2>&1 &
  local srv=$!
  # the client retries until the server listens (no sleep as a wait)
  for _ in $(seq 1 100); do
    line=$(env "${env[@]}" timeout 300 fi_pingpong -p "$prov" "${dom[@]}" \
      -e rdm -m "$mode" -S "$size" -I "$ITERS" -P "$port" "$ip" 2>/dev/null |
      awk 'NR > 1 && NF >= 8 { print $(NF-1), $(NF-2) }' | tail -1)
    [ -n "$line" ] && break
    kill -0 "$srv" 2>/dev/null || break
  done
  wait "$srv"
  echo "${line:-nan nan}"
}

for mode in $MODES; do
  for size in $SIZES; do
    for prov in ntx "verbs;ofi_rxm"; do
      read -r us bw < <(run "$prov" "$mode" "$size")
      echo "$prov,$mode,$size,$us,$bw" >> "$out"
    done
  done
done
awk -F, 'NR > 1 { us[$1","$2","$3] = $4; bw[$1","$2","$3] = $5;
                 if (!seen[$2","$3]++) order[++n] = $2","$3 }
  function r(a, b) { return (a == "nan" || b == "nan" || b == 0) ? "  n/a" : sprintf("%5.2f", a / b) }
  END {
    printf "%-7s %8s | %10s %10s | %9s %9s | %7s %7s\n", "mode", "size",
      "ntx us", "rxm us", "ntx MB/s", "rxm MB/s", "lat/rxm", "bw/rxm"
    for (i = 1; i <= n; i++) {
      split(order[i], k, ",")
      a = "ntx," order[i]; t = "verbs;ofi_rxm," order[i]
      printf "%-7s %8s | %10s %10s | %9s %9s | %7s %7s\n", k[1], k[2],
        us[a], us[t], bw[a], bw[t], r(us[a], us[t]), r(bw[a], bw[t])
    }
  }' "$out"
