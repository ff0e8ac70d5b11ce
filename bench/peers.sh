#!/bin/bash
# How ntx scales with the number of local peers (bench/peers.c): latency of
# an 8 B ping-pong with K idle peers per endpoint (K = 0, 15, 63, 255, ratio
# to K = 0), connect time to 15/63/255 fresh peers, and memory per peer
# (RSS and PSS of the measuring process after an 8 KiB all-to-all), for the
# shm and the tcp domain. Each point is REPEAT runs, each run a fresh pair
# of processes pinned to A_CPU and B_CPU (the idle runs hold every K in
# one pair, taking turns; their ratios are each run's to its own K = 0). Prints the program's tables, a
# summary with ratios, and writes bench/out/peers.csv (domain, measurement,
# name, value, unit) and bench/out/peers-DOMAIN-MEASUREMENT.log.
#
# Environment: REPEAT (default 3), DOMAINS ("shm tcp"), MEASURES ("idle
# connect mem"), A_CPU/B_CPU (0/1), TIMEOUT (seconds per program run,
# default 900; each process of a pair also stops itself after PAIR_TIMEOUT,
# default 300), PEERS_ARGS (more options for bench/out/peers, see -h).
# Provider: NTX_PROVIDER_PATH if set, else the build in .libs of this
# repository if there is one, else the one installed with libfabric.
# FI_NTX_MAX_PEERS is left alone unless a run needs more peers than the
# provider's default (256 by default; peers prints what it did).
# Exit status: non-zero if the build or any run fails.
set -u
top=$(cd "$(dirname "$0")/.." && pwd)
out=$top/bench/out
mkdir -p "$out"
if [ -n "${NTX_PROVIDER_PATH:-}" ]; then
  export FI_PROVIDER_PATH=$NTX_PROVIDER_PATH
elif [ -e "$top/.libs/libntx-fi.so" ]; then
  export FI_PROVIDER_PATH=$top/.libs
fi
export FI_PROVIDER=ntx
REPEAT=${REPEAT:-3}
DOMAINS=${DOMAINS:-"shm tcp"}
MEASURES=${MEASURES:-"idle connect mem"}
A_CPU=${A_CPU:-0}
B_CPU=${B_CPU:-1}
TIMEOUT=${TIMEOUT:-900}
PAIR_TIMEOUT=${PAIR_TIMEOUT:-300}
read -ra extra <<< "${PEERS_ARGS:-}"
read -ra cflags <<< "$(pkg-config --cflags libfabric)"
read -ra libs <<< "$(pkg-config --libs libfabric)"
bin=$out/peers
csv=$out/peers.csv
start=$SECONDS

# build: warnings count as a failure
if ! warn=$(timeout 300 cc -O2 -Wall -Wextra "${cflags[@]}" -o "$bin" "$top/bench/peers.c" \
    "${libs[@]}" 2>&1); then
  printf '%s\n' "$warn" >&2
  echo "peers.sh: build failed" >&2
  exit 1
fi
if [ -n "$warn" ]; then
  printf '%s\n' "$warn" >&2
  echo "peers.sh: the build has warnings" >&2
  exit 1
fi

echo "# provider path: ${FI_PROVIDER_PATH:-the default of libfabric}; REPEAT=$REPEAT;" \
  "cpus $A_CPU/$B_CPU; $(nproc) cpus online; load: $(cut -d' ' -f1-3 /proc/loadavg)"
failed=0
echo "domain,measurement,name,value,unit" > "$csv"
for dom in $DOMAINS; do
  for m in $MEASURES; do
    log=$out/peers-$dom-$m.log
    echo
    echo "=== $dom $m"
    timeout -k 10 "$TIMEOUT" "$bin" -d "$dom" -r "$REPEAT" -a "$A_CPU" \
      -b "$B_CPU" -T "$PAIR_TIMEOUT" "${extra[@]}" "$m" > "$log" 2>&1
    rc=$?
    grep -v '^RESULT ' "$log"
    if [ "$rc" -ne 0 ]; then
      [ "$rc" -eq 124 ] && echo "peers.sh: $dom $m timed out after ${TIMEOUT}s" >&2
      echo "peers.sh: $dom $m FAILED (exit $rc), log: $log" >&2
      failed=1
    fi
    # RESULT DOMAIN.MEASUREMENT.NAME VALUE UNIT -> csv
    awk '$1 == "RESULT" { d = $2; sub(/\..*/, "", d); r = substr($2, length(d) + 2)
           m = r; sub(/\..*/, "", m); n = substr(r, length(m) + 2)
           print d "," m "," n "," $3 "," $4 }' "$log" >> "$csv"
  done
