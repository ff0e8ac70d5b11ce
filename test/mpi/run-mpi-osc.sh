#!/bin/bash
# Open MPI one-sided over ntx: osc rdma on the ofi BTL. Builds
# test/mpi/mpi_osc.c and runs it at np 2 and 4, checking from the MCA
# verbose output that the ofi BTL really runs on ntx and that osc rdma made
# the windows. With NTX_MPI_NETWORK=1 the ranks talk through the network back
# end; with NTX_MPI_DOMAIN=NAME ntx lists only that domain (FI_NTX_DOMAINS),
# e.g. udp.
# Usage: test/mpi/run-mpi-osc.sh [BUILD_DIR]   (default: the repository)
#
# Open MPI 4.1.4 specifics (Debian's openmpi-mca-params.conf disables
# btl ofi and osc pt2pt, so everything is named on the command line):
# - btl ofi defaults to one-sided only (caps FI_RMA|FI_ATOMIC) and then
#   pml ob1 has no path to the other ranks; btl_ofi_mode 2 adds FI_MSG
#   and carries the two-sided traffic too.
# - A non-debug build prints neither the ofi provider nor osc rdma's btl.
#   The evidence used: btl_ofi_provider_include=ntx (echoed by
#   btl_ofi_verbose) with FI_PROVIDER=ntx; libfabric's "Opened fabric: ntx"
#   (FI_LOG_LEVEL=info) in every rank; "select: init of component ofi
#   returned success" (printed even when no provider fits, so also) "mca:
#   bml: Using ofi btl for send to" (a module exists and reaches the peers;
#   btl self cannot); for osc rdma the window names it sets, "rdma window
#   N" (printed by mpi_osc), and its "rdma component destroying window with
#   id N" for every window in every rank (osc_base_verbose).
# - On one node osc rdma maps MPI_Win_allocate memory of every local rank
#   and uses CPU atomics for its locks: only MPI_Win_create windows move
#   data and atomics through the btl (ntx) for ranks other than self.
# - osc rdma < 4.1.5 crashes in MPI_Compare_and_swap on locally mapped
#   targets; mpi_osc skips those (and says so in its "ok" lines).
# - btl ofi asks for neither FI_LOCAL_COMM nor FI_REMOTE_COMM, so it gets
#   both ntx domains (shm, tcp), which Open MPI's common ofi code takes for
#   two NICs and spreads the local ranks over (the ofi MTL asks for
#   FI_REMOTE_COMM and always gets tcp). With NTX_MPI_NETWORK=1 that mixes
#   endpoints of both domains.
set -u
top=$(cd "$(dirname "$0")/../.." && pwd)
build=${1:-$top}
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
export FI_PROVIDER_PATH=$build/.libs
mpicc -O2 -Wall -o "$out/mpi_osc" "$top/test/mpi/mpi_osc.c" || exit 1
extra=()
[ "${NTX_MPI_NETWORK:-0}" = 1 ] && extra=(-x FI_NTX_LOCAL_VIA_NETWORK=1)
[ -n "${NTX_MPI_DOMAIN:-}" ] && extra+=(-x "FI_NTX_DOMAINS=$NTX_MPI_DOMAIN")
[ -n "${OSC_CAS_LOCAL:-}" ] && extra+=(-x OSC_CAS_LOCAL)
export OSC_TIMEOUT=${OSC_TIMEOUT:-120}
pass=0 fail=0
for np in 2 4; do
  log=$out/np$np.log
  timeout 600 mpirun.openmpi --allow-run-as-root --oversubscribe -np "$np" \
    --mca pml ob1 --mca btl self,ofi --mca btl_ofi_mode 2 \
    --mca btl_ofi_provider_include ntx --mca osc rdma \
    --mca btl_base_verbose 100 --mca osc_base_verbose 100 \
    --mca btl_ofi_verbose 1 -x FI_PROVIDER=ntx -x FI_PROVIDER_PATH \
    -x FI_LOG_LEVEL=info -x OSC_TIMEOUT "${extra[@]}" "$out/mpi_osc" \
    > "$log" 2>&1
  rc=$?
  why=()
  grep -q 'btl:ofi:provider_include = "ntx"' "$log" ||
    why+=("btl ofi provider_include is not ntx")
  [ "$(grep -c "Opened fabric: ntx" "$log")" -ge "$np" ] ||
    why+=("not every rank opened an ntx fabric")
  grep -q "select: init of component ofi returned success" "$log" ||
    why+=("btl ofi did not initialise")
  grep -q "mca: bml: Using ofi btl for send to" "$log" ||
    why+=("no rank reaches another through btl ofi")
  if [ -n "${NTX_MPI_DOMAIN:-}" ]; then
    [ "$(grep -c "ntx_domain_open.*domain $NTX_MPI_DOMAIN:" "$log")" -ge "$np" ] ||
      why+=("not every rank opened ntx domain $NTX_MPI_DOMAIN")
    ! grep "ntx_domain_open.*domain " "$log" | grep -qv "domain $NTX_MPI_DOMAIN:" ||
      why+=("a rank opened another ntx domain than $NTX_MPI_DOMAIN")
  fi
  wins=$(grep -c '^window .*: name ' "$log")
  rdma=$(grep -c '^window .*: name "rdma window' "$log")
  freed=$(grep -c "rdma component destroying window with id" "$log")
  [ "$wins" -gt 0 ] && [ "$wins" = "$rdma" ] &&
    [ "$freed" = $((wins * np)) ] ||
    why+=("osc rdma made $rdma of $wins windows, freed $freed of $((wins * np))")
  grep -q "^PASS mpi_osc np=$np\$" "$log" || why+=("mpi_osc did not PASS")
  [ $rc = 0 ] || why+=("exit status $rc")
  if [ ${#why[@]} = 0 ]; then
    echo "PASS mpi_osc np=$np (btl ofi on ntx, osc rdma, $wins windows)"
    pass=$((pass + 1))
  else
    echo "FAIL mpi_osc np=$np: $(IFS=';'; echo "${why[*]}")"
    fail=$((fail + 1))
    grep -E "FAIL|ERROR|rror|abort" "$log" |
      grep -v "^\[.*mca:\|^libfabric:.*<info>" | head -40
    echo "--- last lines:"
    grep -v "^\[.*mca:\|select: \|btl_ofi_component.c\|^libfabric:.*<info>" \
      "$log" | tail -30
  fi
  skipped=$(grep -o "note: [0-9]* MPI_Compare_and_swap" "$log" |
    awk '{ n += $2 } END { print n + 0 }')
  [ "$skipped" = 0 ] || echo "  note: $skipped MPI_Compare_and_swap calls" \
    "skipped on locally mapped targets (Open MPI < 4.1.5 osc/rdma bug)"
done
echo "mpi osc: $pass passed, $fail failed"
[ $fail = 0 ]
