#!/bin/bash
# MPI across two hosts (test/hosts/hosts.sh: namespaces joined by veth
# pairs on a bridge), one rank on each, rank r pinned to CPU r: Open MPI's
# own TCP path (pml ob1 + btl tcp) against Open MPI over ntx (pml cm + mtl
# ofi, FI_PROVIDER=ntx, which takes ntx's tcp domain: the ntb rings carried
# over TCP) in one run, stacks interleaved, REPEAT runs each. Runs
# bench/mpi_bench.c's lat, bw, rate and coll modes and prints, per metric
# and size, the best value of each stack and the ratio ntx/tcp (latency
# and collectives: below 1 is better for ntx; bandwidth and rate: above 1
# is), and writes bench/out/mpi-hosts.csv. Needs root.
# Environment: REPEAT (default 3), MODES (default "lat bw rate coll"),
# QUICK=1 (fewer sizes and iterations), TIMEOUT (seconds per mpirun,
# default 300). Provider: the build in .libs of this repository if there
# is one, else the one installed with libfabric.
# Exit status: non-zero when a run fails.
set -uo pipefail
top=$(cd "$(dirname "$0")/.." && pwd)
out=$top/bench/out
mkdir -p "$out"
. "$top/test/hosts/hosts.sh"
[ -e "$top/.libs/libntx-fi.so" ] && export FI_PROVIDER_PATH=$top/.libs
REPEAT=${REPEAT:-3}
MODES=${MODES:-"lat bw rate coll"}
TIMEOUT=${TIMEOUT:-300}
quick=()
[ "${QUICK:-0}" = 1 ] && quick=(--quick)
bin=$out/mpi_bench-hosts
csv=$out/mpi-hosts.csv
raw=$(mktemp)
trap 'hosts_down; rm -f "$raw"' EXIT

mpicc -O2 -Wall -Wextra -o "$bin" "$top/bench/mpi_bench.c" ||
  { echo "mpi-hosts.sh: build failed" >&2; exit 1; }
hosts_up 2 || { echo "mpi-hosts.sh: hosts did not come up" >&2; exit 1; }
echo "# two hosts ($(hosts_ip 1), $(hosts_ip 2)), one rank each, rank r on" \
  "CPU r; REPEAT=$REPEAT; provider path: ${FI_PROVIDER_PATH:-default};" \
  "load: $(cut -d' ' -f1-3 /proc/loadavg)"

run() { # STACK -> RESULT lines of one mpirun of every mode
  local stack=$1 m
  if [ "$stack" = tcp ]; then
    m=(--mca pml ob1 --mca btl tcp,self
       --mca btl_tcp_if_include "$HOSTS_NET.0/24")
  else
    m=(--mca pml cm --mca mtl ofi --mca mtl_ofi_provider_include ntx
       -x FI_PROVIDER=ntx)
    [ -n "${FI_PROVIDER_PATH:-}" ] && m+=(-x FI_PROVIDER_PATH)
  fi
  # each host's daemon would bind its one rank to CPU 0: pin by rank
  HOSTS_HOLDERS="${HOSTS_HOLDER[*]}" HOSTS_NET=$HOSTS_NET \
    timeout -k 10 "$TIMEOUT" mpirun.openmpi --allow-run-as-root -np 2 \
    --host "$(hosts_ip 1):1,$(hosts_ip 2):1" --bind-to none \
    --mca plm_rsh_agent "$top/test/hosts/rsh-agent.sh" \
    --mca plm_rsh_no_tree_spawn 1 \
    --mca oob_tcp_if_include "$HOSTS_NET.0/24" "${m[@]}" \
    sh -c 'exec taskset -c "$OMPI_COMM_WORLD_RANK" "$0" "$@"' \
    "$bin" "${quick[@]}" $MODES 2>&1
}

failed=0
for ((i = 1; i <= REPEAT; i++)); do
  for stack in tcp ntx; do
    if ! res=$(run $stack); then
      echo "mpi-hosts.sh: $stack run $i failed:" >&2
      printf '%s\n' "$res" | tail -n 5 >&2
      failed=1
      continue
    fi
    printf '%s\n' "$res" | awk -v s=$stack '$1 == "RESULT" {
      print s, $2, $3, $4, $5 }' >> "$raw"
  done
done

# best of the runs: lowest for times, highest for rates
echo "stack,metric,size,value,unit" > "$csv"
awk '{ k = $2 " " $3; hi = ($5 ~ /\/s$/)
       if (!((k, $1) in best) || (hi ? $4 > best[k, $1] : $4 < best[k, $1]))
         best[k, $1] = $4
       unit[k] = $5; if (!(k in seen)) { seen[k] = 1; order[++n] = k } }
     END { for (i = 1; i <= n; i++) { k = order[i]; split(k, p, " ")
             for (s = 1; s <= 2; s++) { st = s == 1 ? "tcp" : "ntx"
               if ((k, st) in best)
                 printf "%s,%s,%s,%s,%s\n", st, p[1], p[2], best[k, st], unit[k] } } }' \
  "$raw" >> "$csv"
printf '%-10s %8s %6s | %12s %12s | %8s\n' metric size unit "tcp btl" ntx ntx/tcp
awk -F, 'NR > 1 { k = $2 "," $3; v[k, $1] = $4; u[k] = $5
                  if (!(k in seen)) { seen[k] = 1; order[++n] = k } }
         END { for (i = 1; i <= n; i++) { k = order[i]; split(k, p, ",")
                 t = v[k, "tcp"]; x = v[k, "ntx"]
                 printf "%-10s %8s %6s | %12.4g %12.4g | %8s\n", p[1], p[2], u[k],
                   t, x, (t > 0 && x > 0) ? sprintf("%.2f", x / t) : "n/a" } }' "$csv"
echo "csv: $csv"
exit $failed
