#!/bin/bash
# MPI benchmark: Open MPI's own shared memory (pml ob1 + btl vader) against
# Open MPI over ntx (pml cm + mtl ofi, FI_PROVIDER=ntx) in one run, ranks
# pinned to cores, and MPICH ch4:ofi over ntx when MPICH_PREFIX names one.
# Builds bench/mpi_bench.c, runs its modes (lat bw rate coll halo init rss)
# at np 2 and coll/halo/init/rss also at np = number of cores, REPEAT times
# each (stacks interleaved), keeps the best value of every metric, prints a
# table with the ratio ntx/vader of the best values and the median of the
# runs' own ratios (paired), writes bench/out/mpi.csv (and the raw
# results in bench/out/mpi-raw.csv, logs in bench/out/mpi-logs/) and, with
# gnuplot, bench/out/mpi.png. halo: a 3-D periodic halo exchange over all
# ranks, time per step for faces of 4 KiB to 256 KiB.
#
# Environment:
#   REPEAT=3             runs per configuration (1 with QUICK=1)
#   MODES="lat bw rate coll halo init rss"
#   NP_MAX=N             the large np (default: cores, from hwloc)
#   QUICK=1              smoke run: fewer sizes and iterations (< 1 min)
#   TIMEOUT=300          seconds allowed to one mpirun (60 with QUICK=1)
#   NTX_PROVIDER_PATH    directory holding libntx-fi.so; default: the
#                        repository's .libs when built, else the installed one
#   MPICH_PREFIX         an MPICH built with ch4:ofi (bin/mpicc, bin/mpiexec)
# Exit status: 0 when every run passed, 1 otherwise.
set -u
top=$(cd "$(dirname "$0")/.." && pwd)
out=$top/bench/out
logs=$out/mpi-logs
mkdir -p "$out" "$logs"
rm -f "$logs"/*.log

QUICK=${QUICK:-0}
if [ "$QUICK" = 1 ]; then
  REPEAT=${REPEAT:-1} TIMEOUT=${TIMEOUT:-60} quick=(--quick)
else
  REPEAT=${REPEAT:-3} TIMEOUT=${TIMEOUT:-300} quick=()
fi
MODES=${MODES:-"lat bw rate coll halo init rss"}
MPIRUN=${MPIRUN:-mpirun.openmpi}
if command -v mpicc.openmpi > /dev/null; then MPICC=${MPICC:-mpicc.openmpi}
else MPICC=${MPICC:-mpicc}; fi
start=$SECONDS
failures=0 failed_runs=()

say() { printf '%s\n' "$*"; }
die() { printf 'mpi.sh: %s\n' "$*" >&2; exit 1; }

for m in $MODES; do
  case $m in lat|bw|rate|coll|halo|init|rss) ;; *) die "unknown mode '$m'";; esac
done
command -v "$MPIRUN" > /dev/null || die "$MPIRUN not found (apt-get install openmpi-bin)"
command -v "$MPICC" > /dev/null || die "$MPICC not found (apt-get install libopenmpi-dev)"

# ---- which ntx --------------------------------------------------------------
if [ -n "${NTX_PROVIDER_PATH:-}" ]; then
  prov_path=$NTX_PROVIDER_PATH
  [ -e "$prov_path/libntx-fi.so" ] || die "no libntx-fi.so in NTX_PROVIDER_PATH=$prov_path"
elif [ -e "$top/.libs/libntx-fi.so" ]; then
  prov_path=$top/.libs
else
  prov_path=
fi
unset FI_PROVIDER_PATH
if [ -n "$prov_path" ]; then
  say "ntx: $prov_path/libntx-fi.so"
else
  say "ntx: the installed provider (FI_PROVIDER_PATH not set)"
fi

# ---- how many cores ---------------------------------------------------------
if command -v hwloc-calc > /dev/null; then
  cores=$(hwloc-calc --number-of core all 2> /dev/null)
elif command -v lstopo-no-graphics > /dev/null; then
  cores=$(lstopo-no-graphics --only core 2> /dev/null | grep -c .)
fi
if ! [ "${cores:-0}" -ge 1 ] 2> /dev/null; then
  say "WARNING: hwloc tools (hwloc-calc, lstopo-no-graphics) missing or not working:"
  say "         counting cores with nproc instead (apt-get install hwloc-nox)"
  cores=$(nproc)
fi
np_max=${NP_MAX:-$cores}
say "cores: $cores, large np: $np_max, repeats: $REPEAT, modes: $MODES$([ "$QUICK" = 1 ] && echo ' (quick)')"

# ---- build ------------------------------------------------------------------
bin_ompi=$out/mpi_bench-ompi
"$MPICC" -O2 -Wall -Wextra -o "$bin_ompi" "$top/bench/mpi_bench.c" ||
  die "build with $MPICC failed"

stacks="vader ntx"
bin_mpich=
if [ -z "${MPICH_PREFIX:-}" ]; then
  say "MPICH: skipped (MPICH_PREFIX not set)"
elif ! [ -x "$MPICH_PREFIX/bin/mpicc" ] || ! [ -x "$MPICH_PREFIX/bin/mpiexec" ]; then
  say "MPICH: FAILED, no bin/mpicc or bin/mpiexec under MPICH_PREFIX=$MPICH_PREFIX"
  failures=$((failures + 1))
  failed_runs+=("MPICH: no bin/mpicc or bin/mpiexec")
else
  bin_mpich=$out/mpi_bench-mpich
  if [ -x "$MPICH_PREFIX/bin/mpichversion" ] &&
     ! "$MPICH_PREFIX/bin/mpichversion" | grep -q 'ch4:ofi'; then
    say "MPICH: WARNING, mpichversion does not mention ch4:ofi"
  fi
  if "$MPICH_PREFIX/bin/mpicc" -O2 -Wall -Wextra -o "$bin_mpich" \
       "$top/bench/mpi_bench.c"; then
    stacks="$stacks mpich"
  else
    say "MPICH: FAILED to build with $MPICH_PREFIX/bin/mpicc"
    failures=$((failures + 1)) bin_mpich=''
    failed_runs+=("MPICH: build")
  fi
fi

# ---- launching --------------------------------------------------------------
# launch STACK NP -> the command line in the array cmd (without program)
launch() {
  local stack=$1 np=$2 bind
  if [ "$stack" = mpich ]; then
    cmd=(timeout -k 10 "$TIMEOUT" "$MPICH_PREFIX/bin/mpiexec" -n "$np"
         -bind-to core -map-by core -genv FI_PROVIDER ntx
         -genv MPIR_CVAR_NOLOCAL 1 -genv NTX_BENCH_T0 "$NTX_BENCH_T0")
    [ -n "$prov_path" ] && cmd+=(-genv FI_PROVIDER_PATH "$prov_path")
    cmd+=("$bin_mpich")
    return
  fi
  if [ "$np" -gt "$cores" ]; then
    bind=(--oversubscribe --bind-to core:overload-allowed --map-by core)
  else
    bind=(--bind-to core --map-by core)
  fi
  cmd=(timeout -k 10 "$TIMEOUT" "$MPIRUN" --allow-run-as-root -np "$np"
       "${bind[@]}" -x NTX_BENCH_T0)
  if [ "$stack" = vader ]; then
    cmd+=(--mca pml ob1 --mca btl "vader,self")
  else
    cmd+=(--mca pml cm --mca mtl ofi --mca mtl_ofi_provider_include ntx
          -x FI_PROVIDER=ntx)
    [ -n "$prov_path" ] && cmd+=(-x "FI_PROVIDER_PATH=$prov_path")
  fi
  cmd+=("$bin_ompi")
}

fail_log() { # LOG WHAT
  if [ -s "$1" ]; then
    say "FAIL: $2 (log $1), last lines:"
    grep -v 'mca: base:\|mca:base:' "$1" | tail -20 | sed 's/^/    /'
  else
    say "FAIL: $2 (log $1 is empty)"
  fi
  failures=$((failures + 1))
  failed_runs+=("$2")
}

# ---- sanity: is ntx what runs? ------------------------------------------------
export NTX_BENCH_T0=0
sanity_ok=1
for stack in $stacks; do
  log=$logs/sanity-$stack.log
  launch "$stack" 2
  extra=()
  case $stack in
    vader) extra=(--report-bindings) ;;
    ntx) extra=(--report-bindings --mca mtl_base_verbose 100 --mca mtl_ofi_verbose 100) ;;
  esac
  if [ "$stack" = mpich ]; then
    # the program is the last word of cmd; the summary goes before it
    env MPIR_CVAR_DEBUG_SUMMARY=1 "${cmd[@]:0:${#cmd[@]}-1}" \
      -genv MPIR_CVAR_DEBUG_SUMMARY 1 "${cmd[-1]}" --quick rss > "$log" 2>&1
  else
    "${cmd[@]:0:${#cmd[@]}-1}" "${extra[@]}" "${cmd[-1]}" --quick rss > "$log" 2>&1
  fi
  rc=$?
  if [ $rc != 0 ] || ! grep -q '^RESULT' "$log"; then
    fail_log "$log" "sanity run of $stack (rc=$rc)"
    [ "$stack" != mpich ] && sanity_ok=0
    [ "$stack" = mpich ] && stacks=${stacks% mpich}
    continue
  fi
  case $stack in
    ntx)
      if grep -q 'Selected component \[ofi\]' "$log" &&
         grep -q 'mtl:ofi:prov: ntx' "$log"; then
        dom=$(sed -n 's/.*mtl:ofi:provider: \([^ ]*\).*/\1/p' "$log" | sort -u | paste -sd, -)
        say "sanity: Open MPI runs the ofi MTL on ntx (ntx domain chosen by Open MPI: ${dom:-?})"
      else
        say "FAIL: Open MPI did NOT select the ofi MTL on ntx (log $log):"
        grep 'mtl:ofi\|Selected component' "$log" | sed 's/^/    /'
        failures=$((failures + 1)) sanity_ok=0
      fi ;;
    mpich)
      if grep -qi 'provider.*: *ntx' "$log"; then
        say "sanity: MPICH runs on libfabric provider ntx (MPIR_CVAR_NOLOCAL=1)"
      else
        say "FAIL: MPICH's debug summary does not name ntx as its provider (log $log)"
        failures=$((failures + 1)) stacks=${stacks% mpich}
        failed_runs+=("MPICH: ntx not confirmed as its provider")
      fi ;;
  esac
  if [ "$stack" != mpich ]; then
    b=$(sed -n 's/.*MCW rank [01] bound to \(.*\)/\1/p' "$log" | sort -u | wc -l)
    [ "$b" = 2 ] || say "WARNING: $stack np 2: ranks 0 and 1 not on two different cores"
  fi
