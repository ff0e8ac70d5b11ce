#!/bin/bash
# Ping-pong benchmark: fi_pingpong -e rdm (msg and tagged) for ntx and for
# libfabric's own shm and tcp;ofi_rxm providers, in one run, server and
# client pinned to separate cores. Prints latency and bandwidth per size
# with the ratios ntx/shm and ntx/(tcp;ofi_rxm), and beside them what a
# copy of that size reaches on the same cores in the same run
# (bench/memcpy_bw.c, MB/s as fi_pingpong's, 1e6 bytes/s): "memcpy", one
# thread on the client CPU copying a buffer warm in its cache, best of 15
# batches; "xcore", the client CPU copying a buffer the server CPU has just
# written (the copy a transfer between two processes cannot avoid), best of
# 50 to 2000 copies; with the ratios bw/memcpy and bw/xcore of ntx's
# bandwidth. Under the table, "line": how long a cache line written on one
# of the two CPUs takes to be seen on the other (best, one way), the
# least time any message between them takes. Writes bench/out/results.csv
# (rows of providers "memcpy" and "xcore" with mode "copy": usec is one
# copy's time) and, with gnuplot, bench/out/pingpong.png (the copies in
# the bandwidth panel).
# Environment: SIZES, PROVIDERS, MODES, REPEAT (best of N runs, default 3),
# SERVER_CPU/CLIENT_CPU (default 0/1; the copies' writer and reader). An
# uninstalled build is used when .libs/libntx-fi.so exists next to this
# script's repository.
set -u
top=$(cd "$(dirname "$0")/.." && pwd)
out=$top/bench/out
mkdir -p "$out"
[ -e "$top/.libs/libntx-fi.so" ] && export FI_PROVIDER_PATH=$top/.libs
SIZES=${SIZES:-"8 64 1024 8192 16384 32768 65536 131072 262144 1048576 4194304"}
PROVIDERS=${PROVIDERS:-"ntx shm tcp;ofi_rxm"}
MODES=${MODES:-"msg tagged"}
REPEAT=${REPEAT:-3}
SCPU=${SERVER_CPU:-0}
CCPU=${CLIENT_CPU:-1}
port=$((30000 + RANDOM % 20000))
csv=$out/results.csv
echo "provider,mode,size,usec,mbps" > "$csv"

iters() { # fewer iterations for big messages
  if [ "$1" -ge 1048576 ]; then echo 200; elif [ "$1" -ge 65536 ]; then echo 2000
  elif [ "$1" -ge 16384 ]; then echo 10000; else echo 20000; fi
}

run_one() { # provider mode size -> "usec mbps" (best of REPEAT)
  local prov=$1 mode=$2 size=$3 best_us= best_bw= i line
  for ((i = 0; i < REPEAT; i++)); do
    port=$((port + 1))
    timeout 120 taskset -c "$SCPU" fi_pingpong -p "$prov" -e rdm -m "$mode" \
      -S "$size" -I "$(iters "$size")" -B "$port" > /dev/null 2>&1 &
    local srv=$!
    sleep 0.3
    line=$(timeout 120 taskset -c "$CCPU" fi_pingpong -p "$prov" -e rdm \
      -m "$mode" -S "$size" -I "$(iters "$size")" -P "$port" 127.0.0.1 \
      2>/dev/null | awk 'NR > 1 && NF >= 8 { print $(NF-1), $(NF-2) }' | tail -1)
    wait "$srv"
    [ -n "$line" ] || continue
    set -- $line
    if [ -z "$best_us" ] || awk "BEGIN { exit !($1 < $best_us) }"; then
      best_us=$1 best_bw=$2
    fi
  done
  echo "${best_us:-nan} ${best_bw:-nan}"
}

# memcpy and cross-core copy of each size: "memcpy,copy,size,usec,mbps" and
# "xcore,copy,size,usec,mbps", usec being the time of one copy
rm -f "$out/copies.txt"
if cc -O2 -Wall -pthread -o "$out/memcpy_bw" "$top/bench/memcpy_bw.c"; then
  timeout 300 "$out/memcpy_bw" "$SCPU" "$CCPU" $SIZES | tee "$out/copies.txt" |
    awk 'function us(s, mbps) { return mbps > 0 ? sprintf("%.4f", s / mbps) : "nan" }
      $1 !~ /^#/ && NF == 3 {
        print "memcpy,copy," $1 "," us($1, $2) "," $2
        print "xcore,copy," $1 "," us($1, $3) "," $3 }' >> "$csv"
