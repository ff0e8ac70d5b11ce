#!/bin/bash
# Runs in both guests of bench/rxe-two-hosts.sh (test/rxe/run-rxe-two-hosts.sh
# boots them): fi_pingpong across the two soft-RoCE hosts, ntx's rxe0
# against libfabric's verbs;ofi_rxm, server on guest a, client on guest b.
# Guest b prints per mode and size the median over REPEAT runs of the half
# round trip and MB/s, and the ratios ntx/rxm (latency: below 1 is better
# for ntx; bandwidth: above 1). Environment: SIZES, MODES, ITERS (default
# 50, 10 from 1 MiB), REPEAT (default 3).
set -u
. "$TOP/test/rxe/jobs/job-lib.sh"   # log mark await wait_listen AWK_MEDIANS
: "${SIZES:=8 1024 8192 65536 1048576}"
: "${MODES:=tagged msg}"
: "${REPEAT:=3}"
SCALE=${RXE_TIME_SCALE:-1}
TMO=$((120 * SCALE))
out=$RUN/bench.csv
port=47500
trap 'mark gone' EXIT

one() { # provider mode size iterations: one run; b appends "usec MB/s"
  local prov=$1 mode=$2 size=$3 it=$4 opts=() env=() pid line
  case $prov in
    ntx) opts=(-p ntx -d rxe0) ;;
    *) opts=(-p "$prov"); env=(FI_UNIVERSE_SIZE=64) ;;   # rxe's CQ size
  esac
  opts+=(-e rdm -m "$mode" -S "$size" -I "$it")
  port=$((port + 1))
  if [ "$ROLE" = a ]; then
    env "${env[@]}" timeout "$TMO" fi_pingpong "${opts[@]}" -B "$port" > /dev/null 2>&1 &
    pid=$!
    wait_listen "$port" "$pid" "$TMO"; mark "b$port"
    wait "$pid" || log "server $prov $mode $size failed"
  else
    await "b$port" "$TMO" || return 1
    line=$(env "${env[@]}" timeout "$TMO" fi_pingpong "${opts[@]}" -P "$port" "$PEER" \
             2>/dev/null | awk 'NF >= 8 && $1 ~ /^[0-9]/ { print $(NF-1), $(NF-2) }' | tail -n 1)
    echo "$prov,$mode,$size,${line:-nan nan}" >> "$out"
  fi
  mark "e$port"; await "e$port" "$TMO"   # the next run starts on both sides
}

mark up; await up $((120 * SCALE)) || exit 1
[ "$ROLE" = b ] && echo "provider,mode,size,result" > "$out"
for mode in $MODES; do
  for size in $SIZES; do
    it=${ITERS:-$([ "$size" -ge 1048576 ] && echo 10 || echo 50)}
    for ((k = 0; k < REPEAT; k++)); do
      for prov in ntx "verbs;ofi_rxm"; do one "$prov" "$mode" "$size" "$it"; done
    done
  done
done
echo; log "===== SUMMARY (guest $ROLE)"
[ "$ROLE" = a ] && { echo "  servers only: guest b has the figures"; exit 0; }
echo "  medians of $REPEAT runs; lat/rxm below 1 and bw/rxm above 1 favour ntx"
tr ' ' ',' < "$out" | awk -F, "$AWK_MEDIANS"'
  NR > 1 && $4 != "nan" { k = $1 SUBSEP $2 SUBSEP $3; n[k]++; us[k, n[k]] = $4; bw[k, n[k]] = $5
                          if (!seen[$2, $3]++) order[++m] = $2 SUBSEP $3 }
  function r(x, y) { return ratio(x, y, "%.2f") }
  END {
    printf "%-7s %8s | %10s %10s | %9s %9s | %7s %7s\n", "mode", "size",
      "ntx us", "rxm us", "ntx MB/s", "rxm MB/s", "lat/rxm", "bw/rxm"
    for (i = 1; i <= m; i++) {
      split(order[i], kk, SUBSEP)
      a = "ntx" SUBSEP order[i]; t = "verbs;ofi_rxm" SUBSEP order[i]
      la = med(a, us); lt = med(t, us); ba = med(a, bw); bt = med(t, bw)
      printf "%-7s %8s | %10s %10s | %9s %9s | %7s %7s\n", kk[1], kk[2],
        la, lt, ba, bt, r(la, lt), r(ba, bt)
    }
  }'