done
[ $sanity_ok = 1 ] || die "sanity runs failed: ntx is not what runs, no benchmark"

# ---- timed runs -------------------------------------------------------------
raw=$out/mpi-raw.csv
echo "stack,np,rep,metric,size,value,unit" > "$raw"

run_one() { # STACK NP MODE REP
  local stack=$1 np=$2 mode=$3 rep=$4 log rc
  log=$logs/$stack-np$np-$mode-$rep.log
  NTX_BENCH_T0=$(date +%s%N)
  export NTX_BENCH_T0
  launch "$stack" "$np"
  "${cmd[@]}" "${quick[@]}" "$mode" > "$log" 2>&1
  rc=$?
  if [ $rc != 0 ] || ! grep -q '^RESULT' "$log"; then
    fail_log "$log" "$stack np $np $mode run $rep (rc=$rc$([ $rc = 124 ] && echo ', timed out'))"
    return
  fi
  awk -v s="$stack" -v np="$np" -v r="$rep" '$1 == "RESULT" {
    print s "," np "," r "," $2 "," $3 "," $4 "," $5 }' "$log" >> "$raw"
}

sets=("2:$MODES")
big=
for m in $MODES; do case $m in coll|halo|init|rss) big="$big $m" ;; esac; done
if [ -n "$big" ]; then
  if [ "$np_max" -eq 2 ]; then
    say "note: the large np is 2, the same as np 2: coll/halo/init/rss run once, at np 2"
  elif [ "$np_max" -lt 2 ]; then
    say "note: the large np is $np_max (< 2): coll/halo/init/rss run at np 2 only"
  else
    sets+=("$np_max:${big# }")
  fi