else
  echo "pingpong.sh: could not build bench/memcpy_bw.c: no copy columns" >&2
fi

for mode in $MODES; do
  for size in $SIZES; do
    for prov in $PROVIDERS; do
      read -r us bw < <(run_one "$prov" "$mode" "$size")
      echo "$prov,$mode,$size,$us,$bw" >> "$csv"
    done
  done
done

# table with ratios
awk -F, 'NR > 1 && $2 == "copy" { cbw[$1","$3] = $5; next }
  NR > 1 { us[$1","$2","$3] = $4; bw[$1","$2","$3] = $5;
                 if (!seen[$2","$3]++) order[++n] = $2","$3 }
  function r(a, b) { return (a == "nan" || b == "nan" || b == 0) ? "  n/a" : sprintf("%5.2f", a / b) }
  function r3(a, b) { return (a == "" || b == "" || a == "nan" || b == "nan" || b == 0) ? "n/a" : sprintf("%.3g", a / b) }
  END {
    printf "%-7s %9s | %9s %9s %9s | %9s %9s %9s | %11s %10s | %7s %7s %7s %7s %9s %8s\n", "mode", "size",
      "ntx us", "shm us", "rxm us", "ntx MB/s", "shm MB/s", "rxm MB/s", "memcpy MB/s", "xcore MB/s",
      "lat/shm", "bw/shm", "lat/rxm", "bw/rxm", "bw/memcpy", "bw/xcore"
    for (i = 1; i <= n; i++) {
      split(order[i], k, ",")
      a = "ntx," order[i]; s = "shm," order[i]; t = "tcp;ofi_rxm," order[i]
      m = cbw["memcpy," k[2]]; x = cbw["xcore," k[2]]
      printf "%-7s %9s | %9s %9s %9s | %9s %9s %9s | %11s %10s | %7s %7s %7s %7s %9s %8s\n", k[1], k[2],
        us[a], us[s], us[t], bw[a], bw[s], bw[t], m == "" ? "n/a" : m, x == "" ? "n/a" : x,
        r(us[a], us[s]), r(bw[a], bw[s]), r(us[a], us[t]), r(bw[a], bw[t]),
        r3(bw[a], m), r3(bw[a], x)
    }
  }' "$csv" | tee "$out/results.txt"
# the least time any message between the two CPUs takes (no copies.txt:
# memcpy_bw did not build, said above)
[ -s "$out/copies.txt" ] &&
  awk -v s="$SCPU" -v c="$CCPU" '$1 == "#" && $2 == "line" {
    printf "line: a cache line crosses between CPU %s and CPU %s in %s ns, the least any message takes\n", s, c, $3 }' \
    "$out/copies.txt" | tee -a "$out/results.txt"

if command -v gnuplot > /dev/null; then
  for p in $PROVIDERS; do
    for m in $MODES; do
      awk -F, -v p="$p" -v m="$m" '$1 == p && $2 == m { print $3, $4, $5 }' \
        "$csv" > "$out/${p//;/_}-$m.dat"
    done
  done
  copies=
  for c in memcpy xcore; do
    awk -F, -v c="$c" '$1 == c && $2 == "copy" { print $3, $4, $5 }' "$csv" > "$out/$c.dat"
    [ -s "$out/$c.dat" ] && copies="$copies $c"
  done
  {
    echo "set terminal png size 1200,500 noenhanced; set output '$out/pingpong.png'"
    echo "set multiplot layout 1,2; set logscale xy; set grid; set key left top"
    echo "set xlabel 'message size (bytes)'; set ylabel 'latency (usec)'; set title 'fi_pingpong -e rdm latency'"
    printf "plot "; sep=
    for p in $PROVIDERS; do for m in $MODES; do
      printf "%s'%s' using 1:2 with linespoints title '%s %s'" "$sep" "$out/${p//;/_}-$m.dat" "$p" "$m"; sep=", "
    done; done; echo
    echo "set ylabel 'bandwidth (MB/s)'; set title 'fi_pingpong -e rdm bandwidth'"
    printf "plot "; sep=
    for p in $PROVIDERS; do for m in $MODES; do
      printf "%s'%s' using 1:3 with linespoints title '%s %s'" "$sep" "$out/${p//;/_}-$m.dat" "$p" "$m"; sep=", "
    done; done
    for c in $copies; do
      printf "%s'%s' using 1:3 with lines dashtype 2 title '%s'" "$sep" "$out/$c.dat" "$c"; sep=", "
    done; echo
    echo "unset multiplot"
  } | gnuplot && echo "plot: $out/pingpong.png"
fi