done

echo
echo "=== summary (ratios: to K=0 within a domain; tcp/shm across domains)"
awk -F, '
  NR == 1 { next }
  { v[$1 "," $2 "," $3] = $4; dom[$1] = 1 }
  $2 == "idle" && $3 ~ /\.median$/ { k = $3; sub(/\..*/, "", k); if (!(k in ik)) { ik[k] = 1; ilist[++ni] = k } }
  $2 == "connect" && $3 ~ /\.best$/ { n = $3; sub(/\..*/, "", n); if (!(n in cn)) { cn[n] = 1; clist[++nc] = n } }
  $2 == "mem" && $3 ~ /_per_peer$/ { f = $3; if (!(f in mf)) { mf[f] = 1; mlist[++nm] = f } }
  function g(d, m, n) { return (d "," m "," n) in v ? v[d "," m "," n] : "" }
  function r(a, b) { return (a == "" || b == "" || b == 0) ? "n/a" : sprintf("%.2f", a / b) }
  END {
    if (ni) {
      printf "\nidle peers: 8 B half round trip (us), median / min, ratio to K=0; bat: median of\n"
      printf "batch means (50 round trips a clock reading: no 5 ns step), ratio to K=0\n"
      printf "%-6s | %8s %8s %7s %7s %7s | %8s %8s %7s %7s %7s | %8s\n", "K", "shm med", "shm min",
        "med/K0", "min/K0", "bat/K0", "tcp med", "tcp min", "med/K0", "min/K0", "bat/K0", "tcp/shm"
      for (i = 1; i <= ni; i++) {
        k = ilist[i]
        printf "%-6s | %8s %8s %7s %7s %7s | %8s %8s %7s %7s %7s | %8s\n", substr(k, 2),
          g("shm", "idle", k ".median"), g("shm", "idle", k ".min"),
          g("shm", "idle", k ".median_ratio"), g("shm", "idle", k ".min_ratio"),
          g("shm", "idle", k ".batched_ratio"),
          g("tcp", "idle", k ".median"), g("tcp", "idle", k ".min"),
          g("tcp", "idle", k ".median_ratio"), g("tcp", "idle", k ".min_ratio"),
          g("tcp", "idle", k ".batched_ratio"),
          r(g("tcp", "idle", k ".median"), g("shm", "idle", k ".median"))
      }
    }
    if (nc) {
      printf "\nconnect: first send to last send completion, best / median (ms), best per peer (us)\n"
      printf "%-6s | %8s %8s %8s | %8s %8s %8s | %8s\n", "N", "shm best", "shm med",
        "us/peer", "tcp best", "tcp med", "us/peer", "tcp/shm"
      for (i = 1; i <= nc; i++) {
        n = clist[i]
        printf "%-6s | %8s %8s %8s | %8s %8s %8s | %8s\n", substr(n, 2),
          g("shm", "connect", n ".best"), g("shm", "connect", n ".median"),
          g("shm", "connect", n ".best_per_peer"),
          g("tcp", "connect", n ".best"), g("tcp", "connect", n ".median"),
          g("tcp", "connect", n ".best_per_peer"),
          r(g("tcp", "connect", n ".best"), g("shm", "connect", n ".best"))
      }
    }
    if (nm) {
      printf "\nmemory of the measuring process per peer (KiB): RSS counts shared ring pages in full, PSS half\n"
      printf "%-36s | %10s %10s\n", "phase.K.field", "shm", "tcp"
      for (i = 1; i <= nm; i++)
        printf "%-36s | %10s %10s\n", mlist[i], g("shm", "mem", mlist[i]), g("tcp", "mem", mlist[i])
    }
  }' "$csv" | tee "$out/peers.txt"

echo
echo "csv: $csv; run time $((SECONDS - start)) s"
if [ "$failed" -ne 0 ]; then
  echo "peers.sh: some runs FAILED" >&2
  exit 1
fi