fi

for set in "${sets[@]}"; do
  np=${set%%:*}
  for mode in ${set#*:}; do
    say "running np $np $mode ($REPEAT x: $stacks)"
    for ((rep = 1; rep <= REPEAT; rep++)); do
      for stack in $stacks; do
        run_one "$stack" "$np" "$mode" "$rep"
      done
    done
  done
done

# ---- best of the repeats, table, csv ---------------------------------------
csv=$out/mpi.csv
awk -F, -v stacks="$stacks" '
  function lower(u) { return u == "us" || u == "ms" || u == "MiB" }
  NR > 1 {
    k = $2 SUBSEP $4 SUBSEP $5
    if (!(k in unit)) { order[++n] = k; unit[k] = $7 }
    c = k SUBSEP $1; v = $6 + 0
    if (!(c in best) || (lower($7) ? v < best[c] : v > best[c])) best[c] = v
    val[c, $3] = v; if ($3 > nrep) nrep = $3
  }
  # the median over the repeats of the ratio of each repeat: the stacks of
  # a repeat run back to back, so a machine whose speed drifts between
  # repeats moves both sides of each ratio alike
  function paired(a, b,   i, m, t, r, x) {
    m = 0
    for (i = 1; i <= nrep; i++)
      if ((a, i) in val && (b, i) in val && val[b, i] > 0)
        r[++m] = val[a, i] / val[b, i]
    if (!m) return "n/a"
    for (i = 2; i <= m; i++)
      for (t = i; t > 1 && r[t - 1] > r[t]; t--) {
        x = r[t]; r[t] = r[t - 1]; r[t - 1] = x
      }
    return sprintf("%.3f", m % 2 ? r[(m + 1) / 2] : (r[m / 2] + r[m / 2 + 1]) / 2)
  }
  END {
    ns = split(stacks, st, " ")
    printf "metric,np,size,unit,better"
    for (i = 1; i <= ns; i++) printf ",%s", (st[i] == "mpich" ? "mpich-ntx" : st[i])
    printf ",ntx/vader"
    if (ns > 2) printf ",mpich-ntx/vader"
    printf ",paired"
    if (ns > 2) printf ",mpich-paired"
    printf "\n"
    for (j = 1; j <= n; j++) {
      split(order[j], f, SUBSEP)
      printf "%s,%s,%s,%s,%s", f[2], f[1], f[3], unit[order[j]],
        lower(unit[order[j]]) ? "lower" : "higher"
      for (i = 1; i <= ns; i++) {
        c = order[j] SUBSEP st[i]
        printf ",%s", (c in best) ? best[c] : "FAIL"
      }
      for (i = 2; i <= ns; i++) {
        a = order[j] SUBSEP st[i]; b = order[j] SUBSEP "vader"
        ok = a in best && b in best && best[b] > 0
        printf ",%s", ok ? sprintf("%.3f", best[a] / best[b]) : "n/a"
      }
      for (i = 2; i <= ns; i++)
        printf ",%s", paired(order[j] SUBSEP st[i], order[j] SUBSEP "vader")
      printf "\n"
    }
  }' "$raw" > "$csv"

table() {
  awk -F, '
    function human(s) {
      if (s >= 1048576 && s % 1048576 == 0) return (s / 1048576) "M"
      if (s >= 1024 && s % 1024 == 0) return (s / 1024) "K"
      return s
    }
    function num(v) {
      if (v !~ /^[0-9.e+-]+$/) return v
      if (v >= 1e6) return sprintf("%.3g", v)
      if (v >= 100) return sprintf("%.0f", v)
      if (v >= 10) return sprintf("%.1f", v)
      return sprintf("%.2f", v)
    }
    function verdict(r, better) {
      if (r == "n/a") return ""
      if (r > 0.97 && r < 1.03) return "same"
      return ((better == "lower") == (r < 1)) ? "better" : "worse"
    }
    NR == 1 {
      nc = NF
      for (i = 1; i <= NF; i++) if ($i == "ntx/vader") rc = i
      printf "%-11s %4s %5s %-6s %-6s", "metric", "np", "size", "unit", "better"
      for (i = 6; i <= NF; i++) printf " %10s", $i
      printf "  %s\n", "ntx is"
      next
    }
    {
      printf "%-11s %4s %5s %-6s %-6s", $1, $2, human($3), $4, $5
      for (i = 6; i <= nc; i++) printf " %10s", num($i)
      printf "  %s\n", verdict($rc, $5)
    }' "$csv"
}

say ""
say "=== MPI benchmark: Open MPI ob1+vader vs Open MPI cm+ofi+ntx$( [[ $stacks == *mpich* ]] && echo ' vs MPICH ch4:ofi+ntx') ==="
say "best of $REPEAT run(s) per configuration; ranks pinned one per core"
say "ratio = ntx / vader:"
say "  time and memory (us, ms, MiB; 'better' = lower): ratio < 1 means ntx is faster / smaller"
say "  throughput (MB/s, msg/s; 'better' = higher):     ratio > 1 means ntx is faster"
say "paired = median over the runs of each run's ratio (the stacks of a run go"
say "  back to back: robust to this machine's speed changing between runs)"
say "lat = median rtt/2, lat_min = minimum rtt/2; bw = window of 64 sends + ack;"
say "rate = 64 Isends in flight; allreduce/alltoall size = bytes per call / per rank;"
say "halo = one step of a 3-D periodic halo exchange (MPI_Dims_create grid, 6 faces"
say "  to and from 6 neighbours, 12 requests, one MPI_Waitall), size = bytes per face;"
say "init = MPI_Init + first 8 B MPI_Alltoall from main(), init_launch = same from"
say "before mpirun, init_mpi = MPI_Init alone; rss_* = VmHWM after all-pairs 8 KiB"
table | tee "$out/mpi.txt"
say ""
say "csv: $csv (raw: $raw)"

# ---- plot -------------------------------------------------------------------
if command -v gnuplot > /dev/null; then
  term=png
  gnuplot -e 'set terminal pngcairo' > /dev/null 2>&1 && term=pngcairo
  for stack in $stacks; do
    awk -F, -v s="$stack" '$1 == s && $2 == 2 && $4 == "lat" && $5 > 0 { print $5, $6 }' "$raw" |
      sort -n -k1,1 -k2,2g | awk '$1 != last { print; last = $1 }' > "$out/mpi-lat-$stack.dat"
    awk -F, -v s="$stack" '$1 == s && $2 == 2 && $4 == "bw" { print $5, $6 }' "$raw" |
      sort -n -k1,1 -k2,2gr | awk '$1 != last { print; last = $1 }' > "$out/mpi-bw-$stack.dat"
  done
  title() { case $1 in vader) echo "Open MPI ob1+vader" ;; ntx) echo "Open MPI cm+ofi+ntx" ;; *) echo "MPICH ch4:ofi+ntx" ;; esac; }
  series() { # METRIC -> gnuplot plot arguments for the stacks with data
    local sep='' stack
    for stack in $stacks; do
      [ -s "$out/mpi-$1-$stack.dat" ] || continue
      printf "%s'%s' using 1:2 with linespoints lw 2 title '%s'" "$sep" \
        "$out/mpi-$1-$stack.dat" "$(title "$stack")"
      sep=", "
    done
  }
  lat_plot=$(series lat) bw_plot=$(series bw)
  panels=0
  [ -n "$lat_plot" ] && panels=$((panels + 1))
  [ -n "$bw_plot" ] && panels=$((panels + 1))
  rm -f "$out/mpi.png"
  if [ $panels = 0 ]; then
    say "plot: skipped (no lat or bw results at np 2)"
  else
    {
      echo "set terminal $term size $((700 * panels)),560 noenhanced font ',11'"
      echo "set output '$out/mpi.png'"
      echo "set multiplot layout 1,$panels title 'MPI between 2 pinned ranks (best of $REPEAT)'"
      echo "set logscale xy; set grid xtics ytics mxtics mytics; set key left top"
      echo "set xlabel 'message size (bytes)'"
      echo "set xtics ('1' 1, '8' 8, '64' 64, '512' 512, '4K' 4096, '32K' 32768, '256K' 262144, '1M' 1048576, '4M' 4194304)"
      if [ -n "$lat_plot" ]; then
        echo "set ylabel 'latency, median rtt/2 (us)'"
        echo "set title 'ping-pong latency, 0 B not shown (lower is better)'"
        echo "plot $lat_plot"
      fi
      if [ -n "$bw_plot" ]; then
        echo "set ylabel 'bandwidth (MB/s)'"
        echo "set title 'windowed bandwidth, 64 in flight (higher is better)'"
        echo "plot $bw_plot"
      fi
      echo "unset multiplot"
    } > "$out/mpi.gp"
    if gnuplot "$out/mpi.gp" 2> "$out/mpi-gnuplot.log"; then
      say "plot: $out/mpi.png ($term)"
    else
      say "plot: gnuplot failed, see $out/mpi-gnuplot.log"
    fi
  fi
else
  say "plot: skipped (gnuplot not installed)"
fi

say "time: $((SECONDS - start)) s"
if [ $failures != 0 ]; then
  say "mpi.sh: $failures failure(s):"
  for f in "${failed_runs[@]}"; do say "  $f"; done
  exit 1
fi
